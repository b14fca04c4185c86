"""The pointwise table: element-wise ops as rows, each one definition of everything about an op.

A row says the op's name, its scalar formula (over the math namespace `m` of
planner.ops.base.Pointwise), the dtypes it takes and gives, its derivative with respect to
each input as a scalar formula of the inputs (and the output), its FLOPs per element, the ATen
overloads the torch front end maps to it and where it is defined (its tests' sample inputs).
From that one row come

  - the OpDef (shape and dtype rule: inputs of one dtype, broadcast as numpy; cost class
    "elementwise"),
  - its numpy reference: the formula over numpy (`NUMPY`), NaN and infinities included,
  - its gradient rule: per input, dx = sum_to(dy * d(x)), one generated op `<Name>Grad` (one
    input) or `<Name>GradA`, `<Name>GradB`, ... (several) taking [dy, *inputs(, y)], itself a
    row-derived pointwise op; a derivative of 1 passes dy on with no op, None gives no gradient,
  - its CPU kernel: codegen/pointwise_cpp.py renders the formula as a C++ functor into
    templates/cpu/runtime/kernels/pointwise_table_<k>.cpp (pointwise_family.h's loop),
  - its CUDA kernel: codegen/tvm_kernels.py generates it from the same formula,
  - the torch front end's rule (planner/importers/torch/rules_pointwise.py, from `aten`).

The formulas follow PyTorch's CPU kernels where they choose (remainder's sign, floor division,
lerp's two branches, logaddexp of equal infinities, xlogy at x = 0); the reference derived from
them is what every executor is held to, and tests/ops/test_pointwise_table.py holds it and the
gradients to torch in float64.

Adding an op is one row in ROWS (and, where the C library has a function the formula needs,
one entry of LIBM).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("Log1p").reference([np.float32([0.0, 1e-8, -1.0])], {})[0]
    array([0.e+00, 1.e-08,   -inf], dtype=float32)
    >>> get_op("Less").reference([np.float32([1.0, np.nan]), np.float32([2.0, 2.0])], {})[0]
    array([ True, False])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.dtypes import LOW_FLOATS
from planner.ops import kinks
from planner.ops.base import (
    BY_POSITION,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    Pointwise,
    TensorType,
    elementwise_flops,
    register,
)
from planner.ops.elementwise import broadcast_shapes
from planner.ops.reduce import sum_to_shape
from planner.ops.special_reference import SPECIAL_FUNCTIONS

if TYPE_CHECKING:
    from planner.ir.graph import Node

FLOATS = ("float32", "float64", "bfloat16", "float16")
INTS = ("int64", "int32")
ACCEPTS = {"float": FLOATS, "numeric": FLOATS + INTS, "any": FLOATS + INTS + ("bool",)}
# The dtypes kernels are generated in (the executors' own; low floats are not table dtypes).
KERNEL_DTYPES = ("float32", "int64", "int32", "bool")


def _elementwise(fn: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    """A scalar function of Python's math module over an array, in float64, then the input's
    dtype (the C library's lgamma and erfc have no numpy ufunc)."""
    def apply(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        out = np.vectorize(fn, otypes=[np.float64])(x.astype(np.float64))
        return out.astype(x.dtype)

    return apply


def _lgamma(v: float) -> float:
    try:
        return math.lgamma(v)
    except ValueError:  # a pole: 0 and the negative integers, where C's lgamma gives +inf
        return math.inf


# The C library functions a formula may call as m.call(name, ...): numpy's equivalent of each
# (C++ std::<name>, CUDA <name>f), and the special functions of templates/common/special_math.h
# (planner_<name>: <name>f in both). Names come from here, never from a graph.
LIBM: dict[str, Callable[..., np.ndarray]] = {
    "log2": np.log2, "log10": np.log10, "exp2": np.exp2,
    "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "nearbyint": np.rint,  # round half to even, as torch.round
    "atan2": np.arctan2, "fmod": np.fmod, "hypot": np.hypot, "copysign": np.copysign,
    "nextafter": np.nextafter, "fmax": np.fmax, "fmin": np.fmin,
    "erfc": _elementwise(math.erfc), "lgamma": _elementwise(_lgamma),
    **SPECIAL_FUNCTIONS,
}


class NumpyMath:
    """The math namespace over numpy arrays: a formula evaluated here is the op's reference."""

    @staticmethod
    def where(c, a, b):
        return np.where(c, a, b)

    @staticmethod
    def any(a, b):
        return np.logical_or(a, b)

    @staticmethod
    def all(a, b):
        return np.logical_and(a, b)

    @staticmethod
    def not_(a):
        return np.logical_not(a)

    @staticmethod
    def isnan(x):
        return np.isnan(x)

    @staticmethod
    def isinf(x):
        return np.isinf(x)

    @staticmethod
    def isfinite(x):
        return np.isfinite(x)

    @staticmethod
    def cast(x, dtype):
        return np.asarray(x).astype(dtype)

    exp, log, log1p, expm1 = (staticmethod(f) for f in (np.exp, np.log, np.log1p, np.expm1))
    sqrt, tanh, abs, pow = (staticmethod(f) for f in (np.sqrt, np.tanh, np.abs, np.power))
    erf = staticmethod(_elementwise(math.erf))
    erfc = staticmethod(LIBM["erfc"])

    @staticmethod
    def call(name, *xs):
        return LIBM[name](*xs)


NUMPY = NumpyMath()

Formula = Callable[[Any, list[Any], dict[str, Any]], list[Any]]
# d(m, xs, y): the derivative of the output with respect to one input, at one element
Derivative = Callable[[Any, list[Any], Any], Any]


@dataclass(frozen=True)
class Row:
    """One element-wise op.

    name      the planner op
    formula   y = formula(m, xs, p)[0], as Pointwise.formula (one output)
    arity     inputs (all of one dtype, broadcast as numpy)
    accepts   "float", "numeric" (and int64, int32) or "any" (and bool): the input dtypes
    out       "same" (the input's dtype), "bool" or "int32" (frexp's exponent)
    grads     per input, its derivative d(m, xs, y), 1 (dy passes on unchanged) or None (no
              gradient: torch's is zero); grads=None: no input has one (piecewise constant ops,
              predicates)
    differentiable
              False: the op has no gradient rule at all (torch defines no derivative: a loss
              that needs one through it is refused by autodiff, naming the node, where a
              zero would train silently otherwise)
    uses_y    a derivative reads the output y
    flops     per output element, a transcendental function counting one
    aten      the ATen overloads ("log1p.default") the torch front end maps to it
    blocks    the CUDA kernels' threads-per-block variants (Pointwise.blocks; None: all)
    by_position
              the op and its gradients take channel-blocked images (OpDef.channel_blocked
              BY_POSITION: a formula of the values at one element, its bounds scalars)
    domain    per input, where its tests sample it: "normal", "positive" (0.5, 2), "unit"
              (0.05, 0.95), "sym" (-0.9, 0.9), "gt1" (1.1, 3), "bool", "int"
    """

    name: str
    formula: Formula
    doc: str
    arity: int = 1
    accepts: str = "float"
    out: str = "same"
    grads: tuple[Derivative | int | None, ...] | None = None
    uses_y: bool = False
    flops: int = 1
    aten: tuple[str, ...] = ()
    domain: tuple[str, ...] = ()
    blocks: tuple[int, ...] | None = None
    differentiable: bool = True
    by_position: bool = False

    @property
    def dtypes(self) -> tuple[str, ...]:
        return ACCEPTS[self.accepts]

    def out_dtype(self, dtype: str) -> str:
        return dtype if self.out == "same" else self.out

    def signatures(self) -> tuple[str, ...]:
        """Pointwise signatures ("float32,float32->bool") of its kernels."""
        return tuple(",".join([d] * self.arity) + "->" + self.out_dtype(d)
                     for d in KERNEL_DTYPES if d in self.dtypes)

    def grad_name(self, k: int) -> str:
        return f"{self.name}Grad" if self.arity == 1 else f"{self.name}Grad{'ABCD'[k]}"

    @property
    def inputs_domain(self) -> tuple[str, ...]:
        return self.domain or ("normal",) * self.arity


# ---- shared formulas -------------------------------------------------------------------------

LN2, LN10 = math.log(2.0), math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _u(f: Callable[[Any, Any], Any]) -> Formula:
    """A one-input formula from f(m, x)."""
    return lambda m, xs, p: [f(m, xs[0])]


def _b(f: Callable[[Any, Any, Any], Any]) -> Formula:
    """A two-input formula from f(m, a, b)."""
    return lambda m, xs, p: [f(m, xs[0], xs[1])]


# Formulas say "not equal" with NaN explicit and "p xor q" with any / all: TVM's LLVM lowering
# of != is an ordered compare (false for NaN), and of bool != bool a float compare.

def _differ(m, a, b):
    """a != b, true where either is NaN."""
    return m.any(m.not_(a == b), m.any(m.isnan(a), m.isnan(b)))


def _nonzero(m, x):
    """x != 0 (NaN is true)."""
    return m.any(m.not_(x == 0), m.isnan(x))


def _xor(m, p, q):
    return m.any(m.all(p, m.not_(q)), m.all(m.not_(p), q))


def _div_floor(m, a, b):
    """torch's floor division of floats (div_floor_floating): from fmod, so that a / b rounding
    up to an integer does not move the quotient; a zero divisor gives a / b."""
    mod = m.call("fmod", a, b)
    div = (a - mod) / b
    div = m.where(m.all(_nonzero(m, mod), _xor(m, b < 0, mod < 0)), div - 1.0, div)
    floor = m.call("floor", div)
    floor = m.where(div - floor > 0.5, floor + 1.0, floor)
    out = m.where(div == 0, m.call("copysign", 0.0, a / b), floor)
    return m.where(b == 0, a / b, out)


def _remainder(m, a, b):
    """torch.remainder of floats: fmod moved to the divisor's sign."""
    mod = m.call("fmod", a, b)
    return m.where(m.all(_nonzero(m, mod), _xor(m, b < 0, mod < 0)), mod + b, mod)


def _xlogy(m, x, y):
    """x * log(y), 0 where x == 0 unless y is NaN (torch.xlogy)."""
    return m.where(m.all(x == 0, m.not_(m.isnan(y))), 0.0, x * m.log(y))


def _xlog1py(m, x, y):
    """x * log1p(y), 0 where x == 0 unless y is NaN (torch.special.xlog1py)."""
    return m.where(m.all(x == 0, m.not_(m.isnan(y))), 0.0, x * m.log1p(y))


def _entr(m, x):
    """-x log x for x > 0, 0 at 0, -inf below, NaN for NaN (torch.special.entr)."""
    return m.where(m.isnan(x), x, m.where(x > 0, -x * m.log(m.where(x > 0, x, 1.0)),
                                          m.where(x == 0, 0.0, -math.inf)))


def _sinc(m, x):
    """sin(pi x) / (pi x), 1 at 0 (torch.sinc)."""
    px = x * math.pi
    return m.where(x == 0, 1.0, m.call("sin", px) / m.where(x == 0, 1.0, px))


def _clamp(m, x, lo, hi):
    """torch.clamp of tensor bounds: min(max(x, lo), hi), NaN where any of the three is."""
    low = m.where(m.any(x < lo, m.isnan(lo)), lo, x)
    return m.where(m.any(low > hi, m.isnan(hi)), hi, low)


def _relu6_of_shift(m, x):
    """min(max(x + 3, 0), 6): hardsigmoid's and hardswish's, as torch's kernels (NaN stays)."""
    t = x + 3.0
    t = m.where(t < 0.0, 0.0, t)
    return m.where(t > 6.0, 6.0, t)


def _mask(m, passes):
    return m.where(passes, 1.0, 0.0)


def _logaddexp(m, a, b):
    """log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)); equal infinities give themselves."""
    top = m.where(a > b, a, b)
    return m.where(m.all(m.isinf(a), a == b), a,
                   top + m.log1p(m.exp(-m.abs(a - b))))


def _lerp(m, a, b, w):
    """torch.lerp: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w) (exact at w = 1)."""
    diff = b - a
    return m.where(m.abs(w) < 0.5, a + w * diff, b - diff * (1.0 - w))


# digamma and trigamma: the recurrence psi(x) = psi(x + 6) - sum 1 / (x + k) lifts x to where
# the asymptotic series (Abramowitz & Stegun 6.3.18, 6.4.12) is exact to float32, and the
# reflection formulas take x < 0 to 1 - x > 1; the poles (0, -1, -2, ...) as torch's.
_LIFT = 6


def _digamma(m, x):
    z = m.where(x < 0, 1.0 - x, x)
    shift = 0.0
    for k in range(_LIFT):
        shift = shift + 1.0 / (z + float(k))
    z = z + float(_LIFT)
    r = 1.0 / (z * z)
    series = m.log(z) - 0.5 / z - r * (1.0 / 12 - r * (1.0 / 120 - r * (1.0 / 252 - r * (
        1.0 / 240 - r * (1.0 / 132)))))
    psi = series - shift
    # tan(pi x) = tan(pi r), r = x - the nearest integer (exact, |r| <= 1/2): near a pole r
    # is small and pi r keeps its relative precision, where the fractional part (near 1 below
    # a pole) leaves pi r next to pi, and tan of it 1e-1 relative off near the pole
    reflected = psi - math.pi / m.call("tan", math.pi * (x - m.call("nearbyint", x)))
    pole = m.all(x <= 0, x == m.call("floor", x))
    return m.where(x == 0, -math.inf * m.call("copysign", 1.0, x),
                   m.where(pole, math.nan, m.where(x < 0, reflected, psi)))


def _trigamma(m, x):
    z = m.where(x < 0, 1.0 - x, x)
    shift = 0.0
    for k in range(_LIFT):
        shift = shift + 1.0 / ((z + float(k)) * (z + float(k)))
    z = z + float(_LIFT)
    r = 1.0 / (z * z)
    series = 1.0 / z + r * (0.5 + (1.0 / z) * (1.0 / 6 - r * (1.0 / 30 - r * (
        1.0 / 42 - r * (1.0 / 30)))))
    psi1 = series + shift
    # sin(pi x)^2 = sin(pi r)^2, r = x - the nearest integer (exact): digamma's reduction.
    # At a pole itself (r = 0) sin(pi x) unreduced, as torch's: a huge finite value, not inf
    r = x - m.call("nearbyint", x)
    s = m.call("sin", math.pi * m.where(r == 0, x, r))
    reflected = (math.pi * math.pi) / (s * s) - psi1
    return m.where(x < 0, reflected, psi1)


def _first_wins(m, beats, b):
    """fmax / fmin give a: a beats b (or ties), or b is NaN (torch's gradient rule)."""
    return m.any(beats, m.isnan(b))


def _rsqrt(m, v):
    return 1.0 / m.sqrt(v)


# ---- the rows -------------------------------------------------------------------------------

# Ops rare in a training step take one CUDA threads-per-block variant (the block choice is for
# the hot element-wise ops a plan tunes), keeping the generated kernels few.
RARE = (256,)

def _cmp(name: str, f, aten: str, doc: str) -> Row:
    """A comparison of numbers (the torch front end compares bool tensors as int32: TVM
    compares no bool values)."""
    return Row(name, _b(f), doc, arity=2, accepts="numeric", out="bool",
               aten=(f"{aten}.Tensor", f"{aten}.Scalar"), domain=("int", "int"))


ROWS: tuple[Row, ...] = (
    # -- exponentials and logarithms
    Row("Log1p", _u(lambda m, x: m.log1p(x)), "y = log(1 + x).",
        grads=(lambda m, xs, y: 1.0 / (xs[0] + 1.0),), aten=("log1p.default",),
        domain=("positive",)),
    # the derivative from exp(x), not y + 1, which cancels where y is near -1 (x << 0)
    Row("Expm1", _u(lambda m, x: m.expm1(x)), "y = exp(x) - 1.",
        grads=(lambda m, xs, y: m.exp(xs[0]),), aten=("expm1.default",)),
    Row("Log2", _u(lambda m, x: m.call("log2", x)), "y = log2(x).",
        grads=(lambda m, xs, y: 1.0 / (xs[0] * LN2),), aten=("log2.default",),
        domain=("positive",)),
    Row("Log10", _u(lambda m, x: m.call("log10", x)), "y = log10(x).",
        grads=(lambda m, xs, y: 1.0 / (xs[0] * LN10),), aten=("log10.default",),
        domain=("positive",)),
    Row("Exp2", _u(lambda m, x: m.call("exp2", x)), "y = 2^x.",
        grads=(lambda m, xs, y: y * LN2,), uses_y=True, aten=("exp2.default",)),
    Row("Ldexp", _b(lambda m, a, b: a * m.call("exp2", b)), "y = a * 2^b.", arity=2,
        grads=(lambda m, xs, y: m.call("exp2", xs[1]),
               lambda m, xs, y: xs[0] * m.call("exp2", xs[1]) * LN2), flops=2,
        aten=("ldexp.Tensor",), blocks=RARE),
    Row("Reciprocal", _u(lambda m, x: 1.0 / x), "y = 1 / x.",
        grads=(lambda m, xs, y: -(y * y),), uses_y=True, aten=("reciprocal.default",)),
    Row("Square", _u(lambda m, x: x * x), "y = x * x.", accepts="numeric",
        grads=(lambda m, xs, y: 2.0 * xs[0],)),  # torch.square exports as pow(x, 2)
    # -- trigonometric and hyperbolic
    Row("Sin", _u(lambda m, x: m.call("sin", x)), "y = sin(x).",
        grads=(lambda m, xs, y: m.call("cos", xs[0]),), aten=("sin.default",)),
    Row("Cos", _u(lambda m, x: m.call("cos", x)), "y = cos(x).",
        grads=(lambda m, xs, y: -m.call("sin", xs[0]),), aten=("cos.default",)),
    Row("Tan", _u(lambda m, x: m.call("tan", x)), "y = tan(x).",
        grads=(lambda m, xs, y: 1.0 + y * y,), uses_y=True, aten=("tan.default",),
        domain=("sym",)),
    Row("Asin", _u(lambda m, x: m.call("asin", x)), "y = asin(x).",
        grads=(lambda m, xs, y: _rsqrt(m, (1.0 - xs[0]) * (1.0 + xs[0])),),
        aten=("asin.default",),
        domain=("sym",)),
    Row("Acos", _u(lambda m, x: m.call("acos", x)), "y = acos(x).",
        grads=(lambda m, xs, y: -_rsqrt(m, (1.0 - xs[0]) * (1.0 + xs[0])),),
        aten=("acos.default",),
        domain=("sym",)),
    Row("Atan", _u(lambda m, x: m.call("atan", x)), "y = atan(x).",
        grads=(lambda m, xs, y: 1.0 / (1.0 + xs[0] * xs[0]),), aten=("atan.default",)),
    Row("Sinh", _u(lambda m, x: m.call("sinh", x)), "y = sinh(x).",
        grads=(lambda m, xs, y: m.call("cosh", xs[0]),), aten=("sinh.default",)),
    Row("Cosh", _u(lambda m, x: m.call("cosh", x)), "y = cosh(x).",
        grads=(lambda m, xs, y: m.call("sinh", xs[0]),), aten=("cosh.default",)),
    Row("Asinh", _u(lambda m, x: m.call("asinh", x)), "y = asinh(x).",
        grads=(lambda m, xs, y: _rsqrt(m, xs[0] * xs[0] + 1.0),), aten=("asinh.default",)),
    Row("Acosh", _u(lambda m, x: m.call("acosh", x)), "y = acosh(x).",
        grads=(lambda m, xs, y: _rsqrt(m, (xs[0] - 1.0) * (xs[0] + 1.0)),),
        aten=("acosh.default",),
        domain=("gt1",)),
    Row("Atanh", _u(lambda m, x: m.call("atanh", x)), "y = atanh(x).",
        grads=(lambda m, xs, y: 1.0 / ((1.0 - xs[0]) * (1.0 + xs[0])),),
        aten=("atanh.default",),
        domain=("sym",)),
    # -- rounding (torch's gradient is zero: none flows)
    Row("Floor", _u(lambda m, x: m.call("floor", x)), "y = floor(x).",
        aten=("floor.default",)),
    Row("Ceil", _u(lambda m, x: m.call("ceil", x)), "y = ceil(x).", aten=("ceil.default",)),
    Row("Round", _u(lambda m, x: m.call("nearbyint", x)),
        "y = x rounded to the nearest integer, halves to even (torch.round).",
        aten=("round.default",)),
    Row("Trunc", _u(lambda m, x: m.call("trunc", x)), "y = x rounded toward zero.",
        aten=("trunc.default",)),
    # torch.frac exports as x - trunc(x)
    Row("Frac", _u(lambda m, x: x - m.call("trunc", x)), "y = x - trunc(x).", grads=(1,)),
    # -- special functions
    Row("Erfc", _u(lambda m, x: m.erfc(x)), "y = 1 - erf(x), without cancellation.",
        grads=(lambda m, xs, y: -TWO_OVER_SQRT_PI * m.exp(-(xs[0] * xs[0])),),
        aten=("erfc.default",)),
    Row("Lgamma", _u(lambda m, x: m.call("lgamma", x)), "y = log|gamma(x)|.",
        grads=(lambda m, xs, y: _digamma(m, xs[0]),), aten=("lgamma.default",),
        domain=("positive",)),
    Row("Digamma", _u(_digamma), "y = d/dx log gamma(x) (series; poles as torch's).",
        grads=(lambda m, xs, y: _trigamma(m, xs[0]),), flops=40, aten=("digamma.default",),
        domain=("positive",)),
    # kept whole at import: torch's gradients at their kinks and 0/0 points are planner/ops/
    # kinks.py's, where their decompositions' (clamp, where) are not
    Row("Sinc", _u(_sinc), "y = sin(pi x) / (pi x), 1 at 0.",
        grads=(lambda m, xs, y: kinks.sinc_slope(m, xs[0]),), flops=4,
        aten=("sinc.default",), blocks=RARE),
    Row("Entr", _u(_entr), "y = -x log x (0 at 0, -inf below 0).",
        grads=(lambda m, xs, y: kinks.entr_slope(m, xs[0]),), flops=3,
        aten=("special_entr.default",), domain=("positive",), blocks=RARE),
    Row("HardSigmoid", _u(lambda m, x: _relu6_of_shift(m, x) / 6.0),
        "y = min(max(x + 3, 0), 6) / 6 (torch's hardsigmoid).",
        grads=(lambda m, xs, y: kinks.hardsigmoid_slope(m, xs[0]),), flops=3,
        aten=("hardsigmoid.default",)),
    Row("HardSwish", _u(lambda m, x: x * _relu6_of_shift(m, x) / 6.0),
        "y = x min(max(x + 3, 0), 6) / 6 (torch's hardswish).",
        grads=(lambda m, xs, y: kinks.hardswish_slope(m, xs[0]),), flops=4,
        aten=("hardswish.default",)),
    # hardtanh(x, lo, hi) (relu6 is hardtanh(x, 0, 6)): the bounds are inputs (scalars at
    # import) and have no gradient; x's is 0 at both corners, where Clip's (clamp's) is 1
    Row("HardTanh", lambda m, xs, p: [_clamp(m, *xs)],
        "y = min(max(x, lo), hi): [x, lo, hi] (torch's hardtanh; its gradient is 0 at lo, hi).",
        arity=3, grads=(lambda m, xs, y: _mask(m, kinks.hardtanh_passes(m, *xs)), None, None),
        flops=2, domain=("normal", "sym", "gt1"), by_position=True),
    Row("Clamp", lambda m, xs, p: [_clamp(m, *xs)],
        "y = min(max(x, lo), hi) of tensor bounds: [x, lo, hi] (torch.clamp).", arity=3,
        grads=(lambda m, xs, y: _mask(m, kinks.clamp_passes(m, *xs)),
               lambda m, xs, y: _mask(m, kinks.clamp_min_bound_takes(m, *xs)),
               lambda m, xs, y: _mask(m, kinks.clamp_max_bound_takes(m, *xs))), flops=2),
    Row("ClampMin", _b(lambda m, x, lo: m.where(m.any(x < lo, m.isnan(lo)), lo, x)),
        "y = max(x, lo) of a tensor bound: [x, lo] (torch.clamp_min; a tie goes to x).",
        arity=2,
        grads=(lambda m, xs, y: _mask(m, xs[0] >= xs[1]),
               lambda m, xs, y: _mask(m, xs[0] < xs[1]))),
    Row("ClampMax", _b(lambda m, x, hi: m.where(m.any(x > hi, m.isnan(hi)), hi, x)),
        "y = min(x, hi) of a tensor bound: [x, hi] (torch.clamp_max; a tie goes to x).",
        arity=2,
        grads=(lambda m, xs, y: _mask(m, xs[0] <= xs[1]),
               lambda m, xs, y: _mask(m, xs[0] > xs[1]))),
    # -- binary math
    Row("Atan2", _b(lambda m, a, b: m.call("atan2", a, b)), "y = atan2(a, b).", arity=2,
        grads=(lambda m, xs, y: xs[1] * kinks.atan2_reciprocal(m, xs[0], xs[1]),
               lambda m, xs, y: -xs[0] * kinks.atan2_reciprocal(m, xs[0], xs[1])),
        aten=("atan2.default",)),
    Row("Hypot", _b(lambda m, a, b: m.call("hypot", a, b)), "y = sqrt(a^2 + b^2).", arity=2,
        grads=(lambda m, xs, y: xs[0] / y, lambda m, xs, y: xs[1] / y), uses_y=True,
        aten=("hypot.default",)),
    Row("Fmod", _b(lambda m, a, b: m.call("fmod", a, b)),
        "y = a - trunc(a / b) * b (C's fmod: the sign of a).", arity=2,
        grads=(1, lambda m, xs, y: -m.call("trunc", xs[0] / xs[1])),
        aten=("fmod.Tensor", "fmod.Scalar")),
    Row("Remainder", _b(_remainder), "y = a - floor(a / b) * b (the sign of b, Python's %).",
        arity=2, grads=(1, lambda m, xs, y: -_div_floor(m, xs[0], xs[1])), flops=3,
        aten=("remainder.Tensor", "remainder.Scalar")),
    Row("DivTrunc", _b(lambda m, a, b: m.call("trunc", a / b)),
        "y = trunc(a / b) (div with rounding_mode='trunc').", arity=2, flops=2),
    Row("DivFloor", _b(_div_floor), "y = floor(a / b) (div with rounding_mode='floor').",
        arity=2, flops=6),
    Row("Xlogy", _b(_xlogy), "y = a * log(b), 0 where a == 0 (unless b is NaN).", arity=2,
        grads=(lambda m, xs, y: kinks.xlogy_slope(m, xs[0], xs[1]),
               lambda m, xs, y: xs[0] / xs[1]), flops=3,
        aten=("xlogy.Tensor",), domain=("normal", "positive")),
    Row("Xlog1py", _b(_xlog1py), "y = a * log1p(b), 0 where a == 0 (unless b is NaN).",
        arity=2, grads=(lambda m, xs, y: kinks.xlog1py_slope(m, xs[0], xs[1]),
                        lambda m, xs, y: xs[0] / (xs[1] + 1.0)), flops=3,
        aten=("special_xlog1py.default",), domain=("normal", "positive"), blocks=RARE),
    Row("LogAddExp", _b(_logaddexp), "y = log(exp(a) + exp(b)), without overflow.", arity=2,
        grads=(lambda m, xs, y: 1.0 / (1.0 + m.exp(xs[1] - xs[0])),
               lambda m, xs, y: 1.0 / (1.0 + m.exp(xs[0] - xs[1]))), flops=5,
        aten=("logaddexp.default",)),
    # NaN-ignoring extrema (C's fmax / fmin); the gradient goes to a (ties too) unless b wins
    Row("Fmax", _b(lambda m, a, b: m.call("fmax", a, b)),
        "y = max(a, b), the other where one is NaN.", arity=2,
        grads=(lambda m, xs, y: m.where(_first_wins(m, xs[0] >= xs[1], xs[1]), 1.0, 0.0),
               lambda m, xs, y: m.where(_first_wins(m, xs[0] >= xs[1], xs[1]), 0.0, 1.0)),
        aten=("fmax.default",), blocks=RARE),
    Row("Fmin", _b(lambda m, a, b: m.call("fmin", a, b)),
        "y = min(a, b), the other where one is NaN.", arity=2,
        grads=(lambda m, xs, y: m.where(_first_wins(m, xs[0] <= xs[1], xs[1]), 1.0, 0.0),
               lambda m, xs, y: m.where(_first_wins(m, xs[0] <= xs[1], xs[1]), 0.0, 1.0)),
        aten=("fmin.default",), blocks=RARE),
    Row("NextAfter", _b(lambda m, a, b: m.call("nextafter", a, b)),
        "y = the float after a in the direction of b.", arity=2, grads=(1, None),
        blocks=RARE),  # torch's nextafter: planner/importers/torch/rules_pointwise.py
    Row("CopySign", _b(lambda m, a, b: m.call("copysign", a, b)),
        "y = |a| with the sign of b.", arity=2,
        grads=(lambda m, xs, y: m.where(xs[0] == 0, 0.0, y / xs[0]), None), uses_y=True,
        aten=("copysign.Tensor",)),
    Row("Lerp", lambda m, xs, p: [_lerp(m, *xs)], "y = a + w (b - a) (torch.lerp).", arity=3,
        grads=(lambda m, xs, y: 1.0 - xs[2], lambda m, xs, y: xs[2],
               lambda m, xs, y: xs[1] - xs[0]), flops=3,
        aten=("lerp.Tensor", "lerp.Scalar")),
    # -- comparisons: bool results, no gradient
    _cmp("Equal", lambda m, a, b: a == b, "eq", "y = a == b."),
    _cmp("NotEqual", _differ, "ne",
         "y = a != b (true where either is NaN)."),
    _cmp("Less", lambda m, a, b: a < b, "lt", "y = a < b."),
    _cmp("LessOrEqual", lambda m, a, b: a <= b, "le", "y = a <= b."),
    _cmp("Greater", lambda m, a, b: a > b, "gt", "y = a > b."),
    _cmp("GreaterOrEqual", lambda m, a, b: a >= b, "ge", "y = a >= b."),
    # -- logic: any dtype, non-zero (NaN too) is true
    Row("And", _b(lambda m, a, b: m.all(_nonzero(m, a), _nonzero(m, b))),
        "y = a and b (non-zero is true).",
        arity=2, accepts="any", out="bool", aten=("logical_and.default",),
        domain=("bool", "bool")),
    Row("Or", _b(lambda m, a, b: m.any(_nonzero(m, a), _nonzero(m, b))),
        "y = a or b (non-zero is true).",
        arity=2, accepts="any", out="bool", aten=("logical_or.default",),
        domain=("bool", "bool")),
    Row("Xor", _b(lambda m, a, b: _xor(m, _nonzero(m, a), _nonzero(m, b))),
        "y = a xor b (non-zero is true).", arity=2, accepts="any", out="bool",
        aten=("logical_xor.default",), domain=("bool", "bool")),
    Row("Not", _u(lambda m, x: x == 0), "y = not x (zero is false).", accepts="any",
        out="bool", aten=("logical_not.default",), domain=("bool",)),
    Row("SignBit", _u(lambda m, x: m.call("copysign", 1.0, x) < 0.0),
        "y = x's sign bit is set (-0.0 and NaNs with it too).", out="bool",
        aten=("signbit.default",), blocks=RARE),
    Row("IsNaN", _u(lambda m, x: m.isnan(x)), "y = x is NaN.", accepts="numeric", out="bool",
        aten=("isnan.default",)),
    Row("IsInf", _u(lambda m, x: m.isinf(x)), "y = x is +inf or -inf.", accepts="numeric",
        out="bool", aten=("isinf.default",)),
    Row("IsFinite", _u(lambda m, x: m.isfinite(x)), "y = x is neither NaN nor infinite.",
        accepts="numeric", out="bool", aten=("isfinite.default",)),
)

# op name -> its row (the forward ops and their generated gradient ops)
TABLE: dict[str, Row] = {}


# ---- from a row to ops ------------------------------------------------------------------------

def _infer(row: Row) -> Callable[[list[TensorType], Attrs], list[TensorType]]:
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        first = ins[0]
        for k, t in enumerate(ins[1:], start=1):
            if t.dtype != first.dtype:
                raise OpError(f"{row.name}: input dtypes differ: input 0 is {first.dtype}, "
                              f"input {k} is {t.dtype}")
        if first.dtype not in row.dtypes:
            raise OpError(f"{row.name}: dtype {first.dtype} is not supported (takes "
                          f"{', '.join(row.dtypes)})")
        shape = first.shape
        for t in ins[1:]:
            shape = broadcast_shapes(row.name, shape, t.shape)
        return [TensorType(shape, row.out_dtype(first.dtype))]

    return infer


def reference_of(formula: Formula, out: str) -> Callable[[list[np.ndarray], Attrs],
                                                         list[np.ndarray]]:
    """The numpy reference of a formula: evaluated over NUMPY (a low float in float32, rounded
    once), broadcast to the inputs' shape, in the output dtype ("same", "bool", "int32")."""
    def reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
        xs = [np.asarray(x) for x in xs]
        dtype = xs[0].dtype
        work = [x.astype(np.float32) if str(x.dtype) in LOW_FLOATS else x for x in xs]
        with np.errstate(all="ignore"):
            ys = formula(NUMPY, work, dict(a))
        shape = np.broadcast_shapes(*(x.shape for x in xs))
        want = dtype if out == "same" else np.dtype(out)
        return [np.broadcast_to(np.asarray(y), shape).astype(want) for y in ys]

    return reference


def _gradient(row: Row):
    def gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
        dy = grads[0]
        out: list[str | None] = [None] * row.arity
        if dy is None or row.grads is None:
            return out
        extra = [node.outputs[0]] if row.uses_y else []
        for k, (x, d) in enumerate(zip(node.inputs, row.grads, strict=True)):
            if d is None or not g.needs(x):
                continue
            dx = dy if d == 1 else g.emit(row.grad_name(k), [dy, *node.inputs, *extra])[0]
            out[k] = sum_to_shape(g, dx, g.type(x).shape)
        return out

    return gradient


def _grad_formula(row: Row, d: Derivative) -> Formula:
    def formula(m, xs, p):
        args = xs[1:1 + row.arity]
        y = xs[1 + row.arity] if row.uses_y else None
        return [xs[0] * d(m, args, y)]

    return formula


def _grad_infer(name: str, flat: bool):
    """[dy, inputs.., (y)] -> dx in dy's shape; a one-input row's (flat: its kernels read every
    input at the output's index) takes operands of dy's shape only."""
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        dy = ins[0]
        for k, t in enumerate(ins[1:], start=1):
            if t.dtype != dy.dtype:
                raise OpError(f"{name}: input {k} is {t.dtype} but dy is {dy.dtype}")
            if flat and t.shape != dy.shape:
                raise OpError(f"{name}: input {k} has shape {list(t.shape)}, dy "
                              f"{list(dy.shape)}; they must match")
        if dy.dtype not in FLOATS:
            raise OpError(f"{name}: dy must be a float tensor, got {dy.dtype}")
        shape = dy.shape
        for t in ins[1:]:
            shape = broadcast_shapes(name, shape, t.shape)
        if shape != dy.shape:
            raise OpError(f"{name}: the inputs broadcast to {list(shape)}, beyond dy's shape "
                          f"{list(dy.shape)}")
        return [dy]

    return infer


def register_row(row: Row) -> None:
    """Register a row's op and its gradient ops."""
    register(OpDef(
        name=row.name, arity=row.arity, cost_class="elementwise",
        infer=_infer(row),
        flops=elementwise_flops(row.flops),
        reference=reference_of(row.formula, row.out),
        gradient=_gradient(row) if row.differentiable else None,
        nondiff_inputs=() if row.out == "same" else tuple(range(row.arity)),
        pointwise=Pointwise(row.formula, signatures=row.signatures(), broadcast=row.arity > 1,
                            blocks=row.blocks),
        doc=row.doc,
        channel_blocked=BY_POSITION if row.by_position else None,
    ))
    TABLE[row.name] = row
    register_grads(row)


def register_grads(row: Row) -> None:
    """Register a row's gradient ops (alone for an op defined elsewhere: Pow's)."""
    if row.grads is None:
        return
    assert row.out == "same", row.name
    n_in = 1 + row.arity + (1 if row.uses_y else 0)
    for k, d in enumerate(row.grads):
        if d is None or d == 1:
            continue
        name = row.grad_name(k)
        formula = _grad_formula(row, d)
        register(OpDef(
            name=name, arity=n_in, cost_class="elementwise",
            infer=_grad_infer(name, flat=row.arity == 1),
            flops=elementwise_flops(row.flops + 1),
            reference=reference_of(formula, "same"),
            pointwise=Pointwise(formula, signatures=(",".join(["float32"] * n_in)
                                                     + "->float32",),
                                broadcast=row.arity > 1, blocks=row.blocks),
            channel_blocked=BY_POSITION if row.by_position else None,
            doc=f"Gradient of {row.name} with respect to its input {k}: "
                f"[dy, {', '.join(f'x{j}' for j in range(row.arity))}"
                f"{', y' if row.uses_y else ''}] -> dy * d{row.name}/dx{k}.",
        ))
        TABLE[name] = Row(name, formula, "", arity=n_in)


for _row in ROWS:
    register_row(_row)

# Pow is planner/ops/binary_math.py's (its forward kernel is hand-written); its gradient ops
# are rows' so that torch's conventions at base 0 (planner/ops/kinks.py) reach every kernel:
# PowGradA [dy, a, b, y] and PowGradB [dy, a, b, y]
register_grads(Row("Pow", _b(lambda m, a, b: m.pow(a, b)), "", arity=2, uses_y=True,
                   grads=(lambda m, xs, y: kinks.pow_base_slope(m, xs[0], xs[1]),
                          lambda m, xs, y: kinks.pow_exponent_slope(m, xs[0], xs[1], y)),
                   flops=3))
