"""The pointwise table's rows (planner/ops/pointwise_table.py): each row's reference against
PyTorch in float64 on a grid of values holding NaN, +-inf, +-0 and values around the
functions' special points (torch's NaN and infinity semantics), its gradient ops against
torch.autograd, its dtype rule and refusals, its cost, and the generated CPU and CUDA sources
being current."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from codegen import pointwise_cpp
from planner.ops import OpError, TensorType, get_op
from planner.ops.pointwise_table import ROWS, TABLE

torch = pytest.importorskip("torch")

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.0, 1e-30, 40.0,
           -2.0, 0.3, 7.0]
# rows whose torch function is not torch.<aten name>, or that torch decomposes
TORCH = {row.name: getattr(torch, row.aten[0].split(".")[0], None) for row in ROWS if row.aten}


def _hardtanh(x, lo, hi):
    """torch's hardtanh of tensor bounds (F.hardtanh takes numbers): clamp's values, and no
    gradient for the bounds (a zero one where autograd is asked for it)."""
    y = torch.clamp(x, lo.detach(), hi.detach())
    return y + 0.0 * (lo + hi) if lo.requires_grad else y


TORCH.update({"Square": torch.square, "Frac": torch.frac,
              "DivTrunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
              "DivFloor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
              "Entr": torch.special.entr, "NextAfter": torch.nextafter,
              "Xlog1py": torch.special.xlog1py,
              "HardSigmoid": torch.nn.functional.hardsigmoid,
              "HardSwish": torch.nn.functional.hardswish, "HardTanh": _hardtanh,
              "Clamp": torch.clamp, "ClampMin": torch.clamp_min, "ClampMax": torch.clamp_max})


def _grid(arity: int) -> list[np.ndarray]:
    cols = list(zip(*itertools.product(SPECIAL, repeat=arity), strict=True)) if arity > 1 \
        else [SPECIAL]
    return [np.array(c, dtype=np.float64) for c in cols]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_reference_is_torchs_on_special_values(row):
    xs = _grid(row.arity)
    if row.arity == 3:  # lerp: the weight at a few values (the grid's cube is large)
        xs = [x[::7] for x in xs]
    ours = get_op(row.name).reference(xs, {})[0]
    want = TORCH[row.name](*[torch.tensor(x) for x in xs]).numpy()
    assert ours.dtype == want.dtype, (ours.dtype, want.dtype)
    if ours.dtype == np.bool_:
        np.testing.assert_array_equal(ours, want)
        return
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(want), err_msg="NaN")
    inf = np.isinf(want)
    np.testing.assert_array_equal(ours[inf], want[inf], err_msg="infinities")
    finite = np.isfinite(want)
    np.testing.assert_allclose(ours[finite], want[finite], rtol=1e-9, atol=1e-12)


GRAD_ROWS = [r for r in ROWS if r.grads is not None]


@pytest.mark.parametrize("row", GRAD_ROWS, ids=[r.name for r in GRAD_ROWS])
def test_gradient_ops_are_torch_autograds(row):
    """dy * d(x_k) per generated gradient op, at finite points inside the row's domain."""
    rng = np.random.default_rng(3)
    lo_hi = {"positive": (0.5, 2.0), "sym": (-0.9, 0.9), "gt1": (1.1, 3.0)}
    xs = [rng.uniform(*lo_hi.get(d, (-2.0, 2.0)), size=(4, 5)) for d in row.inputs_domain]
    dy = rng.standard_normal((4, 5))
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    y = TORCH[row.name](*ts)
    y.backward(torch.tensor(dy))
    y_np = y.detach().numpy()
    for k, d in enumerate(row.grads):
        want = ts[k].grad.numpy()
        if d is None:
            np.testing.assert_allclose(want, 0.0)
            continue
        if d == 1:
            got = dy
        else:
            ins = [dy, *xs, *([y_np] if row.uses_y else [])]
            got = get_op(row.grad_name(k)).reference(ins, {})[0]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=f"input {k}")


def test_dtypes_rule_and_refusals():
    assert get_op("Less").infer([TensorType((2, 3)), TensorType((3,))], {}) == \
        [TensorType((2, 3), "bool")]
    assert get_op("And").infer([TensorType((2,), "int32")] * 2, {})[0].dtype == "bool"
    assert get_op("Log1p").infer([TensorType((2,), "bfloat16")], {})[0].dtype == "bfloat16"
    with pytest.raises(OpError, match=r"Log1p: dtype int64 is not supported \(takes float32"):
        get_op("Log1p").infer([TensorType((2,), "int64")], {})
    with pytest.raises(OpError, match="Atan2: input dtypes differ: input 0 is float32, "
                                      "input 1 is int64"):
        get_op("Atan2").infer([TensorType((2,)), TensorType((2,), "int64")], {})
    with pytest.raises(OpError, match=r"Hypot: shapes \[2\] and \[3\] do not broadcast"):
        get_op("Hypot").infer([TensorType((2,)), TensorType((3,))], {})


def test_integer_and_bool_references():
    i, j = np.array([1, 5, -2], np.int32), np.array([1, 2, 3], np.int32)
    assert get_op("GreaterOrEqual").reference([i, j], {})[0].tolist() == [True, True, False]
    assert get_op("Xor").reference([i, j - 1], {})[0].tolist() == [True, False, False]
    assert get_op("Not").reference([np.array([True, False])], {})[0].tolist() == [False, True]
    assert get_op("IsNaN").reference([i], {})[0].tolist() == [False] * 3
    assert get_op("Square").reference([i], {})[0].dtype == np.int32


def test_costs_are_elementwise_per_row():
    for name in TABLE:
        op = get_op(name)
        assert op.cost_class == "elementwise", name
        t = TensorType((4, 5))
        ins = [t] * op.arity
        assert op.flops(ins, op.infer(ins, {}), {}) > 0, name
    assert get_op("Digamma").flops([TensorType((10,))], [TensorType((10,))], {}) == 400


def test_generated_sources_are_current():
    for path, text in pointwise_cpp.generate_files().items():
        assert path.read_text(encoding="utf-8") == text, \
            f"{path.name} stale: run python -m codegen.pointwise_cpp --write"


def test_formula_names_come_from_the_table():
    """m.call takes only LIBM's names: a name outside it is refused, never emitted."""
    m = pointwise_cpp.CppMath(pointwise_cpp.Body())
    with pytest.raises(ValueError, match="not a C library function"):
        m.call("system", pointwise_cpp.CExpr("x0", "float32"))
