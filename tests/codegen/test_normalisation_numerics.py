"""kl_div, log_softmax and softmax on the compiled CPU executor within 2x PyTorch's own float32
error (issue 57, item 7): each case's forward and its inputs' gradients, the error of each the
max |value - torch float64| summed over seeds, ours at most twice torch float32's.

A single sample's max error is one draw of a rounding walk (two float32 implementations differ
by 3x on one seed by chance); summed over seeds the ratio is steady. What held it above 2x:
oneDNN's Log (~10x torch's error: kl_div's t log t and its target gradient), oneDNN's float
sums in ReduceSum over a whole tensor (18x on 16,000 elements) and in SoftmaxGrad (4x over
1000 classes); the kernels now use libm's logf and double sums (templates/cpu/runtime/kernels:
math.cpp, reduce.cpp, eltwise.cpp), as LogSoftmax's does."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402

from tests.codegen.helpers import build_module  # noqa: E402
from tests.codegen.merged_graph import merge  # noqa: E402
from tests.importers.opinfo_cases import check_sample  # noqa: E402

SEEDS = 4
LIMIT = 2.0  # the line: twice torch's float32 error

CASES = {
    "kl(log_softmax, softmax) batchmean":
        lambda z, w: F.kl_div(F.log_softmax(z, 1), F.softmax(w, 1), reduction="batchmean"),
    "kl sum": lambda z, w: F.kl_div(z.clamp(-20, 0), w.abs() / 4, reduction="sum"),
    "kl none": lambda z, w: F.kl_div(z.clamp(-20, 0), w.abs() / 4, reduction="none"),
    "kl log_target sum":
        lambda z, w: F.kl_div(z.clamp(-20, 0), -w.abs(), reduction="sum", log_target=True),
    "log_softmax": lambda z, w: F.log_softmax(z, 1) * w,
    "softmax": lambda z, w: F.softmax(z, 1) * w,
}


def _run(name: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    z, w = (torch.randn(16, 1000, generator=g) * 3 for _ in range(2))
    runs: list = []
    status = check_sample(SimpleNamespace(op=CASES[name], supports_autograd=True),
                          SimpleNamespace(input=z, args=(w,), kwargs={}), runs=runs)
    assert status == ("pass", "") and runs, (name, status)
    return runs[0]


def test_within_twice_torchs_float32_error(tmp_path):
    runs = [(name, _run(name, seed)) for name in CASES for seed in range(SEEDS)]
    merged = merge("numerics", {f"s{k}/": r.graph for k, (_, r) in enumerate(runs)})
    executor = build_module(merged, tmp_path / "numerics").Executor()
    executor.load_params({f"s{k}/{n}": v for k, (_, r) in enumerate(runs)
                          for n, v in r.params.items()})
    read = {t.name for t in merged.by_role("input")}
    out = executor.forward({f"s{k}/{n}": v for k, (_, r) in enumerate(runs)
                            for n, v in r.feeds.items() if f"s{k}/{n}" in read})
    errors: dict[tuple[str, int], np.ndarray] = {}  # (case, output k): [torch32, ours]
    for k, (name, r) in enumerate(runs):
        for j, (tensor, (t32, t64)) in enumerate(r.torch.items()):
            ours = np.asarray(out[f"s{k}/{tensor}"], np.float64)
            errors.setdefault((name, j), np.zeros(2))
            errors[(name, j)] += [np.max(np.abs(t32.astype(np.float64) - t64)),
                                  np.max(np.abs(ours - t64))]
    assert len(errors) == 3 * len(CASES)  # the value and both inputs' gradients, each case
    over = {f"{name} output {j}": round(ours / theirs, 2)
            for (name, j), (theirs, ours) in errors.items() if ours > LIMIT * theirs}
    assert over == {}
