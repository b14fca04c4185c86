"""planner/ops/kinks.py's table as torch calls: each entry's inputs (its breakpoints, a point
each side, NaN where torch's rule says where NaN goes) through the OpInfo harness
(tests/importers/opinfo_cases.check_sample: exported, imported, run forward and backward on the
reference interpreter, held to torch.autograd in float64 with torch's float32 noise as the
tolerance). A convention that differs gives a gradient off by O(1), far outside it."""

from __future__ import annotations

import operator
from types import SimpleNamespace
from typing import Any

from planner.ops.kinks import Kink


def torch_call(kink: Kink) -> tuple[Any, SimpleNamespace]:
    """(the op, an OpInfo-style sample) of one table entry."""
    import torch

    fn = operator.attrgetter(kink.call)(torch)
    floats = [torch.tensor(v, dtype=torch.float32) for v in kink.inputs]
    if kink.shape is not None:
        floats[0] = floats[0].reshape(kink.shape)
    if kink.name == "prelu":  # one slope: a (1,) weight
        floats[1] = floats[1].reshape(1)
    ints = [torch.tensor(v, dtype=torch.int64) for v in kink.ints]
    args = (*floats[1:], *ints)
    return fn, SimpleNamespace(input=floats[0], args=args, kwargs=dict(kink.kwargs))


def check_kink(kink: Kink, runs: list | None = None) -> tuple[str, str]:
    """check_sample of the entry: ("pass", "") or (status, what is off)."""
    from tests.importers.opinfo_cases import check_sample

    fn, sample = torch_call(kink)
    return check_sample(SimpleNamespace(op=fn, supports_autograd=True), sample, runs=runs)
