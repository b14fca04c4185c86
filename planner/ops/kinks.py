"""PyTorch's gradients at kinks and singular points: one table, read by the ops' gradient rules.

Where a function has no derivative (a corner of hardtanh, a tie of clamp's bounds) or its formula
is 0/0 or 0 * inf (sinc at 0, atan2 at the origin, pow at base 0), torch picks a value. The value
comes from torch's tools/autograd/derivatives.yaml and the backward kernels it names
(hardtanh_backward, clamp_backward_min_max, pow_backward_exponent, ...), checked against
torch.autograd (torch 2.13, float64) at each breakpoint: tests/ops/test_kinks.py evaluates every
entry of KINKS there, on the reference interpreter and the compiled CPU executor.

Each derivative below is a scalar formula over a math namespace `m` (planner.ops.base.Pointwise:
numpy for the reference, C++ for the CPU kernels, TVM for CUDA), `d(m, xs, y)` as a pointwise
table row's (planner/ops/pointwise_table.py): the rows and the ops built from other ops
(Pow's gradient, PReluGrad, ClipGrad) call these, never their own copy, so the convention lives
here once. NaN compares false: where torch writes `x <= lo || x >= hi ? 0 : dy` (hardtanh) a NaN
input passes dy, where it writes `x > lo && x < hi ? dy : 0` (hardsigmoid) it does not; the
formulas keep torch's spelling for that reason.

Ops whose output torch marks non-differentiable (the Bessel and Airy functions, the orthogonal
polynomials: `output_differentiability: [False]`) give no gradient, as torch's: the rest of a
module trains and their inputs get none (planner/ops/special_table.py's NONDIFFERENTIABLE).
Ops whose derivative torch has not implemented (zeta) stay refused by autodiff.

Example:
    >>> import numpy as np
    >>> from planner.ops.pointwise_table import NUMPY
    >>> x = np.float32([-1.0, 0.0, 3.0, 6.0, 7.0])
    >>> hardtanh_passes(NUMPY, x, 0.0, 6.0).astype(int)   # relu6: 0 at both corners
    array([0, 0, 1, 0, 0])
    >>> clamp_passes(NUMPY, x, 0.0, 6.0).astype(int)      # clamp: 1 at both
    array([0, 1, 1, 1, 0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NAN = math.nan
INF = math.inf


# ---- the conventions, as masks and derivatives --------------------------------------------------

def hardtanh_passes(m, x, lo, hi):
    """hardtanh_backward: dy where not (x <= lo or x >= hi): 0 at both corners (relu6 at 0 and
    6), NaN passes.

    Spelled with isnan rather than as not(x <= lo or x >= hi): TVM's simplifier, which writes
    the CUDA kernel, rewrites that negation as lo < x < hi, which is false for a NaN."""
    below = m.any(x > lo, m.any(m.isnan(x), m.isnan(lo)))
    above = m.any(x < hi, m.any(m.isnan(x), m.isnan(hi)))
    return m.all(below, above)


def clamp_passes(m, x, lo, hi):
    """clamp_backward: dy where lo <= x <= hi, the bounds included (number or tensor bounds)."""
    return m.all(x >= lo, x <= hi)


def clamp_min_bound_takes(m, x, lo, hi):
    """clamp_backward_min_max, the lower bound's share: x < lo and lo < hi (a tie x == lo goes
    to x; lo == hi gives neither bound anything below it)."""
    return m.all(x < lo, lo < hi)


def clamp_max_bound_takes(m, x, lo, hi):
    """clamp_backward_min_max, the upper bound's share: x > hi, or hi < lo (then hi is y)."""
    return m.any(x > hi, hi < lo)


# torch's kernel writes 1/6 as the float 1.0f / 6.0f, in float64 too
ONE_SIXTH_F32 = 0.1666666716337204


def hardsigmoid_slope(m, x):
    """hardsigmoid_backward: 1/6 where -3 < x < 3, else 0 (at +-3 too; NaN gives 0)."""
    return m.where(m.all(x > -3.0, x < 3.0), ONE_SIXTH_F32, 0.0)


def hardswish_slope(m, x):
    """hardswish_backward: 0 where x <= -3, x / 3 + 1/2 where x < 3, else 1 (at 3, and NaN)."""
    return m.where(x <= -3.0, 0.0, m.where(x < 3.0, x / 3.0 + 0.5, 1.0))


def prelu_passes(m, x):
    """prelu's backward: dy where x > 0, else weight * dy (at 0 too); the weight's share is
    x * dy where not x > 0."""
    return x > 0


def sinc_slope(m, x):
    """sinc_backward: (pi x cos(pi x) - sin(pi x)) / (pi x^2), 0 where pi x^2 is 0 (at 0, and
    where it underflows)."""
    px = x * math.pi
    sq = x * x * math.pi
    return m.where(sq == 0, 0.0, (px * m.call("cos", px) - m.call("sin", px)) / sq)


def atan2_reciprocal(m, a, b):
    """atan2_backward's 1 / (a^2 + b^2), taken as 0 where a^2 + b^2 is 0: both gradients are
    0 at the origin (and where the squares underflow)."""
    s = a * a + b * b
    return m.where(s == 0, 0.0, 1.0 / m.where(s == 0, 1.0, s))


def pow_base_slope(m, a, b):
    """pow_backward_self: b a^(b - 1), 0 where b == 0 (x^0 at x = 0); NaN for a < 0 and b not
    an integer, as a^b (in float32, b - 1 can round to an integer there)."""
    odd = m.all(a < 0, m.not_(b == m.call("floor", b)))
    return m.where(b == 0, 0.0, m.where(odd, NAN, b * m.pow(a, b - 1.0)))


def pow_exponent_slope(m, a, b, y):
    """pow_backward_exponent: y log(a), 0 where a == 0 and b >= 0."""
    return m.where(m.all(a == 0, b >= 0), 0.0, y * m.log(a))


def xlogy_slope(m, x, y):
    """xlogy's derivative in x: log(y), 0 where x == 0 and y <= 0 (NaN y stays NaN)."""
    return m.where(m.all(x == 0, y <= 0), 0.0, m.log(y))


def xlog1py_slope(m, x, y):
    """xlog1py's derivative in x: log1p(y), 0 where x == 0 and y <= -1."""
    return m.where(m.all(x == 0, y <= -1.0), 0.0, m.log1p(y))


def entr_slope(m, x):
    """entr's derivative: -(1 + log x): +inf at 0, NaN below."""
    return -(m.log(x) + 1.0)


# ---- the table --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kink:
    """One convention: the torch function (`call`, a dotted name under torch), its fixed
    keyword arguments, and float inputs holding the breakpoints with a point each side (NaN
    where torch's rule says where NaN goes); `ints` are integer arguments after them (targets).
    `rule` is torch's, in its words; `ops` the planner ops whose gradient follows it."""

    name: str
    call: str
    rule: str
    ops: tuple[str, ...]
    inputs: tuple[tuple[float, ...], ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    ints: tuple[tuple[int, ...], ...] = ()
    shape: tuple[int, ...] | None = None  # the first input's, when not 1-d


KINKS: tuple[Kink, ...] = (
    Kink("relu6", "nn.functional.relu6", "hardtanh_backward(grad, self, 0, 6)", ("HardTanh",),
         ((-1.0, 0.0, 3.0, 6.0, 7.0, NAN),)),
    Kink("hardtanh", "nn.functional.hardtanh", "hardtanh_backward(grad, self, min, max)",
         ("HardTanh",), ((-2.0, -0.5, 0.0, 2.0, 3.0, NAN),),
         (("min_val", -0.5), ("max_val", 2.0))),
    Kink("hardsigmoid", "nn.functional.hardsigmoid", "hardsigmoid_backward(grad, self)",
         ("HardSigmoid",), ((-4.0, -3.0, 0.0, 3.0, 4.0, NAN),)),
    Kink("hardswish", "nn.functional.hardswish", "hardswish_backward(grad, self)",
         ("HardSwish",), ((-4.0, -3.0, -1.0, 3.0, 4.0, NAN),)),
    Kink("prelu", "nn.functional.prelu",
         "_prelu_kernel_backward: self where self > 0 else weight * grad", ("PRelu",),
         ((-1.0, 0.0, 0.0, 2.0, NAN), (0.25,))),
    Kink("clamp", "clamp", "clamp_backward(grad, self, min, max): min <= self <= max", ("Clip",),
         ((-2.0, -1.0, 0.0, 1.0, 2.0),), (("min", -1.0), ("max", 1.0))),
    Kink("clamp_tensor", "clamp", "clamp_backward, clamp_backward_min_max", ("Clamp",),
         ((-1.0, 1.0, 0.0, 0.5, 2.0, -2.0, NAN), (-1.0, -1.0, 0.0, 1.0, 1.0, 1.0, 0.0),
          (1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0))),
    Kink("clamp_min_tensor", "clamp_min", "clamp_backward_min_max, min only", ("ClampMin",),
         ((-1.0, 0.0, 1.0, NAN), (0.0, 0.0, 0.0, 0.0))),
    Kink("clamp_max_tensor", "clamp_max", "clamp_backward_min_max, max only", ("ClampMax",),
         ((-1.0, 0.0, 1.0, NAN), (0.0, 0.0, 0.0, 0.0))),
    Kink("maximum", "maximum", "grad / 2 to each on a tie (max_backward)", ("Max",),
         ((1.0, 2.0, 3.0), (1.0, 1.0, 3.0))),
    Kink("minimum", "minimum", "grad / 2 to each on a tie (min_backward)", ("Min",),
         ((1.0, 2.0, 3.0), (1.0, 1.0, 3.0))),
    Kink("max_dim", "max", "value_selecting_reduction_backward: grad to the returned index "
         "(the first of a tie, the first NaN)", ("IndexGather",),
         ((1.0, 3.0, 3.0, 0.0, 2.0, 2.0, 2.0, 2.0, NAN, 1.0, NAN, 0.0),), (("dim", 1),),
         shape=(3, 4)),
    Kink("min_dim", "min", "value_selecting_reduction_backward: grad to the returned index "
         "(the first of a tie, the first NaN)", ("IndexGather",),
         ((1.0, 0.0, 3.0, 0.0, 2.0, 2.0, 2.0, 2.0, NAN, 1.0, NAN, 0.0),), (("dim", 1),),
         shape=(3, 4)),
    Kink("amax", "amax", "scale_grad_by_count: grad / k to each of k tied maxima", ("ReduceMax",),
         ((1.0, 3.0, 3.0, 0.0, 2.0, 2.0, 2.0, 2.0),), (("dim", 1),), shape=(2, 4)),
    Kink("max_all", "max", "evenly_distribute_backward: grad / k to each of k maxima (the NaNs "
         "where there are any)", ("ReduceMax",), ((1.0, 3.0, NAN, 3.0, NAN),)),
    Kink("min_all", "min", "evenly_distribute_backward: grad / k to each of k minima",
         ("ReduceMin",), ((1.0, 0.0, 3.0, 0.0, 2.0),)),
    Kink("median_all", "median", "evenly_distribute_backward: grad / k to each element equal "
         "to the median", ("TopK",), ((2.0, 1.0, 2.0, 3.0, 2.0),)),
    Kink("median_all_inf", "median", "evenly_distribute_backward, at a median of -inf",
         ("TopK",), ((-INF, 1.0, -INF, 3.0, -INF),)),
    Kink("nanmedian_all", "nanmedian", "evenly_distribute_backward: the NaNs where all are NaN",
         ("TopK",), ((NAN, NAN, NAN),)),
    Kink("nanmedian_all_ties", "nanmedian", "evenly_distribute_backward, NaNs left out",
         ("TopK",), ((NAN, 1.0, 1.0, 5.0, NAN),)),
    Kink("threshold", "nn.functional.threshold", "threshold_backward: grad where self > threshold",
         ("Where",), ((0.0, 1.0, 2.0),), (("threshold", 1.0), ("value", -2.0))),
    Kink("relu", "nn.functional.relu", "threshold_backward(grad, result, 0): NaN passes dy",
         ("Relu",), ((-1.0, 0.0, 1.0, NAN),)),
    Kink("margin_ranking_loss", "nn.functional.margin_ranking_loss",
         "(-target * (x1 - x2) + margin).clamp_min_(0): clamp's, the margin included",
         ("Clip",), ((1.0, 1.0, 2.0), (0.5, 1.5, 0.0), (1.0, -1.0, 1.0)),
         (("margin", 0.5), ("reduction", "none"))),
    Kink("hinge_embedding_loss", "nn.functional.hinge_embedding_loss",
         "(margin - self).clamp_min_(0): clamp's, the margin included", ("Clip",),
         ((1.0, 0.5, 2.0), (-1.0, -1.0, 1.0)), (("margin", 1.0), ("reduction", "none"))),
    Kink("sinc", "sinc", "sinc_backward: 0 where pi self^2 == 0", ("Sinc",),
         ((-1.0, 0.0, 0.5, 1e-30),)),
    Kink("atan2", "atan2", "atan2_backward: 0 at the origin", ("Atan2",),
         ((0.0, 1.0, 0.0, 1e-30), (0.0, 0.0, 1.0, 1e-30))),
    Kink("pow", "pow", "pow_backward_self: 0 where exponent == 0; pow_backward_exponent: 0 "
         "where self == 0 and exponent >= 0", ("Pow",),
         ((0.0, 0.0, 0.0, 0.0, 2.0, -1.0), (2.0, 0.0, 0.5, -1.0, 1.0, 0.5))),
    Kink("pow_scalar_exponent", "pow", "pow_backward: 0 where exponent == 0", ("Pow",),
         ((0.0, -1.0, 2.0),), (("exponent", 0.0),)),
    Kink("float_power", "float_power", "pow's, in float64", ("Pow",),
         ((0.0, 0.0, 0.0, 2.0), (2.0, 0.0, -1.0, 1.0))),
    Kink("xlogy", "xlogy", "self: log(other), 0 where self == 0 and other <= 0", ("Xlogy",),
         ((0.0, 0.0, 0.0, 1.0, 0.0), (2.0, 0.5, 0.0, 3.0, -1.0))),
    Kink("xlog1py", "special.xlog1py", "self: log1p(other), 0 where self == 0 and other <= -1",
         ("Xlog1py",), ((0.0, 0.0, 1.0, 0.0), (2.0, 0.5, 3.0, -1.0))),
    Kink("entr", "special.entr", "-(1 + log(self)): +inf at 0", ("Entr",),
         ((0.0, 0.5, 1.0, -1.0),)),
    Kink("nextafter", "nextafter", "self: grad where self != other (0 at a tie: y is other)",
         ("NextAfter", "Where"), ((1.0, 2.0, 0.0, 3.0), (2.0, 1.0, 0.0, 3.0))),
    Kink("bessel_j0", "special.bessel_j0", "output_differentiability: False", ("BesselJ0",),
         ((0.5, 1.0),)),
    Kink("airy_ai", "special.airy_ai", "output_differentiability: False", ("AiryAi",),
         ((0.5, 1.0),)),
    Kink("hermite_polynomial_h", "special.hermite_polynomial_h",
         "output_differentiability: False", ("HermiteH",), ((0.5, 1.0), (3.0, 2.0))),
    Kink("multi_margin_loss", "nn.functional.multi_margin_loss",
         "multi_margin_loss_backward: where margin - x[y] + x[i] > 0 (not at 0)",
         ("Relu",), ((1.0, 0.0, 0.0, 0.5, 0.25, 1.5),), (("reduction", "none"),),
         ints=((0, 2),), shape=(2, 3)),
)

BY_NAME = {k.name: k for k in KINKS}
