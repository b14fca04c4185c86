"""The op-kernel cases of planner/ops/integer.py's ops (tests/codegen/op_cases.py runs them):
int64 and int32 operands, broadcast, with shift counts beyond the type's width and negative,
and divisors that are never zero but hold -1 against the type's most negative value (its
quotient wraps)."""

from __future__ import annotations

import numpy as np


def sint(bound):
    """Signed int64 values in [-bound, bound)."""
    return ("sint", bound)


def sint32(bound):
    return ("ids32", bound)


_WIDE = 1 << 40
_BINARY = [([((3, 8), sint(_WIDE)), ((8,), sint(_WIDE))], {}),
           ([((2, 1, 5), sint32(1 << 20)), ((3, 5), sint32(1 << 20))], {})]
_SHIFT = [([((3, 8), sint(1 << 20)), ((3, 8), sint(70))], {}),
          ([((4, 6), sint32(1 << 12)), ((6,), sint32(40))], {})]
_DIVIDE = [([((3, 8), sint(50)), ((3, 1), sint(7))], {}),
           ([((4, 6), sint32(50)), ((6,), sint32(7))], {})]

INTEGER_CASES: dict[str, list[tuple]] = {
    "BitwiseAnd": _BINARY, "BitwiseOr": _BINARY, "BitwiseXor": _BINARY,
    "BitwiseNot": [([((3, 8), sint(_WIDE))], {}), ([((5,), sint32(1 << 20))], {})],
    "ShiftLeft": _SHIFT, "ShiftRight": _SHIFT,
    "IntDivFloor": _DIVIDE, "IntDivTrunc": _DIVIDE, "IntRemainder": _DIVIDE,
}


def derive(op, xs):
    """A divisor's zeros made 3 (a zero is refused), and (signed types) its first element -1
    under the most negative dividend."""
    if op in ("IntDivFloor", "IntDivTrunc", "IntRemainder"):
        a, b = xs[0].copy(), np.where(xs[1] == 0, 3, xs[1]).astype(xs[1].dtype)
        if a.dtype.kind == "i":
            a.reshape(-1)[0] = np.iinfo(a.dtype).min
            b.reshape(-1)[0] = -1
        return [a, b]
    return xs
