"""Transformer ops (LayerNorm, Gelu, Erf, Where, CausalMask) and the gradients of Pow, Max, Min:
references and gradient rules against torch (float32 forward, float64 autograd), against finite
differences (float64), and shape errors. The finite-difference cases of every op are also in
tests/graph/test_autodiff.py's OP_CASES."""

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _normal(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _layer_norm(axis):
    def fn(x, scale, bias):
        return F.layer_norm(x, tuple(x.shape[axis:]), scale, bias, eps=1e-5)
    return fn


# (op, attrs, input shapes, torch function of the inputs, inputs to differentiate)
CASES = [
    ("LayerNorm", {}, [(2, 3, 8), (8,), (8,)], _layer_norm(-1), [0, 1, 2]),
    ("LayerNorm", {"axis": 1}, [(2, 3, 4), (3, 4), (3, 4)], _layer_norm(1), [0, 1, 2]),
    ("Gelu", {}, [(3, 5)], F.gelu, [0]),
    ("Gelu", {"approximate": "tanh"}, [(3, 5)], lambda x: F.gelu(x, approximate="tanh"), [0]),
    ("Erf", {}, [(3, 5)], torch.erf, [0]),
    ("Pow", {}, [(2, 3), (3,)], torch.pow, [0, 1]),
    ("Max", {}, [(2, 3), (2, 1)], torch.maximum, [0, 1]),
    ("Min", {}, [(2, 3), (3,)], torch.minimum, [0, 1]),
    ("CausalMask", {"value": -3.0}, [(2, 4, 4)],
     lambda x: x.masked_fill(torch.ones(4, 4).triu(1).bool(), -3.0), [0]),
]
IDS = [f"{c[0]}-{c[1]}" for c in CASES]


def _inputs(op, shapes, dtype, seed):
    xs = [_normal(s, dtype, seed + k) for k, s in enumerate(shapes)]
    if op == "Pow":
        xs[0] = np.abs(xs[0]) + dtype(0.5)  # a real power needs a positive base
    return xs


def _first(out):
    return out[0] if isinstance(out, (list, tuple)) else out


@pytest.mark.parametrize("op,attrs,shapes,fn,wrt", CASES, ids=IDS)
def test_reference_matches_torch(op, attrs, shapes, fn, wrt):
    xs = _inputs(op, shapes, np.float32, 0)
    ours = reference(op, xs, attrs)[0]
    theirs = _first(fn(*map(torch.tensor, xs))).numpy()
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    # float32 results of a few roundings each: within a few ulps of torch's
    assert rel_error(ours, theirs) < 1e-6


@pytest.mark.parametrize("op,attrs,shapes,fn,wrt", CASES, ids=IDS)
def test_gradient_matches_torch_and_finite_differences(op, attrs, shapes, fn, wrt):
    xs = _inputs(op, shapes, np.float64, 10)
    grads, dys, _ = apply_rule(op, xs, attrs, wrt=wrt, of=[0])
    expected = torch_gradients(lambda *ts: [_first(fn(*ts))], xs, dys, wrt)
    for k, want in zip(wrt, expected, strict=True):
        assert rel_error(grads[k], want) < 1e-10, f"input {k}"
    check_gradient(op, xs, attrs, wrt=wrt, of=[0])


def test_max_min_split_ties_as_torch():
    a = np.array([[1.0, 2.0, 3.0]])
    b = np.array([[1.0, 5.0, 0.0]])
    for op, fn in (("Max", torch.maximum), ("Min", torch.minimum)):
        grads, dys, emitted = apply_rule(op, [a, b])
        assert emitted == [f"{op}Grad"]
        want = torch_gradients(fn, [a, b], dys, [0, 1])
        assert np.array_equal(grads[0], want[0]) and np.array_equal(grads[1], want[1])


def test_where_reference_and_gradient():
    cond = np.array([[True, False, True]])
    a = _normal((2, 3), np.float64, 1)
    b = _normal((3,), np.float64, 2)
    got = reference("Where", [cond, a, b])[0]
    assert np.array_equal(got, torch.where(torch.tensor(cond), torch.tensor(a),
                                           torch.tensor(b)).numpy())
    # a float or int64 condition: non-zero is true
    for c in (cond.astype(np.float32), cond.astype(np.int64)):
        assert np.array_equal(reference("Where", [c, a, b])[0], got)
    grads, dys, _ = apply_rule("Where", [cond.astype(np.int64), a, b], wrt=[1, 2])
    want = torch_gradients(lambda x, y: torch.where(torch.tensor(cond), x, y), [a, b], dys,
                           [0, 1])
    assert np.array_equal(grads[1], want[0]) and np.array_equal(grads[2], want[1])


def test_layer_norm_without_bias_and_stats():
    x = _normal((4, 6), np.float64, 3)
    scale = _normal((6,), np.float64, 4)
    y, mean, var = reference("LayerNorm", [x, scale], {"epsilon": 1e-3})
    assert mean.shape == var.shape == (4, 1)
    assert np.allclose(mean[:, 0], x.mean(1)) and np.allclose(var[:, 0], x.var(1))
    want = F.layer_norm(torch.tensor(x), (6,), torch.tensor(scale), None, eps=1e-3).numpy()
    assert rel_error(y, want) < 1e-12
    grads, _ = check_gradient("LayerNorm", [x, scale], {"epsilon": 1e-3}, wrt=[0, 1], of=[0])
    assert grads[1].shape == (6,)


def test_causal_mask_defaults_to_minus_infinity_and_softmax_ignores_the_future():
    x = _normal((1, 3, 3), np.float32, 5)
    masked = reference("CausalMask", [x])[0]
    p = reference("Softmax", [masked], {"axis": -1})[0]
    assert np.all(np.isneginf(masked[0][np.triu_indices(3, 1)]))
    assert np.all(p[0][np.triu_indices(3, 1)] == 0) and np.allclose(p.sum(-1), 1)


def test_gelu_and_erf_keep_nan_and_inf():
    x = np.array([np.nan, np.inf, -np.inf, 0.0], dtype=np.float32)
    assert np.array_equal(reference("Erf", [x])[0], [np.nan, 1, -1, 0], equal_nan=True)
    # Gelu at +-inf is 0 * inf somewhere in every formula (torch gives NaN for both); NaN must
    # stay NaN.
    for attrs in ({}, {"approximate": "tanh"}):
        y = reference("Gelu", [x[[0, 3]]], attrs)[0]
        assert np.isnan(y[0]) and y[1] == 0


def test_errors():
    with pytest.raises(OpError, match=r"LayerNorm: scale must have shape \[4\]"):
        get_op("LayerNorm").infer([TensorType((2, 4)), TensorType((3,))],
                                  {"axis": -1, "epsilon": 1e-5})
    with pytest.raises(OpError, match="Gelu: approximate 'fast' is not one of"):
        get_op("Gelu").infer([TensorType((2,))], {"approximate": "fast"})
    with pytest.raises(OpError, match="Where: the two branches differ in dtype"):
        get_op("Where").infer([TensorType((2,), "bool"), TensorType((2,)),
                               TensorType((2,), "int64")], {})
    with pytest.raises(OpError, match=r"Where: shapes \[2\] and \[3\] do not broadcast"):
        get_op("Where").infer([TensorType((2,), "bool"), TensorType((3,)), TensorType((3,))], {})
    with pytest.raises(OpError, match="CausalMask: input must have rank >= 2"):
        get_op("CausalMask").infer([TensorType((3,))], {"value": None})
    with pytest.raises(OpError, match="MaxGrad: dy is float32 \\[2\\]"):
        get_op("MaxGrad").infer([TensorType((2,)), TensorType((2, 3)), TensorType((3,))], {})


class _Counted(np.ndarray):
    """An array that counts the element operations done on it: one per output element of an
    element-wise ufunc, one per element folded in by a reduction."""

    ops = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        args = [np.asarray(i) for i in inputs]
        out = getattr(ufunc, method)(*args, **kwargs)
        _Counted.ops += np.size(out) if method == "__call__" else np.size(args[0]) - np.size(out)
        return np.asarray(out).view(_Counted)


def _counted(formula, *shapes) -> int:
    _Counted.ops = 0
    formula(*(np.ones(s).view(_Counted) for s in shapes))
    return _Counted.ops


def test_gelu_flops_are_its_formulas_operations():
    # Counted on the textbook formula (erf counted as one operation, as the op's docstring
    # says a transcendental function is), not restated from the op.
    def gelu(x):
        return 0.5 * x * (1 + np.tanh(x / np.sqrt(2.0)))  # erf's place: one operation

    t = TensorType((4, 8))
    assert get_op("Gelu").flops([t], [t], {}) == _counted(gelu, (4, 8))


@pytest.mark.parametrize("op", ["LayerNorm", "LayerNormGrad", "Gelu", "GeluGrad", "Erf"])
def test_flops_grow_with_the_elements_and_not_with_the_layout(op):
    def types(shape):
        t = TensorType(shape)
        row = TensorType(shape[-1:])
        stats = TensorType((*shape[:-1], 1))
        return {"LayerNorm": ([t, row, row], [t, stats, stats]),
                "LayerNormGrad": ([t, t, row, stats, stats], [t, row, row]),
                "Gelu": ([t], [t]), "GeluGrad": ([t, t], [t]), "Erf": ([t], [t])}[op]

    flops = get_op(op).flops
    small, double, reshaped = (flops(*types(s), {}) for s in ((4, 8), (8, 8), (2, 16)))
    assert small > 0 and double == 2 * small
    assert reshaped == small


def test_gradients_cost_more_than_their_ops():
    t, row, stats = TensorType((4, 8)), TensorType((8,)), TensorType((4, 1))
    assert (get_op("GeluGrad").flops([t, t], [t], {})
            > get_op("Gelu").flops([t], [t], {}))
    assert (get_op("LayerNormGrad").flops([t, t, row, stats, stats], [t, row, row], {})
            > get_op("LayerNorm").flops([t, row, row], [t, stats, stats], {}))
