"""The OpInfos issue 86's rules and ops touch (grid_sample, the integer and float argmax, the
scans and pools of empty tensors, batch statistics), their passing samples through the
generated CPU executor as tests/codegen/test_opinfo_executor.py runs the fast subset's: one
build, each output and gradient held to torch's float64 value."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")

from tests.helpers.opinfo_executor import check_on_cpu  # noqa: E402

NAMES = ("nn.functional.grid_sample", "grid_sampler_2d", "grid_sampler_3d", "argmax",
         "argmin", "cumprod", "masked.cumprod", "nn.functional.avg_pool1d",
         "nn.functional.batch_norm", "nn.functional.instance_norm", "__getitem__")


@pytest.mark.slow  # half a minute of compiling one merged graph
def test_their_passing_samples_on_the_cpu_executor(tmp_path):
    check_on_cpu(NAMES, tmp_path, 20)
