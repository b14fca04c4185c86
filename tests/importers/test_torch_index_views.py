"""Index ops by constant position maps, copy-views, strided and windowed views and pads with
negative widths through the torch front end (planner/importers/torch/rules_index.py,
rules_views.py): each case is one call on float parameters, exported and imported (tests/importers/
opinfo_cases.py: float tensors are parameters, others buffers); its outputs and parameter
gradients (a vector-Jacobian product of random cotangents) on the numpy reference are held to
torch's in float64 (10 x torch's float32 noise plus 16 ulps of the tensor's scale), then every
case runs in one build of the CPU executor and is held to the same numbers. Bad constants are
refused in one line naming the node."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402

from planner.importers.torch.convert import convert  # noqa: E402
from planner.torch import TorchImportError  # noqa: E402
from tests.importers.opinfo_cases import check_sample  # noqa: E402

g = torch.Generator().manual_seed(46)


def rnd(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float32)


X = rnd(4, 5)
MASK = torch.tensor([[True, False, True, False, False], [False] * 5,
                     [True, True, False, False, True], [False, False, False, True, False]])
LENGTHS = torch.tensor([[2, 0, 3], [1, 4, 0], [0, 0, 5], [5, 0, 0]])  # per row of X, dim 1

def _columns_set(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[:, torch.tensor([True, False, True, True, False])] = v
    return y


# name -> (fn, x, args, kwargs): fn(x, *args, **kwargs) against torch in float64
CASES = {
    "gather-int32": (torch.gather, X, (1, torch.tensor([[4, 0], [1, 1], [3, 2], [0, 0]],
                                                       dtype=torch.int32)), {}),
    # a computed int32 index (rows 3, -1, 0, 2), widened
    "index-computed-int32": (
        lambda x: x[(x[:, 0] * 0 + torch.tensor([3.0, -1.0, 0.0, 2.0])).to(torch.int32)], X,
        (), {}),
    "index_select-int32": (torch.index_select, X,
                           (1, torch.tensor([4, 0, 4], dtype=torch.int32)), {}),
    "count_nonzero": (lambda x: torch.count_nonzero(x.relu(), dim=1), X, (), {}),
    "take-2d-negative": (torch.take, X, (torch.tensor([[-1, 0], [19, -20]]),), {}),
    "take-0d": (torch.take, X, (torch.tensor(7),), {}),
    "put-accumulate-repeated": (lambda x, i, s: x.put(i, s, accumulate=True), X,
                                (torch.tensor([3, -1, 3, 0]), rnd(4)), {}),
    "index_put-mask": (lambda x, v: torch.index_put(x, (MASK,), v), X, (rnd(6),), {}),
    "index_put-two-axes-accumulate": (
        lambda x, v: torch.index_put(x, (torch.tensor([0, 3, 0]), torch.tensor([1, -1, 1])), v,
                                     accumulate=True), X, (rnd(3),), {}),
    "index_put-mask-and-slice": (_columns_set, X, (rnd(4, 3),), {}),
    "masked_scatter": (torch.Tensor.masked_scatter, X, (MASK, rnd(8)), {}),
    "masked_scatter-broadcast": (torch.Tensor.masked_scatter, X,
                                 (torch.tensor([True, False, False, True, True]), rnd(25)), {}),
    "slice_scatter-step": (torch.slice_scatter, X, (rnd(4, 2),),
                           {"dim": 1, "start": 1, "end": None, "step": 3}),
    "as_strided-overlapping": (torch.as_strided, X, ((3, 4), (2, 3), 1), {}),
    "unfold-overlapping": (lambda x: x.unfold(1, 3, 1), X, (), {}),
    "unfold-step": (lambda x: x.unfold(0, 2, 2), X, (), {}),
    "narrow_copy": (torch.narrow_copy, X, (1, -4, 2), {}),
    "unbind_copy": (torch.unbind_copy, X, (1,), {}),
    "permute_copy": (torch.permute_copy, rnd(2, 3, 4), ((2, 0, 1),), {}),
    "view_copy": (torch.view_copy, X, ((10, 2),), {}),
    "copy-broadcast": (lambda x, s: torch.zeros_like(x).copy_(s), X, (rnd(5),), {}),
    "pad-replicate-negative": (F.pad, rnd(2, 3, 4, 4), ((-2, 5, 1, -3),),
                               {"mode": "replicate"}),
    "pad-reflect-negative": (F.pad, rnd(2, 3, 6), ((-2, 3),), {"mode": "reflect"}),
    "pad-constant-negative": (F.pad, rnd(2, 3, 6), ((-2, 3, 1, -1),), {"value": 0.5}),
    "pad-reflect-empty-batch": (F.pad, rnd(0, 3, 3), ((1, 2),), {"mode": "reflect"}),
    "nonzero_static": (lambda x: torch.nonzero_static(x.relu(), size=7, fill_value=-3), X,
                       (), {}),
    "nonzero_static-short": (lambda x: torch.nonzero_static(x.relu(), size=2), X, (), {}),
}
for _r in ("amax", "amin", "mean", "prod"):
    for _self in (True, False):
        CASES[f"index_reduce-{_r}-{'self' if _self else 'noself'}"] = (
            torch.index_reduce, X, (1, torch.tensor([4, 0, 4, 2]), rnd(4, 4), _r),
            {"include_self": _self})
for _r in ("sum", "mean", "max", "min", "prod"):
    for _init in (None, 0.5):
        if _init is None and _r in ("max", "min", "mean"):
            continue  # an empty segment: -inf, inf, NaN, whose gradient torch has as NaN
        CASES[f"segment_reduce-{_r}-{_init}"] = (
            torch.segment_reduce, X, (_r,), {"lengths": LENGTHS, "axis": 1, "initial": _init})
    CASES[f"segment_reduce-{_r}-offsets"] = (
        torch.segment_reduce, rnd(6, 2), (_r,),
        {"offsets": torch.tensor([0, 2, 2, 6]), "axis": 0, "initial": 1.0})


def _masked_set(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y[x > 0.3] = v  # a computed mask, one value
    return y


def _masked_rows_add(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # whole rows, values broadcast to each
    return torch.index_put(x, (x.sum(1) > 0,), v, accumulate=True)


CASES |= {"masked_scatter-computed": (lambda x, s: x.masked_scatter(x > 0.2, s * 3), X,
                                      (rnd(20),), {}),
          "masked_scatter-computed-broadcast": (
              lambda x, s: x.masked_scatter(x.sum(0) > 0, s), X, (rnd(4, 5),), {}),
          "index_put-computed-mask": (_masked_set, X, (rnd(()).reshape(()),), {}),
          "index_put-computed-mask-rows-accumulate": (_masked_rows_add, X, (rnd(5),), {})}


def _op(fn):
    return SimpleNamespace(op=fn, supports_autograd=True)


def _sample(x, args, kwargs):
    return SimpleNamespace(input=x, args=args, kwargs=kwargs)


RUNS: dict[str, list] = {}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch_forward_and_backward(name):
    fn, x, args, kwargs = CASES[name]
    runs: list = []
    assert check_sample(_op(fn), _sample(x, args, kwargs), runs=runs) == ("pass", "")
    RUNS[name] = runs


def test_the_gradient_of_as_strided_scatter_is_zero_where_src_overwrites():
    """torch's own is the full dy there (its OpInfo marks that gradient an expected failure):
    ours is the finite difference's, which the OpInfo harness takes as the reference there
    (tests/importers/opinfo_cases._autograd_known_wrong)."""
    from planner.frontend.autodiff import gradients
    from planner.graph.interpret import run

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.x = torch.nn.Parameter(rnd(3, 3).double())
            self.s = torch.nn.Parameter(rnd(2, 2).double())

        def forward(self):
            return torch.as_strided_scatter(self.x, self.s, (2, 2), (1, 2), 1)

    m = M()
    imp = convert(torch.export.export(m, ()))
    (out,) = imp.graph.outputs
    graph, names = gradients(imp.graph, wrt=[t.name for t in imp.graph.by_role("param")],
                             of=[out])
    dy = np.arange(9.0).reshape(3, 3)
    got = run(graph, {f"grad/{out}": dy}, imp.params())
    params = {t.name: t for t in imp.graph.by_role("param")}
    x_name = next(n for n in params if params[n].shape == (3, 3))
    written = np.zeros(9, bool)
    written[np.array([1, 3, 2, 4])] = True  # offset 1, strides (1, 2)
    want = np.where(written, 0.0, dy.reshape(-1)).reshape(3, 3)
    np.testing.assert_array_equal(got[names[x_name]], want)


class Call(torch.nn.Module):
    def __init__(self, f, **buffers) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(rnd(4, 5))
        for k, v in buffers.items():
            self.register_buffer(k, v)
        self.f = f

    def forward(self):
        return self.f(self)


@pytest.mark.parametrize("f, buffers, message", [
    (lambda m: torch.take(m.w, m.i), {"i": torch.tensor([3, 20])},
     r"node 'take' .*index 20 out of range \[-20, 20\)"),
    (lambda m: m.w.put(m.i, torch.ones(2)), {"i": torch.tensor([-21, 0])},
     r"node 'put' .*index -21 out of range \[-20, 20\)"),
    (lambda m: torch.index_put(m.w, (m.i, m.j), torch.ones(2)),
     {"i": torch.tensor([0, 4]), "j": torch.tensor([1, 1])},
     r"node 'index_put' .*constant indices: index 4 is out of bounds"),
    (lambda m: m.w.masked_scatter(m.i, torch.ones(2)), {"i": torch.ones(4, 5, dtype=bool)},
     r"node 'masked_scatter' .*source has 2 elements for 20 masked ones"),
    (lambda m: torch.segment_reduce(m.w, "sum", lengths=m.i, axis=1),
     {"i": torch.tensor([[2, 2]] * 4)}, r"node 'segment_reduce' .*do not split dim 1"),
])
def test_bad_constants_are_refused_naming_the_node(f, buffers, message):
    try:
        program = torch.export.export(Call(f, **buffers), ())
    except Exception as e:  # torch checks some itself
        pytest.skip(f"torch refuses it first: {type(e).__name__}")
    with pytest.raises(TorchImportError, match=message) as info:
        convert(program)
    assert "\n" not in str(info.value)


def test_every_case_on_the_cpu_executor(tmp_path):
    """The cases' forward-and-backward graphs merged into one build of the CPU executor, each
    output and gradient held to torch's float64 value (the floor 1e-4 of the scale, as the
    OpInfo executor check's)."""
    from codegen import support
    from codegen.backends import RUNTIMES
    from tests.codegen.merged_graph import executor_mismatches

    runs = []
    for name in sorted(CASES):
        if name not in RUNS:
            fn, x, args, kwargs = CASES[name]
            mine: list = []
            check_sample(_op(fn), _sample(x, args, kwargs), runs=mine)
            RUNS[name] = mine
        for r in RUNS[name]:
            support.check(r.graph, RUNTIMES["cpu"])
            runs.append((name, r))
    assert executor_mismatches("index_views", runs, tmp_path) == []


class Scattered(torch.nn.Module):
    def forward(self, x, s):
        return x.masked_scatter(x > 0, s)


def test_a_computed_mask_past_the_source_is_refused_when_the_step_runs(tmp_path):
    """By the reference, and by the CPU executor naming the node, before it reads."""
    from planner.graph.interpret import run
    from planner.ops import OpError
    from tests.codegen.helpers import build_module

    x, s = torch.tensor([[1.0, -1.0], [2.0, -3.0]]), torch.tensor([5.0, 6.0])
    imp = convert(torch.export.export(Scattered(), (x, s)))
    feeds = dict(zip(imp.inputs, (x.numpy(), s.numpy()), strict=True))
    (out,) = imp.graph.outputs
    got = run(imp.graph, feeds, imp.params())[out]
    np.testing.assert_array_equal(got, Scattered()(x, s).numpy())
    feeds[imp.inputs[0]] = np.ones((2, 2), np.float32)  # 4 masked, 2 in the source
    with pytest.raises(OpError, match=r"index 2 out of range \[0, 2\)"):
        run(imp.graph, feeds, imp.params())
    ex = build_module(imp.graph, tmp_path / "masked_scatter").Executor()
    ex.load_params(imp.params())
    feeds[imp.inputs[0]] = x.numpy()
    np.testing.assert_array_equal(ex.forward(feeds)[out], got)
    feeds[imp.inputs[0]] = np.ones((2, 2), np.float32)
    with pytest.raises(RuntimeError, match=r"'masked_scatter[^']*' \(IndexGather\): index 2 "
                                           r"out of range \[0, 2\)"):
        ex.forward(feeds)


class Circular(torch.nn.Module):
    def forward(self, x):
        return F.pad(x, (1, 2), mode="circular") * 2.0  # decomposes through torch.empty


def test_an_uninitialized_tensor_is_zeros_not_what_memory_held():
    """torch.empty's values are not evaluated at import (they would be whatever memory held,
    and the plan's bytes with them): two imports are the same graph, its empty tensor a Fill
    of zeros."""
    x = rnd(1, 3, 3)
    first, second = (convert(torch.export.export(Circular(), (x,))) for _ in range(2))
    assert first.graph == second.graph
    fills = [n for n in first.graph.nodes if n.op == "Fill"]
    assert [n.attrs["value"] for n in fills] == [0.0]
    # (it reads no tensor, which would otherwise have torch evaluate it at import)
    from planner.importers.torch.convert import _foldable, decompose
    from planner.importers.torch.record import from_exported

    program = from_exported(decompose(torch.export.export(Circular(), (x,))))
    (empty,) = [c for c in program.calls if c.target == "aten.empty.memory_format"]
    assert not empty.reads() and not _foldable(empty, {})
