"""The op-level crashes and unclear refusals of issue 63 (item 4), found with PyTorch's OpInfo
samples in other dtypes and with the samples' tensors as the forward's inputs: each now matches
torch (forward and backward on the reference interpreter) or is refused in one line naming
the op, the node or input and why."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.frontend.autodiff import gradients  # noqa: E402
from planner.graph.interpret import run  # noqa: E402
from planner.importers.torch.context import TorchImportError  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.importers.torch.record import to_numpy  # noqa: E402
from tests.importers.opinfo_cases import check_call  # noqa: E402


class _Params(torch.nn.Module):
    """fn(*params, *inputs), each param in its own dtype."""

    def __init__(self, fn, params):
        super().__init__()
        self.fn = fn
        self.ps = torch.nn.ParameterList(torch.nn.Parameter(p.clone()) for p in params)

    def forward(self, *inputs):
        return self.fn(*self.ps, *inputs)


def _own_dtypes(fn, params, inputs=()):
    """`fn` over parameters kept in their own dtypes, imported and run forward and backward
    (cotangent: ones in the output's dtype): (output, {param name: gradient}) as numpy, and
    torch's (output, [gradient of each param]) for the same cotangent."""
    module = _Params(fn, params)
    imported = convert(torch.export.export(module, tuple(inputs)))
    (out,) = imported.graph.outputs
    wrt = [f"ps.{k}" for k in range(len(params))]  # the module's order
    graph, names = gradients(imported.graph, wrt=wrt, of=[out])
    ones = np.ones(graph.tensor(out).shape, graph.tensor(out).dtype)
    feeds = {f"grad/{out}": ones} | {n: to_numpy(v) for n, v in zip(imported.inputs, inputs,
                                                                    strict=True)}
    got = run(graph, feeds, imported.params())
    y = module(*inputs)
    want = torch.autograd.grad(y, list(module.ps), torch.ones_like(y))
    return (got[out], {p: got[names[p]] for p in wrt}), (y.detach(), want)


def _one_line(e: pytest.ExceptionInfo) -> str:
    line = str(e.value)
    assert "\n" not in line and "Traceback" not in line
    return line


# ---- a dtype the planner has no tensor of, given as an input ---------------------------------

@pytest.mark.parametrize("dtype", [torch.complex128, torch.complex64])
def test_a_complex_input_is_refused_in_one_line_naming_it(dtype):
    # was a multi-line pydantic ValidationError naming no node or input
    class M(torch.nn.Module):
        def forward(self, a, b, c):
            return torch.addcdiv(a, b, c, value=0.5)

    args = (torch.randn(3), torch.randn(3, dtype=dtype), torch.rand(3) + 1)
    with pytest.raises(TorchImportError) as e:
        convert(torch.export.export(M(), args))
    line = _one_line(e)
    assert "input 'b'" in line and str(dtype).removeprefix("torch.") in line, line


# ---- softmax family over an empty axis, log_softmax of a 0-d tensor ---------------------------

@pytest.mark.parametrize("fn", [F.softmax, F.softmin, F.log_softmax],
                         ids=["softmax", "softmin", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [((3, 0), 1), ((0, 3), 0)])
def test_softmax_family_over_an_empty_tensor_matches_torch(fn, shape, dim):
    # was numpy's "zero-size array to reduction operation maximum" in the reference interpreter
    assert check_call(lambda t: fn(t, dim), torch.randn(shape)) == ("pass", "")


@pytest.mark.parametrize("fn,dim", [(F.log_softmax, 0), (F.log_softmax, -1), (F.softmax, 0),
                                    (F.softmin, -1)],
                         ids=["log_softmax-0", "log_softmax--1", "softmax-0", "softmin--1"])
def test_softmax_family_of_a_0d_tensor_matches_torch_with_its_zero_gradient(fn, dim):
    # log_softmax's gradient was "ReduceSum: axis 0 out of range for rank 0"
    assert check_call(lambda t: fn(t, dim), torch.tensor(1.5)) == ("pass", "")


# ---- bfloat16 parameters ----------------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda p: p * 2, lambda p: p.sum(), lambda p: torch.tanh(p),
    # a bfloat16 constant built in forward, folded at import
    lambda p: p * (torch.arange(4, dtype=torch.bfloat16) * 2),
], ids=["mul", "sum", "tanh", "times-a-folded-constant"])
def test_an_op_on_a_bfloat16_parameter_imports_and_matches_torch(fn):
    # was "TypeError: can't convert np.ndarray of type ml_dtypes.bfloat16": a bfloat16
    # parameter was taken for a constant and folded by torch through numpy
    p = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).bfloat16()
    (y, grads), (want, (g,)) = _own_dtypes(fn, [p])
    assert y.dtype == np.dtype("bfloat16") and list(grads.values())[0].dtype == y.dtype
    # bfloat16 has 8 bits of mantissa: one rounding of each result (sum: of 12 terms)
    tol = 2.0**-7 * (12 if y.shape == () else 1)
    np.testing.assert_allclose(y.astype(np.float32), want.float().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(list(grads.values())[0].astype(np.float32), g.float().numpy(),
                               rtol=tol, atol=tol)


# ---- cat's type promotion and empty parts -----------------------------------------------------

@pytest.mark.parametrize("dtypes", [
    (torch.float32, torch.float64, torch.float16),
    (torch.float16, torch.bfloat16),
    (torch.float16, torch.float32),
], ids=["f32-f64-f16", "f16-bf16", "f16-f32"])
def test_cat_promotes_its_parts_as_torch_result_type(dtypes):
    # was "Concat: input 1 is float64 but input 0 is float32"
    g = torch.Generator().manual_seed(1)
    parts = [torch.randn(k + 1, 3, generator=g).to(d) for k, d in enumerate(dtypes)]
    (y, grads), (want, wgrads) = _own_dtypes(lambda *ps: torch.cat(ps), parts)
    assert str(y.dtype) == str(want.dtype).removeprefix("torch.")
    # every value is exact in the promoted type: equal bits
    np.testing.assert_array_equal(y.astype(np.float64), want.double().numpy())
    for (name, mine), theirs in zip(grads.items(), wgrads, strict=True):
        assert str(mine.dtype) == str(theirs.dtype).removeprefix("torch."), name
        np.testing.assert_array_equal(mine.astype(np.float64), theirs.double().numpy())


def test_cat_promotes_an_integer_part_to_the_float_parts_type():
    class M(torch.nn.Module):
        def forward(self, a, b):
            return torch.cat([a, b])

    a, b = torch.randn(2, 3), torch.arange(6).reshape(2, 3)
    imported = convert(torch.export.export(M(), (a, b)))
    (out,) = imported.graph.outputs
    got = run(imported.graph, {"a": a.numpy(), "b": b.numpy()}, imported.params())[out]
    np.testing.assert_array_equal(got, M()(a, b).numpy())


@pytest.mark.parametrize("fn", [lambda a, b: torch.stack([a, b]),
                                lambda a, b: torch.stack([a, b], dim=1),
                                lambda a, b: torch.cat([a, b])],
                         ids=["stack", "stack-dim1", "cat"])
def test_stack_and_cat_of_empty_tensors_match_torch(fn):
    # was "Concat takes at least 1 input(s), got 0"
    assert check_call(fn, torch.randn(0), torch.randn(0)) == ("pass", "")
    assert check_call(fn, torch.randn(2, 0), torch.randn(2, 0)) == ("pass", "")


# ---- dropout with p = 1 -----------------------------------------------------------------------

@pytest.mark.parametrize("call", [lambda t: F.dropout(t, p=1.0),
                                  lambda t: torch.dropout(t, 1.0, True),
                                  lambda t: torch.nn.Dropout(1.0)(t)],
                         ids=["F.dropout", "torch.dropout", "nn.Dropout"])
def test_dropout_with_p_one_gives_zeros_and_a_zero_gradient_as_torch(call):
    # was refused: "aten.native_dropout.default (p = 1)"
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    x[0, 0] = float("inf")  # torch multiplies by the zero mask: inf * 0 is NaN
    (y, grads), (want, (g,)) = _own_dtypes(call, [x])
    np.testing.assert_array_equal(y, want.numpy())
    np.testing.assert_array_equal(list(grads.values())[0], g.numpy())


# ---- in-place writes to the forward's inputs --------------------------------------------------

class _Inputs(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


IN_PLACE_DRAWS = {
    "normal_": (lambda x: x.normal_(), lambda v: np.isfinite(v).all()),
    "uniform_": (lambda x: x.uniform_(), lambda v: ((v >= 0) & (v < 1)).all()),
    "cauchy_": (lambda x: x.cauchy_(), lambda v: np.isfinite(v).all()),
    "exponential_": (lambda x: x.exponential_(), lambda v: (v >= 0).all()),
    "geometric_": (lambda x: x.geometric_(0.3), lambda v: ((v >= 1) & (v == np.round(v))).all()),
    "log_normal_": (lambda x: x.log_normal_(), lambda v: (v > 0).all()),
    "bernoulli_": (lambda x: x.bernoulli_(0.3), lambda v: np.isin(v, [0.0, 1.0]).all()),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_DRAWS))
def test_an_in_place_draw_into_an_input_is_the_planners_draw_and_says_so(name):
    # was "output 'cauchy': unsupported kind USER_INPUT_MUTATION"
    fn, valid = IN_PLACE_DRAWS[name]
    x = torch.full((64,), 7.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = convert(torch.export.export(_Inputs(lambda t: fn(t) * 2), (x.clone(),)))
    said = [str(w.message) for w in caught if "input 'xs_0'" in str(w.message)]
    assert len(said) == 1 and "\n" not in said[0] and "keeps its value" in said[0], said
    (out,) = imported.graph.outputs
    y = run(imported.graph, {"xs_0": x.numpy().copy()}, imported.params())[out] / 2
    # a fresh draw of the input's shape and dtype, not the input's old value
    assert y.shape == (64,) and y.dtype == np.float32 and valid(y) and not (y == 7.0).all()


@pytest.mark.parametrize("fn,what", [
    (lambda x: x.add_(1.0), "xs_0"),
    (lambda x: x.zero_(), "xs_0"),
    (lambda x, m, v: F.batch_norm(x, m, v, training=True), "xs_1"),
], ids=["add_", "zero_", "batch_norm-running-stats"])
def test_any_other_write_to_an_input_is_refused_in_one_line_naming_it(fn, what):
    args = (torch.randn(4, 3), torch.zeros(3), torch.ones(3))[:fn.__code__.co_argcount]
    with pytest.raises(TorchImportError) as e:
        convert(torch.export.export(_Inputs(fn), args))
    line = _one_line(e)
    assert f"input {what!r}" in line and "in place" in line, line


# ---- linalg.svd's singular vectors --------------------------------------------------------------

@pytest.mark.parametrize("fn,which", [
    (lambda a: torch.linalg.svd(a), "U"),
    (lambda a: torch.linalg.svd(a, full_matrices=False)[2], "Vh"),
    (lambda a: torch.linalg.svd(a)[0] * 2, "U"),
    (lambda a: torch.svd(a)[2], "Vh"),  # torch.svd's V is Vh transposed
], ids=["svd", "Vh", "U-read", "torch.svd-V"])
def test_svd_singular_vectors_are_refused_naming_them(fn, which):
    with pytest.raises(TorchImportError) as e:
        convert(torch.export.export(_Inputs(fn), (torch.randn(4, 3),)))
    line = _one_line(e)
    assert "singular vectors" in line and "svdvals" in line, line
    assert f" {which} (" in line, line


def test_svd_singular_values_still_match_torch():
    assert check_call(lambda a: torch.linalg.svd(a)[1], torch.randn(4, 3)) == ("pass", "")
