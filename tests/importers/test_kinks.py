"""Every convention of planner/ops/kinks.py at its breakpoints, on the reference interpreter,
against torch.autograd (tests/helpers/kink_cases.py); the compiled CPU executor runs the same
cases in one build: tests/codegen/test_kinks_executor.py."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from planner.ops import REGISTRY  # noqa: E402
from planner.ops.kinks import KINKS  # noqa: E402
from tests.helpers.kink_cases import check_kink  # noqa: E402


@pytest.mark.parametrize("kink", KINKS, ids=[k.name for k in KINKS])
def test_gradient_at_breakpoints_is_torchs(kink):
    status, detail = check_kink(kink)
    assert (status, detail) == ("pass", ""), f"{kink.name} ({kink.rule}): {status}: {detail}"


def test_every_entry_names_planner_ops():
    missing = {k.name: op for k in KINKS for op in k.ops if op not in REGISTRY}
    assert missing == {}
