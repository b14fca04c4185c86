"""One ATen op through the torch front end, checked against PyTorch in float64: a tiny module
holding the op's float inputs as parameters and returning the op's outputs is exported,
converted, and run on the numpy reference with the vector-Jacobian product of its float outputs
(random cotangents) against every parameter; PyTorch computes the same in float64.

`imported_case` gives what the CPU executor check needs to run the same graph
(tests/importers/test_torch_reductions.py builds many of them as one graph).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from planner.frontend.autodiff import gradients
from planner.graph.interpret import run
from planner.importers.torch.convert import convert
from planner.ir.graph import Graph


class OpModule(nn.Module):
    """fn(*inputs), its inputs as parameters x0, x1, ..."""

    def __init__(self, fn: Callable, inputs: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn
        self.xs = nn.ParameterList(nn.Parameter(x.clone()) for x in inputs)

    def forward(self):
        out = self.fn(*self.xs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@dataclass(frozen=True)
class Case:
    """The imported op with its gradient nodes, what to feed, and PyTorch's float64 answers."""

    graph: Graph
    params: dict[str, np.ndarray]
    feeds: dict[str, np.ndarray]
    want: dict[str, np.ndarray]  # graph output name -> torch's value (float64, or bool)


def imported_case(fn: Callable, inputs: Sequence[torch.Tensor], seed: int = 0) -> Case:
    """`fn` over float32 copies of `inputs`, imported, with d(outputs . cotangents)/d(inputs)."""
    inputs = [torch.as_tensor(x, dtype=torch.float32) for x in inputs]
    module = OpModule(fn, inputs)
    imported = convert(torch.export.export(module, ()))
    graph = imported.graph
    names = [t.name for t in graph.by_role("param")]
    outs = list(graph.outputs)
    floating = [o for o in outs if graph.tensor(o).dtype.startswith("float")]
    rng = np.random.default_rng(seed)
    cotangents = {o: rng.standard_normal(graph.tensor(o).shape) for o in floating}
    # PyTorch in float64: the outputs, and the same vector-Jacobian product
    xs = [nn.Parameter(x.double()) for x in inputs]
    got = fn(*xs)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = {o: v.detach().numpy() for o, v in zip(outs, got, strict=True)}
    feeds = {}
    if floating:
        graph, grads = gradients(graph, wrt=names, of=floating)
        pairs = [(v, torch.from_numpy(cotangents[o])) for o, v in zip(outs, got, strict=True)
                 if o in cotangents]
        dxs = torch.autograd.grad([v for v, _ in pairs], xs, [c for _, c in pairs],
                                  allow_unused=True)
        for name, x, dx in zip(names, xs, dxs, strict=True):
            if grads.get(name) is not None:
                want[grads[name]] = (np.zeros(x.shape) if dx is None else dx.numpy())
        feeds = {f"grad/{o}": c.astype(np.float32) for o, c in cotangents.items()}
    return Case(graph, imported.params(), feeds, want)


def reference_outputs(case: Case) -> dict[str, np.ndarray]:
    return run(case.graph, case.feeds, case.params, keep="outputs")


def assert_cpu_executor_matches(cases: dict[str, Case], folder) -> None:
    """Every case as one graph (names prefixed by its key) on the CPU executor: one plan, one
    build, one run; each output held to torch as on the reference."""
    from tests.codegen.helpers import build_module
    from tests.codegen.merged_graph import merge

    merged = merge(folder.name, {f"{k}/": c.graph for k, c in cases.items()})
    ex = build_module(merged, folder).Executor()
    ex.load_params({f"{k}/{n}": v for k, c in cases.items() for n, v in c.params.items()})
    out = ex.forward({f"{k}/{n}": v for k, c in cases.items() for n, v in c.feeds.items()})
    for k, c in cases.items():
        for name, want in c.want.items():
            assert_close(np.asarray(out[f"{k}/{name}"]), want, f"{k}: {name} (CPU executor)")


def assert_close(got: np.ndarray, want: np.ndarray, what: str, rtol: float = 1e-4) -> None:
    """Equal for bools and integers (indices); for floats within `rtol` of the largest |want|
    (float32 sums and products of the few dozen elements these cases reduce are a few dozen
    ulps, 2^-24 each, of that scale; 1e-4 leaves room for a transcendental function's own
    error), NaN and infinities where torch has them."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, torch's {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(want[finite]), initial=1.0))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol * scale,
                               err_msg=what)
