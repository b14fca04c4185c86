"""ATen rules of the special functions (planner/ops/special_table.py's rows, by the pointwise
table's own rule: type promotion, dtype refusals), polygamma's order picking its row,
torch.round with decimals, and the modified Bessel functions I0 / I1 of torch.special, which
are the I0 / I1 rows without a gradient (torch's are not differentiable)."""

from __future__ import annotations

from planner.importers.kit import Unsupported
from planner.importers.torch.context import NodeCtx, Value, rule
from planner.importers.torch.rules_pointwise import _kind, _row_rule, as_dtype
from planner.ops.special_table import POLYGAMMA_ORDERS, ROWS

# kept whole by torch.export's decomposition (planner.importers.torch.convert)
PRESERVED = ("special_log_ndtr.default",)

for _row in ROWS:
    if _row.aten:
        rule(*(f"aten.{a}" for a in _row.aten))(_row_rule(_row))


def _float_input(n: NodeCtx, k: int) -> Value:
    """Input k in the node's float dtype (an integer tensor's special function is float)."""
    x = n.tensor(k)
    dtype = n.out_dtype or n.dtype(x)
    if _kind(dtype) != 2:
        raise n.fail(f"{n.op.split('.')[1]} of {dtype} tensors: the planner computes it on "
                     f"float tensors")
    return as_dtype(n, x, dtype)


@rule("aten.polygamma.default")
def polygamma(n: NodeCtx) -> Value:
    """polygamma(n, x): Digamma for n = 0, the row Polygamma<n> for n in 1..4."""
    order = n.arg(0, "n")
    x = _float_input(n, 1)
    if order == 0:
        return n.emit1("Digamma", [x])
    if order not in POLYGAMMA_ORDERS:
        raise Unsupported(f"{n.op} (order {order}: the planner has orders 0 to "
                          f"{max(POLYGAMMA_ORDERS)})")
    return n.emit1(f"Polygamma{order}", [x])


@rule("aten.frexp.Tensor")
def frexp(n: NodeCtx) -> Value:
    x = _float_input(n, 0)
    return n.emit1("FrexpMantissa", [x]), n.emit1("FrexpExponent", [x])


@rule("aten.special_modified_bessel_i0.default", "aten.special_modified_bessel_i1.default")
def modified_bessel_i(n: NodeCtx) -> Value:
    op = "I0" if n.op.endswith("i0.default") else "I1"
    return n.emit1("StopGradient", [n.emit1(op, [_float_input(n, 0)])])


@rule("aten.round.decimals")
def round_decimals(n: NodeCtx) -> Value:
    """torch.round(x, decimals=d) as torch computes it in float32: nearbyint(x * 10^d) / 10^d,
    for d < 0 nearbyint(x / 10^-d) * 10^-d (halves to even)."""
    x = _float_input(n, 0)
    decimals = n.kwargs.get("decimals", n.arg(1, "decimals", 0))
    if decimals == 0:
        return n.emit1("Round", [x])
    dtype = n.dtype(x)
    scale = n.const(float(10.0 ** abs(decimals)), dtype)
    if decimals > 0:
        return n.emit1("Div", [n.emit1("Round", [n.emit1("Mul", [x, scale])]), scale])
    return n.emit1("Mul", [n.emit1("Round", [n.emit1("Div", [x, scale])]), scale])
