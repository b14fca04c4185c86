"""Integer ops: bitwise logic, shifts, and division and remainder of integers, as PyTorch's CPU
kernels compute them on integer tensors (int64, int32, int16, int8, uint8), one table row
each.

    BitwiseAnd, BitwiseOr, BitwiseXor  [a, b] -> a & b, a | b, a ^ b
    BitwiseNot                         [x] -> ~x
    ShiftLeft                          [a, b] -> a << b; 0 where b < 0 or b >= the type's bits
    ShiftRight                         [a, b] -> a >> b (arithmetic); the sign fill, a >> (bits
                                       - 1), where b < 0 or b > bits - 1 (unsigned: 0 where
                                       b >= bits)
    IntDivFloor                        [a, b] -> floor(a / b)  (div rounding_mode='floor', //)
    IntDivTrunc                        [a, b] -> trunc(a / b)  (div rounding_mode='trunc')
    IntRemainder                       [a, b] -> a - floor(a / b) * b, the sign of b (%)

The float forms of division are the pointwise table's rows (DivFloor, DivTrunc, Remainder),
whose formulas go through fmod and floor in floating point: exact for floats, not for int64
beyond 2^53, so integers have rows of their own. Operands share one integer dtype, broadcast
as numpy; the result keeps it. Overflow wraps as two's complement (the most negative value
divided by -1 is itself, where PyTorch's CPU kernel dies of a floating-point exception); a zero
divisor is refused when the op runs (PyTorch raises ZeroDivisionError). Integer results have
no gradient. Add, Sub, Mul, Neg, Abs, Max, Min and the reductions take integers too (their own
definitions); the CPU runs all of them in templates/cpu/runtime/kernels/integer.cpp.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> a, b = np.array([7, -7, 7, -7]), np.array([2, 2, -2, -2])
    >>> get_op("IntDivFloor").reference([a, b], {})[0]
    array([ 3, -4, -4,  3])
    >>> get_op("IntRemainder").reference([a, b], {})[0]
    array([ 1,  1, -1, -1])
    >>> get_op("ShiftRight").reference([np.array([-8, 8]), np.array([1, 70])], {})[0]
    array([-4,  0])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.dtypes import INTEGER_DTYPES
from planner.ops.base import OpDef, OpError, TensorType, elementwise_flops, register
from planner.ops.elementwise import broadcast_shapes

INTEGERS = INTEGER_DTYPES


def _bits(x: np.ndarray) -> int:
    return 8 * x.dtype.itemsize


def _unsigned(x: np.ndarray) -> np.ndarray:
    return x.astype(np.dtype(f"uint{_bits(x)}"))


def _nonzero_divisor(b: np.ndarray) -> None:
    if (b == 0).any():
        raise OpError("integer division by zero (PyTorch raises ZeroDivisionError)")


def _div_floor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _nonzero_divisor(b)
    with np.errstate(all="ignore"):  # the most negative value // -1 wraps to itself
        return np.floor_divide(a, b)


def _div_trunc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = _div_floor(a, b)
    # floor and trunc differ by one where the division is inexact and the signs differ
    inexact = np.remainder(a, b) != 0
    return np.where(inexact & ((a < 0) != (b < 0)), q + 1, q).astype(q.dtype)


def _remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _nonzero_divisor(b)
    with np.errstate(all="ignore"):
        return np.remainder(a, b)


def _shift_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = _bits(a)
    out = np.left_shift(_unsigned(a), np.clip(b, 0, bits - 1).astype(_unsigned(a).dtype))
    return np.where((b < 0) | (b >= bits), 0, out.astype(a.dtype)).astype(a.dtype)


def _shift_right(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = _bits(a)
    if a.dtype.kind == "u":  # all bits shifted out
        return np.where(b >= bits, 0, np.right_shift(a, np.minimum(b, bits - 1))).astype(a.dtype)
    return np.right_shift(a, np.where((b < 0) | (b > bits - 1), bits - 1, b).astype(a.dtype))


@dataclass(frozen=True)
class Row:
    name: str
    fn: Callable[..., np.ndarray]
    doc: str
    arity: int = 2


ROWS: tuple[Row, ...] = (
    Row("BitwiseAnd", np.bitwise_and, "y = a & b (integers)."),
    Row("BitwiseOr", np.bitwise_or, "y = a | b (integers)."),
    Row("BitwiseXor", np.bitwise_xor, "y = a ^ b (integers)."),
    Row("BitwiseNot", np.invert, "y = ~x (integers).", arity=1),
    Row("ShiftLeft", _shift_left, "y = a << b; 0 where b < 0 or b >= the type's bits."),
    Row("ShiftRight", _shift_right,
        "y = a >> b (arithmetic); the sign fill where b < 0 or b > the type's bits - 1."),
    Row("IntDivFloor", _div_floor, "y = floor(a / b) of integers (a zero b is refused)."),
    Row("IntDivTrunc", _div_trunc, "y = trunc(a / b) of integers (a zero b is refused)."),
    Row("IntRemainder", _remainder,
        "y = a - floor(a / b) * b of integers, the sign of b (a zero b is refused)."),
)


def _infer(row: Row):
    def infer(ins: list[TensorType], a: dict) -> list[TensorType]:
        dtype = ins[0].dtype
        if any(t.dtype != dtype for t in ins) or dtype not in INTEGERS:
            raise OpError(f"{row.name}: operands must be one integer dtype ({', '.join(INTEGERS)}),"
                          f" got {', '.join(t.dtype for t in ins)}")
        shape = ins[0].shape
        for t in ins[1:]:
            shape = broadcast_shapes(row.name, shape, t.shape)
        return [TensorType(shape, dtype)]

    return infer


def _reference(row: Row):
    def reference(xs: list[np.ndarray], a: dict) -> list[np.ndarray]:
        xs = [np.asarray(x) for x in xs]
        shape = np.broadcast_shapes(*(x.shape for x in xs))
        y = np.asarray(row.fn(*xs)).astype(xs[0].dtype)
        return [np.array(np.broadcast_to(y, shape), order="C")]

    return reference


for _row in ROWS:
    register(OpDef(
        name=_row.name, arity=_row.arity, cost_class="elementwise",
        infer=_infer(_row),
        flops=elementwise_flops(1),
        reference=_reference(_row),
        nondiff_inputs=tuple(range(_row.arity)),
        doc=_row.doc,
    ))


# The table row (planner/ops/pointwise_table.py) each integer op is the integer form of: the
# torch front end emits the integer op where the operands are integers.
INTEGER_FORMS: dict[str, str] = {"DivFloor": "IntDivFloor", "DivTrunc": "IntDivTrunc",
                                 "Remainder": "IntRemainder"}
