"""A max (or min) over some axes of a computed tensor, for both front ends (ONNX ReduceMax and
ReduceMin, ATen amax, amin and max.dim): the kept axes flattened into MaxPool's batch and the
reduced ones, moved last, into its width, with one window that spans it. Forward values are
exact; the gradient goes to one maximal element (MaxPoolGrad's choice), where PyTorch's amax
shares it among ties (equal for inputs without ties).

    >>> from planner.ops import TensorType
    >>> emitted = []
    >>> def emit1(op, inputs, attrs=None):
    ...     emitted.append((op, attrs))
    ...     return op
    >>> pool_max(emit1, "x", (2, 3, 4), [1], minimum=False)
    'MaxPool'
    >>> [op for op, _ in emitted], emitted[-1][1]["kernel"]
    (['Transpose', 'Reshape', 'MaxPool'], [1, 3])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

Emit1 = Callable[..., Any]


def pool_max(emit1: Emit1, x: Any, shape: Sequence[int], axes: Sequence[int],
             minimum: bool) -> Any:
    """The (rows, 1, 1, 1) tensor of maxima (minima) of x over `axes` (non-negative, sorted),
    rows the product of the kept axes in their order; the caller reshapes it. Both products
    must be positive."""
    kept = [k for k in range(len(shape)) if k not in axes]
    rows, width = prod(shape[k] for k in kept), prod(shape[k] for k in axes)
    if minimum:
        x = emit1("Neg", [x])
    if kept + list(axes) != list(range(len(shape))):
        x = emit1("Transpose", [x], {"perm": kept + list(axes)})
    x = emit1("Reshape", [x], {"shape": [rows, 1, 1, width]})
    pooled = emit1("MaxPool", [x], {"kernel": [1, width], "strides": [1, width]})
    return emit1("Neg", [pooled]) if minimum else pooled
