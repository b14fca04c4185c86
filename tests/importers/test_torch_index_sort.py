"""The index and sort families through the torch front end: each case is a tiny module calling
the op on its float parameters, exported with torch.export and imported; its outputs and the
gradients of its parameters (for random output gradients: a vector-Jacobian product) on the
numpy reference are held to PyTorch's in float64, then every case runs in one build of the
CPU executor and is held to the same numbers. Out-of-range indices are refused by name: a
constant one at import, a computed one by the reference and by the executor when it runs."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from planner.frontend.autodiff import gradients  # noqa: E402
from planner.graph.interpret import run  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.ops import OpError  # noqa: E402
from planner.torch import TorchImportError  # noqa: E402

U32 = 2.0 ** -24


class Op(nn.Module):
    """f(self, *inputs) on parameters w (4, 5) and s (4, 3), and v (3, 5)."""

    def __init__(self, f) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(4, 5, generator=g))
        self.s = nn.Parameter(torch.randn(4, 3, generator=g))
        self.v = nn.Parameter(torch.randn(3, 5, generator=g))
        self.f = f

    def forward(self, *inputs):
        return self.f(self, *inputs)


# distinct per row (a plain scatter of repeated places has no one answer in PyTorch)
COLS = torch.tensor([[4, 0, 2], [1, 3, 0], [2, 4, 1], [0, 1, 3]])
REPEATED = torch.tensor([[4, 0, 4], [1, 1, 1], [2, 4, 2], [0, 3, 3]])
ROWS = torch.tensor([3, 0, 3])
NEG = torch.tensor([-1, 0, -4])
BAG = (torch.tensor([1, 3, 0, 3, 2, 1]), torch.tensor([0, 2, 2, 5]))  # an empty bag

# name -> (f, inputs, differentiable): outputs and parameter gradients against torch's
CASES = {
    "gather": (lambda m, i: m.w.gather(1, i), (REPEATED,), True),
    "gather-dim0": (lambda m, i: m.w.gather(0, i), (torch.tensor([[3, 0], [1, 1], [0, 3]]),),
                    True),
    "scatter": (lambda m, i: m.w.scatter(1, i, m.s), (COLS,), True),
    "scatter-value": (lambda m, i: m.w.scatter(1, i, 2.5), (COLS,), True),
    "scatter-value-inf": (lambda m, i: m.w.scatter(1, i, float("-inf")), (COLS,), True),
    "index_fill-inf": (lambda m, i: m.w.index_fill(1, i, float("inf")), (NEG,), True),
    # torch.autograd fails on this one (src larger than the index): forward only
    "scatter-larger-src": (lambda m, i: m.w.scatter(1, i[:, :2], m.s), (COLS,), False),
    "scatter_add": (lambda m, i: m.w.scatter_add(1, i, m.s), (REPEATED,), True),
    **{f"scatter_reduce-{r}-{inc}": (
        lambda m, i, r=r, inc=inc: m.w.scatter_reduce(1, i, m.s, r, include_self=inc),
        (REPEATED,), True)
       for r in ("sum", "mean", "prod", "amax", "amin") for inc in (True, False)},
    "index_select": (lambda m, i: m.w.index_select(1, i), (ROWS,), True),
    "index_select-dim0": (lambda m, i: m.w.index_select(0, i), (ROWS,), True),
    "index_add": (lambda m, i: m.w.index_add(0, i, m.v), (ROWS,), True),
    "index_add-alpha": (lambda m, i: m.w.index_add(1, i, m.s, alpha=-0.5), (ROWS,), True),
    "index_copy": (lambda m, i: m.w.index_copy(0, i, m.v), (torch.tensor([3, 0, 1]),), True),
    "index_fill-negative": (lambda m, i: m.w.index_fill(1, i, -1.5), (NEG,), True),
    "index_put-accumulate": (lambda m, i: m.w.index_put((i,), m.v, accumulate=True), (NEG,),
                             True),
    "index_put-broadcast": (lambda m, i: m.w.index_put((i,), m.v[0], accumulate=True),
                            (ROWS,), True),
    "getitem-negative": (lambda m, i: m.w[i] * 2.0, (NEG,), True),
    "take-negative": (lambda m, i: m.w.take(i), (torch.tensor([[-1, 7], [19, -20]]),), True),
    "embedding_bag-sum": (lambda m, i, o: F.embedding_bag(i, m.w, o, mode="sum"), BAG, True),
    "embedding_bag-mean-padding": (
        lambda m, i, o: F.embedding_bag(i, m.w, o, mode="mean", padding_idx=3), BAG, True),
    "embedding_bag-max-last": (
        lambda m, i, o: F.embedding_bag(i, m.w, o, mode="max", include_last_offset=True), BAG,
        True),
    "embedding_bag-weights": (
        lambda m, i, o, w: F.embedding_bag(i, m.w, o, mode="sum", per_sample_weights=w),
        (*BAG, torch.linspace(-1, 2, 6)), True),
    "embedding_bag-2d": (lambda m, i: F.embedding_bag(i, m.w, mode="mean"),
                         (torch.tensor([[1, 3], [0, 0], [2, 3]]),), True),
    "sort": (lambda m: m.w.sort(1), (), True),
    "sort-descending-dim0": (lambda m: m.w.sort(0, descending=True), (), True),
    "sort-stable": (lambda m: torch.sort(m.w, dim=1, stable=True), (), True),
    "argsort": (lambda m: (m.w.argsort(1, descending=True), m.w.argsort(0)), (), False),
    "argsort-inverse": (lambda m: (m.w.argsort(1).argsort(1), m.w.gather(
        1, m.w.argsort(1).argsort(1))), (), True),
    "argmax": (lambda m: (m.w.argmax(1), m.w.argmax(), m.w.argmax(0, keepdim=True)), (), False),
    "argmin": (lambda m: (m.w.argmin(1), m.w.argmin(), m.w.argmin(1, keepdim=True)), (), False),
    "max-dim-indices": (lambda m: (m.w.max(1), m.w.min(0, keepdim=True)), (), True),
    "max-all": (lambda m: (m.w.max(), m.w.min()), (), True),
    "scatter-reduce-add": (lambda m, i: m.w.scatter(1, i, m.s, reduce="add"), (REPEATED,),
                           False),
    "scalar-gather-scatter": (lambda m, i: (m.w[0, 0].gather(0, i), m.w[0, 1].scatter(0, i, 2.0),
                                            m.w[1, 1].index_select(0, i)),
                              (torch.tensor(0),), True),
    "kthvalue": (lambda m: m.w.kthvalue(2, 1), (), True),
    "kthvalue-keepdim": (lambda m: m.w.kthvalue(3, 0, keepdim=True), (), True),
    "median": (lambda m: m.w.median(1), (), True),
    "median-even": (lambda m: m.w.median(0), (), True),
    "median-flat": (lambda m: m.w.median(), (), True),
    "cummax": (lambda m: m.w.cummax(1), (), True),
    "cummax-ties": (lambda m, x: (x.cummax(1), x.cummin(0)),
                    (torch.tensor([[1.0, 2.0, 2.0, 0.0], [2.0, 2.0, 1.0, 2.0],
                                   [1.0, 0.0, 1.0, 0.0]]),), False),
    "cummin": (lambda m: m.w.cummin(0), (), True),
}


class GNN(nn.Module):
    """Message passing on a graph of 6 nodes: each edge's message from its source node's
    features, summed into its destination by index_add_ and by scatter_add."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.msg = nn.Linear(4, 5)
        self.out = nn.Linear(5, 2)

    def forward(self, x, src, dst):
        m = self.msg(x.index_select(0, src))
        agg = torch.zeros(6, 5, dtype=x.dtype)
        agg.index_add_(0, dst, m)
        agg2 = torch.zeros(6, 5, dtype=x.dtype).scatter_add(0, dst[:, None].expand(-1, 5), m)
        return self.out(torch.relu(agg + 0.5 * agg2))


class MoE(nn.Module):
    """Top-2 gating over 5 experts: each token's two experts' weights gathered by
    index_select, a dense routing mask by scatter for the load-balancing term."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.gate = nn.Linear(4, 5)
        self.experts = nn.Parameter(torch.randn(5, 4, 3) * 0.5)

    def forward(self, x):
        g = torch.softmax(self.gate(x), -1)
        v, i = g.topk(2, dim=-1)
        v = v / v.sum(-1, keepdim=True)
        w = self.experts.index_select(0, i.reshape(-1)).reshape(6, 2, 4, 3)
        y = (x[:, None, :, None] * w).sum(2)
        out = (y * v[..., None]).sum(1)
        mask = torch.zeros_like(g).scatter(1, i, 1.0)
        return out, (mask.mean(0) * g.mean(0)).sum()


EDGES = (torch.tensor([0, 1, 2, 3, 4, 5, 0, 2]), torch.tensor([1, 2, 3, 4, 5, 0, 3, 3]))
# name -> (module, inputs): the patterns, as the op cases
PATTERNS = {
    "gnn": (GNN, (torch.randn(6, 4, generator=torch.Generator().manual_seed(3)), *EDGES)),
    "moe": (MoE, (torch.randn(6, 4, generator=torch.Generator().manual_seed(4)),)),
}


def _outputs(value) -> list:
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _outputs(v)]
    return [value]


def imported(name: str):
    """(forward graph, its params, feeds by graph input, torch's float32 module, inputs)."""
    if name in PATTERNS:
        factory, inputs = PATTERNS[name]
        module = factory()
    else:
        f, inputs, _ = CASES[name]
        module = Op(f)
    imp = convert(torch.export.export(module, inputs))
    feeds = {n: v.numpy() for n, v in zip(imp.inputs, inputs, strict=True)}
    return imp.graph, imp.params(), feeds, module, inputs


def torch_float64(module, inputs, dys: list, differentiable: bool = True):
    """Outputs and the parameters' gradients of sum(output * dy) in float64."""
    m64 = copy.deepcopy(module).double()
    outs = _outputs(m64(*(x.double() if x.is_floating_point() else x for x in inputs)))
    params = dict(m64.named_parameters())
    floats = [(o, dy) for o, dy in zip(outs, dys, strict=True)
              if o.is_floating_point() and differentiable]
    total = sum((o * torch.from_numpy(dy).double()).sum() for o, dy in floats)
    grads = torch.autograd.grad(total, list(params.values()), allow_unused=True) \
        if floats else [None] * len(params)
    return ([o.detach().numpy() for o in outs],
            {k: (g.numpy() if g is not None else np.zeros(params[k].shape))
             for k, g in zip(params, grads, strict=True)})


@functools.cache
def case_graph(name: str):
    """The case's graph with its parameters' gradients (random output gradients as inputs),
    its feeds and params, and torch's float64 outputs and gradients."""
    graph, params, feeds, module, inputs = imported(name)
    differentiable = name in PATTERNS or CASES[name][2]
    rng = np.random.default_rng(1)
    dys = [rng.standard_normal(graph.tensor(o).shape).astype(np.float32)
           if graph.tensor(o).dtype == "float32" else None for o in graph.outputs]
    want_out, want_grads = torch_float64(module, inputs, dys, differentiable)
    floats = [o for o, dy in zip(graph.outputs, dys, strict=True) if dy is not None]
    wrt = [t.name for t in graph.by_role("param")]
    if differentiable and floats:
        graph, grads = gradients(graph, wrt=wrt, of=floats)
        feeds = {**feeds, **{f"grad/{o}": dy for o, dy in zip(graph.outputs, dys, strict=False)
                             if dy is not None}}
    else:
        grads = {}
    return graph, feeds, params, want_out, want_grads, grads


def bound(want: np.ndarray) -> float:
    """At most a few values combine into an element (a sum of at most 3, a product of at most
    4, a mean): float32 keeps each within 8 ulps of the largest magnitude involved."""
    finite = np.abs(want[np.isfinite(want)])  # infinities must match exactly
    return 8 * U32 * max(1.0, float(finite.max(initial=0.0))) * 4


def check(graph, values: dict, case: tuple) -> None:
    _, _, _, want_out, want_grads, grads = case
    n_out = len(want_out)
    for o, want in zip(list(graph.outputs)[:n_out], want_out, strict=True):
        got = np.asarray(values[o])
        if want.dtype.kind == "i":
            np.testing.assert_array_equal(got, want, err_msg=o)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=bound(want), err_msg=o)
    for p, g in grads.items():
        want = want_grads[p]
        got = np.zeros(want.shape) if g is None else np.asarray(values[g])
        np.testing.assert_allclose(got, want, rtol=0, atol=bound(want), err_msg=f"d{p}")


@pytest.mark.parametrize("name", sorted(CASES) + sorted(PATTERNS))
def test_reference_matches_torch_float64(name):
    case = case_graph(name)
    graph, feeds, params = case[:3]
    check(graph, run(graph, feeds, params), case)


def test_the_ops_are_the_planners():
    ops = {name: {n.op for n in imported(name)[0].nodes} for name in CASES}
    assert ops["gather"] == {"IndexGather"} and ops["scatter_add"] == {"IndexScatter"}
    assert ops["index_fill-negative"] == {"IndexScatter"}  # the constant as its value
    assert {"IndexGather"} <= ops["take-negative"] and "TopK" in ops["median"]
    assert ops["sort"] == {"TopK"}


def test_cpu_executor_matches_torch(tmp_path):
    """Every case (outputs and gradients) in one build of the CPU executor."""
    from tests.codegen.helpers import build_module
    from tests.codegen.merged_graph import merge

    cases = {f"c{k}/": case_graph(name)
             for k, name in enumerate(sorted(CASES) + sorted(PATTERNS))}
    merged = merge("index_sort", {p: c[0] for p, c in cases.items()})
    ex = build_module(merged, tmp_path / "index_sort").Executor()
    ex.load_params({p + n: v for p, c in cases.items() for n, v in c[2].items()})
    out = ex.forward({p + n: v for p, c in cases.items() for n, v in c[1].items()})
    for p, c in cases.items():
        check(c[0], {o: out[p + o] for o in c[0].outputs}, c)


class Gather(nn.Module):
    def __init__(self, index: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5))
        self.register_buffer("index", index)

    def forward(self, i):
        return self.w.gather(1, self.index) + self.w.index_select(0, i).sum()


def test_a_constant_index_out_of_range_is_refused_at_import():
    program = torch.export.export(Gather(torch.tensor([[0, 5]] * 4)), (torch.tensor([0]),))
    # (the node's place, the test's file and line, between its name and its op)
    with pytest.raises(TorchImportError, match=r"node 'gather' at test_torch_index_sort\.py:\d+ "
                       r"\(aten.gather.default\): constant index tensor .*index 5 out of "
                       r"range \[0, 5\) for dim 1"):
        convert(program)


def test_a_computed_index_out_of_range_is_refused_when_the_step_runs(tmp_path):
    from tests.codegen.helpers import build_module

    imp = convert(torch.export.export(Gather(torch.tensor([[0, 4]] * 4)), (torch.tensor([0]),)))
    graph = imp.graph
    (x,) = imp.inputs
    ok = run(graph, {x: np.array([3])}, imp.params())
    for bad in (-1, 4):  # index_select takes no negative index, as PyTorch's
        with pytest.raises(OpError, match=rf"index {bad} out of range \[0, 4\) for dim 0"):
            run(graph, {x: np.array([bad])}, imp.params())
    ex = build_module(graph, tmp_path / "bad_index").Executor()
    ex.load_params(imp.params())
    out = ex.forward({x: np.array([3])})
    np.testing.assert_allclose(out[graph.outputs[0]], ok[graph.outputs[0]], rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"IndexGather\): index -1 out of range \[0, 4\)"):
        ex.forward({x: np.array([-1])})


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
def test_extreme_scatter_gradient_splits_ties_as_torch(reduce, include_self):
    """amax / amin: equal values at a place share its gradient evenly, x's value counted even
    when not included (PyTorch's rule); prod: each factor gets the product of the others,
    with zeros among them (one, or two at a place)."""
    from planner.ops import get_op

    x = torch.tensor([[1.0, 5.0, 3.0, 2.0], [0.0, 0.0, 4.0, -1.0]], dtype=torch.float64,
                     requires_grad=True)
    src = torch.tensor([[5.0, 2.0, 5.0, 7.0, 1.0], [0.0, 4.0, 4.0, 0.0, 3.0]],
                       dtype=torch.float64, requires_grad=True)
    if reduce == "amin":
        x, src = (-x).detach().requires_grad_(), (-src).detach().requires_grad_()
    index = torch.tensor([[1, 1, 1, 2, 0], [0, 2, 2, 1, 2]])
    dy = torch.tensor([[1.0, 2.0, 4.0, 8.0], [3.0, 5.0, 7.0, 9.0]], dtype=torch.float64)
    y = x.scatter_reduce(1, index, src, reduce, include_self=include_self)
    want = torch.autograd.grad(y, (x, src), dy)
    where = {"axis": 1, "mode": "elements", "wrap": False}
    out = get_op("IndexScatter").reference(
        [x.detach().numpy(), index.numpy(), src.detach().numpy()],
        {**where, "reduce": reduce, "include_self": include_self})[0]
    np.testing.assert_array_equal(out, y.detach().numpy())
    got = get_op("IndexScatterGrad").reference(
        [x.detach().numpy(), index.numpy(), src.detach().numpy(), out, dy.numpy()],
        {**where, "include_self": include_self,
         "reduce": "prod" if reduce == "prod" else "amax"})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-15)
