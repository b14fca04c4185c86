"""Cast: a tensor's values in another dtype (float32 <-> bfloat16 / float16, and any other pair
numpy converts), the op a precision policy inserts (planner/frontend/passes/precision.py).

Rounding is numpy's (ml_dtypes' for bfloat16): round to nearest even, overflow to infinity,
as oneDNN's reorders, cuDNN and PyTorch round; a float to an integer truncates toward zero (to
int16, int8 or uint8 through int64, wrapping). Widening a low float to float32 is exact.
The gradient is the cast back: dx = Cast(dy, to=x's dtype) (torch.autocast's rule).
FLOPs: none; bytes moved: the input read and the output written.

Example:
    >>> import numpy as np
    >>> from planner.ops import TensorType, get_op
    >>> get_op("Cast").infer([TensorType((2, 3))], {"to": "bfloat16"})[0].dtype
    'bfloat16'
    >>> get_op("Cast").reference([np.float32([1 + 2**-9, 3.0])], {"to": "bfloat16"})[0]
    array([1, 3], dtype=bfloat16)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import DTYPE_BYTES, LOW_FLOATS, is_float
from planner.ops.base import Attr, Attrs, GradBuilder, OpDef, OpError, TensorType, register

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _cast_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if a["to"] not in DTYPE_BYTES:
        raise OpError(f"Cast: attribute 'to' = {a['to']!r} is not one of {sorted(DTYPE_BYTES)}")
    return [TensorType(ins[0].shape, a["to"])]


def _cast(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """numpy's astype; a float to int16, int8 or uint8 through int64, wrapping (what the
    executors and PyTorch on x86 give: the direct conversion out of range is undefined in C)."""
    x = np.asarray(xs[0])
    floating = x.dtype.kind == "f" or str(x.dtype) in LOW_FLOATS
    if floating and a["to"] in ("int16", "int8", "uint8"):
        with np.errstate(invalid="ignore"):
            x = x.astype(np.int64)
    return [x.astype(a["to"])]


def _cast_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None:
        return [None]
    x = g.type(node.inputs[0])
    if not is_float(x.dtype):
        return [None]
    return [g.emit("Cast", [dy], {"to": x.dtype})[0]]


register(OpDef(
    name="Cast",
    cost_class="elementwise",
    attrs={"to": Attr("str", required=True)},
    infer=_cast_infer,
    flops=lambda ins, outs, a: 0,
    reference=_cast,
    gradient=_cast_gradient,
    doc="y = x in dtype `to` (round to nearest even); dx = dy cast back to x's dtype.",
))
