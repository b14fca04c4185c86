"""ATen rules for arithmetic with a number first, as torch.export writes it: `1 / x` is
`aten.reciprocal` and `2 ** x` is `aten.pow.Scalar(2, x)` (`1 - t` and `2 / t` are sub.Tensor
and div.Tensor with a number as argument 0: rules.add_sub and rules.mul_div)."""

from __future__ import annotations

from planner.torch.context import NodeCtx, Value, rule


@rule("aten.reciprocal.default")
def reciprocal(n: NodeCtx) -> Value:
    """1 / x (an integer x is promoted to the node's float dtype first)."""
    x = n.tensor(0)
    dtype = n.out_dtype or n.dtype(x)
    if n.dtype(x) != dtype:
        x = n.emit1("Cast", [x], {"to": dtype})
    return n.emit1("Div", [n.const(1.0, dtype), x])


@rule("aten.pow.Scalar")
def pow_scalar(n: NodeCtx) -> Value:
    """base ** x for a number base: Pow of the base as a 0-d tensor (its gradient with respect
    to x is y * log(base), as torch's)."""
    base, x = n.arg(0, "self"), n.tensor(1, "exponent")
    dtype = n.out_dtype or n.dtype(x)
    if n.dtype(x) != dtype:
        x = n.emit1("Cast", [x], {"to": dtype})
    return n.emit1("Pow", [n.const(base, dtype), x])
