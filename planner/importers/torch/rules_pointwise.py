"""ATen rules of the element-wise ops: the pointwise table's rows (each row names its ATen
overloads), casts between dtypes, bitwise ops on bool and integers, shifts, division with a
rounding mode, pow of two tensors and of a number to a tensor, minimum / maximum and clamp.

Type promotion is PyTorch's (torch.result_type): the operands of a row are brought to one
dtype first, by a Cast of a tensor or a constant made in it: the node's own dtype for
arithmetic, and for comparisons and logic (whose result is bool) the promoted dtype of the
operands: a float tensor or number over an integer or bool one (a float number over an int
tensor gives float32, the default dtype), the wider of two of one kind (uint8 with int8:
int16). Integer operands of a row with an integer form (remainder, floor and trunc division)
get that op (planner/ops/integer.py); comparisons read bool and int16 / int8 / uint8 tensors
as int32 (exactly). A row given a dtype it does not take is refused in one line naming the
op, the node, its module path and the dtype.
"""

from __future__ import annotations

import math

from planner.importers.kit import Const
from planner.importers.torch.context import NodeCtx, Value, rule
from planner.ops.integer import INTEGER_FORMS, INTEGERS
from planner.ops.pointwise_table import ROWS, Row

# torch.result_type's order within a kind: a wider type wins; bfloat16 with float16 is float32
_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
_INT_RANK = {"uint8": 0, "int8": 0, "int16": 1, "int32": 2, "int64": 3}
FLOATS = ("float32", "float64", "bfloat16", "float16")


def _kind(dtype: str) -> int:
    """0 bool, 1 integer, 2 float."""
    return 2 if dtype in _FLOAT_RANK else 1 if dtype in _INT_RANK else 0


def _number_kind(v: object) -> int:
    return 0 if isinstance(v, bool) else 1 if isinstance(v, int) else 2


def _is_number(v: object) -> bool:
    return isinstance(v, (bool, int, float))


def promoted(n: NodeCtx, values: list) -> str:
    """torch.result_type of tensors and Python numbers (0-d tensors count as tensors)."""
    dtypes = [n.dtype(v) for v in values if not _is_number(v)]
    top = max((_kind(d) for d in dtypes), default=0)
    numbers = max((_number_kind(v) for v in values if _is_number(v)), default=-1)
    if numbers > top:
        return "float32" if numbers == 2 else "int64" if numbers == 1 else "bool"
    mine = [d for d in dtypes if _kind(d) == top]
    if top == 2:
        best = max(_FLOAT_RANK[d] for d in mine)
        if best == 1 and len(set(mine)) > 1:
            return "float32"  # bfloat16 with float16
        return next(d for d in mine if _FLOAT_RANK[d] == best)
    if top == 1:
        if {"uint8", "int8"} <= set(mine) and max(_INT_RANK[d] for d in mine) == 0:
            return "int16"  # the narrowest type holding both
        return max(mine, key=lambda d: _INT_RANK[d])
    return "bool"


def as_dtype(n: NodeCtx, v, dtype: str) -> str | Const:
    """A tensor, constant or Python number in `dtype`: a Cast of a tensor (or weight) that
    differs, a constant made in `dtype` of a constant or number."""
    if _is_number(v):
        return n.const(v, dtype)
    if n.dtype(v) == dtype:
        return v
    if isinstance(v, Const) and v.foldable:  # a weight stays a param, cast by an op
        return n.const(v.value(), dtype)
    if (_kind(n.dtype(v)) == 2) != (_kind(dtype) == 2) and "float32" not in (n.dtype(v), dtype):
        # a low float (or float64) to or from an integer or bool: through float32, the one
        # float type the executors' integer casts take
        v = n.emit1("Cast", [v], {"to": "float32"})
    return n.emit1("Cast", [v], {"to": dtype})


def _operands(n: NodeCtx, count: int) -> list:
    out = []
    for k in range(count):
        v = n.arg(k, "")
        if not _is_number(v):
            v = n.tensor(k)
        out.append(v)
    return out


def _refuse(n: NodeCtx, op: str, dtype: str, takes: tuple[str, ...]) -> Exception:
    return n.fail(f"{op} does not take {dtype} tensors (it takes {', '.join(takes)})")


def _row_rule(row: Row):
    def convert(n: NodeCtx) -> Value:
        values = _operands(n, row.arity)
        dtype = promoted(n, values)
        if row.out == "same" and n.out_dtype:
            dtype = n.out_dtype  # an int tensor's sin is float
        if dtype in ("bool", "int16", "int8", "uint8") and dtype not in row.dtypes \
                and row.out == "bool":
            dtype = "int32"  # bool masks compared as 0 / 1, the storage integers exactly
        op = INTEGER_FORMS.get(row.name, row.name) if dtype in INTEGERS else row.name
        if op == row.name and dtype not in row.dtypes:
            raise _refuse(n, row.name, dtype, row.dtypes)
        return n.emit1(op, [as_dtype(n, v, dtype) for v in values])

    convert.__name__ = f"row {row.name}"  # what docs/supported-ops.md names as its rule
    return convert


for _row in ROWS:
    if _row.aten:
        rule(*(f"aten.{a}" for a in _row.aten))(_row_rule(_row))


# ---- casts -----------------------------------------------------------------------------------

CAST_DTYPES = ("bool", "int32", "int64", "int16", "int8", "uint8", "float32", "float64",
               "bfloat16", "float16")


def cast(n: NodeCtx, x, dtype: str) -> Value:
    """x in `dtype` (torch's .to(): float to int truncates toward zero, non-zero is true)."""
    if dtype not in CAST_DTYPES:
        raise n.fail(f"a cast to {dtype}: the planner's dtypes are {', '.join(CAST_DTYPES)}")
    return as_dtype(n, x, dtype)


def bool_product(n: NodeCtx) -> Value:
    """aten.mul of two bool operands (a bool result): their logical and."""
    values = _operands(n, 2)
    if n.op.startswith("aten.div"):
        raise n.fail("division giving a bool tensor")
    return n.emit1("And", [as_dtype(n, v, "bool") for v in values])


# ---- bitwise ops: on bool tensors the logical ones, on integers planner/ops/integer.py's -------

_BITWISE = {"aten.bitwise_and.Tensor": "And", "aten.bitwise_or.Tensor": "Or",
            "aten.bitwise_xor.Tensor": "Xor", "aten.bitwise_not.default": "Not",
            "aten.bitwise_and.Scalar": "And", "aten.bitwise_or.Scalar": "Or",
            "aten.bitwise_xor.Scalar": "Xor"}
_ON_INTEGERS = {"And": "BitwiseAnd", "Or": "BitwiseOr", "Xor": "BitwiseXor", "Not": "BitwiseNot"}


@rule(*_BITWISE)
def bitwise(n: NodeCtx) -> Value:
    op = _BITWISE[n.op]
    values = _operands(n, 1 if op == "Not" else 2)
    dtype = promoted(n, values)
    if dtype in INTEGERS:
        op = _ON_INTEGERS[op]
    elif dtype != "bool":
        raise n.fail(f"bitwise ops on {dtype} tensors: the planner has them on bool tensors "
                     f"(logical and, or, xor, not) and on {', '.join(INTEGERS)} ones")
    return n.emit1(op, [as_dtype(n, v, dtype) for v in values])


_SHIFTS = {"aten.bitwise_left_shift.Tensor": "ShiftLeft",
           "aten.bitwise_left_shift.Tensor_Scalar": "ShiftLeft",
           "aten.__lshift__.Scalar": "ShiftLeft", "aten.__lshift__.Tensor": "ShiftLeft",
           "aten.bitwise_right_shift.Tensor": "ShiftRight",
           "aten.bitwise_right_shift.Tensor_Scalar": "ShiftRight",
           "aten.__rshift__.Scalar": "ShiftRight", "aten.__rshift__.Tensor": "ShiftRight"}


@rule(*_SHIFTS)
def shift(n: NodeCtx) -> Value:
    values = _operands(n, 2)
    dtype = n.out_dtype or promoted(n, values)
    if dtype not in INTEGERS:
        raise _refuse(n, _SHIFTS[n.op], dtype, INTEGERS)
    return n.emit1(_SHIFTS[n.op], [as_dtype(n, v, dtype) for v in values])


# ---- division with a rounding mode, pow, minimum / maximum, clamp -------------------------------

@rule("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(n: NodeCtx) -> Value:
    values = _operands(n, 2)
    mode = n.kwargs.get("rounding_mode", n.arg(2, "rounding_mode"))
    op = {None: "Div", "trunc": "DivTrunc", "floor": "DivFloor"}.get(mode)
    if op is None:
        raise n.fail(f"rounding_mode {mode!r} (torch takes None, 'trunc' or 'floor')")
    dtype = n.out_dtype or promoted(n, values)
    if dtype in INTEGERS and op != "Div":
        op = INTEGER_FORMS[op]
    elif _kind(dtype) != 2:
        raise n.fail(f"division of {dtype} tensors with rounding_mode={mode!r}: the planner "
                     f"divides float and {', '.join(INTEGERS)} tensors")
    return n.emit1(op, [as_dtype(n, v, dtype) for v in values])


@rule("aten.floor_divide.default", "aten.floor_divide.Scalar")
def floor_divide(n: NodeCtx) -> Value:
    values = _operands(n, 2)
    dtype = n.out_dtype or promoted(n, values)
    if dtype not in INTEGERS and _kind(dtype) != 2:
        raise _refuse(n, "floor_divide", dtype, FLOATS + INTEGERS)
    return n.emit1("IntDivFloor" if dtype in INTEGERS else "DivFloor",
                   [as_dtype(n, v, dtype) for v in values])


def _float_binary(n: NodeCtx, op: str, values: list) -> Value:
    dtype = n.out_dtype or promoted(n, values)
    if _kind(dtype) != 2:
        raise _refuse(n, op, dtype, FLOATS)
    return n.emit1(op, [as_dtype(n, v, dtype) for v in values])


@rule("aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def pow_tensor(n: NodeCtx) -> Value:
    """a ** b of two tensors, or of a number to a tensor (torch.pow(2, x), 2 ** x)."""
    return _float_binary(n, "Pow", _operands(n, 2))


@rule("aten.nextafter.default")
def nextafter(n: NodeCtx) -> Value:
    """NextAfter, whose gradient for a is torch's: dy, but 0 where a == b (y is b there,
    constant in a: planner/ops/kinks.py), by a Where picking the detached result at ties
    (the same values)."""
    values = _operands(n, 2)
    dtype = n.out_dtype or promoted(n, values)
    if _kind(dtype) != 2:
        raise _refuse(n, "NextAfter", dtype, FLOATS)
    a, b = (as_dtype(n, v, dtype) for v in values)
    y = n.emit1("NextAfter", [a, b])
    return n.emit1("Where", [n.emit1("Equal", [a, b]), n.emit1("StopGradient", [y]), y])


@rule("aten.minimum.default", "aten.maximum.default")
def extremum(n: NodeCtx) -> Value:
    op = "Min" if n.op == "aten.minimum.default" else "Max"
    values = _operands(n, 2)
    dtype = n.out_dtype or promoted(n, values)
    if dtype not in INTEGERS:
        return _float_binary(n, op, values)
    return n.emit1(op, [as_dtype(n, v, dtype) for v in values])


@rule("aten.clamp.Tensor", "aten.clamp_min.Tensor", "aten.clamp_max.Tensor")
def clamp_tensor(n: NodeCtx) -> Value:
    """min(max(x, lo), hi) with tensor bounds: of floats the Clamp rows, of integers Max and
    Min."""
    x = n.tensor(0)
    if n.op == "aten.clamp.Tensor":
        lo, hi = n.arg(1, "min"), n.arg(2, "max")
    elif n.op == "aten.clamp_min.Tensor":
        lo, hi = n.arg(1, "min"), None
    else:
        lo, hi = None, n.arg(1, "max")
    dtype = n.out_dtype or n.dtype(x)
    if _kind(dtype) != 2 and dtype not in INTEGERS:
        raise _refuse(n, "clamp", dtype, FLOATS + INTEGERS)
    y = as_dtype(n, x, dtype)
    if dtype not in INTEGERS:
        # the pointwise table's Clamp rows: a tie goes to x, as torch's clamp_backward_min_max
        # (planner/ops/kinks.py), where Max / Min would halve it
        bounds = [as_dtype(n, b, dtype) for b in (lo, hi) if b is not None]
        op = "Clamp" if lo is not None and hi is not None else \
            "ClampMin" if lo is not None else "ClampMax"
        return n.emit1(op, [y, *bounds])
    if lo is not None:
        y = n.emit1("Max", [y, as_dtype(n, lo, dtype)])
    if hi is not None:
        y = n.emit1("Min", [y, as_dtype(n, hi, dtype)])
    return y


def clamp_numbers(n: NodeCtx, x, low, high) -> Value:
    """clamp(x, low, high) of number bounds (None: unbounded): Clip, in the node's float dtype
    (an integer x met by a float bound is cast, as torch promotes); of integers, Max and Min
    with integer constants."""
    dtype = n.out_dtype or n.dtype(x)
    y = as_dtype(n, x, dtype)
    if dtype not in INTEGERS:
        return n.emit1("Clip", [y], {"min": None if low is None else float(low),
                                     "max": None if high is None else float(high)})
    if low is not None:
        y = n.emit1("Max", [y, n.const(int(low), dtype)])
    if high is not None:
        y = n.emit1("Min", [y, n.const(int(high), dtype)])
    return y


@rule("aten.clamp_max.default")
def clamp_max(n: NodeCtx) -> Value:
    return clamp_numbers(n, n.tensor(0), None, n.arg(1, "max"))


@rule("aten.sign.default", "aten.sgn.default")
def sign(n: NodeCtx) -> Value:
    x = n.tensor(0)
    if _kind(n.dtype(x)) != 2:
        raise _refuse(n, "Sign", n.dtype(x), ("float32", "float64", "bfloat16", "float16"))
    return n.emit1("Sign", [x])


@rule("aten.angle.default")
def angle(n: NodeCtx) -> Value:
    """A real x's angle: pi where x < 0, else 0 (-0.0 too: torch tests `x < 0`), NaN where x
    is NaN. Both pieces are constants, so no gradient reaches x: torch's is 0 for a real input
    (a complex one is rules_complex.py's Atan2)."""
    x = n.tensor(0)
    d = n.dtype(x)
    if _kind(d) != 2:
        raise _refuse(n, "angle", d, ("float32", "float64", "bfloat16", "float16"))
    half = n.emit1("Where", [n.emit1("Less", [x, n.const(0.0, d)]), n.const(math.pi, d),
                             n.const(0.0, d)])
    return n.emit1("Where", [n.emit1("IsNaN", [x]), n.const(math.nan, d), half])
