"""The special functions as pointwise-table rows (planner/ops/pointwise_table.py's Row): each a
call of a function of templates/common/special_math.h (m.call("planner_<name>", ...), whose
numpy reference is scipy.special's: planner/ops/special_reference.py), with torch's derivatives
where torch has one; none where torch's output is non-differentiable (the Bessel and Airy
functions, the polynomials: no gradient flows, as torch's), and a refusal where torch's derivative
is not implemented (zeta).

Polygamma's order is a row each (Polygamma1 .. Polygamma4; order 0 is Digamma), whose
derivative is the next order's function.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("I0").reference([np.float32([0.0, 1.0])], {})[0]
    array([1.       , 1.2660658], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import math

from planner.ops.pointwise_table import TWO_OVER_SQRT_PI, Row, register_row

SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2.0
SQRT_2PI = math.sqrt(2.0 * math.pi)
SQRT_HALF = math.sqrt(0.5)
POLYGAMMA_ORDERS = (1, 2, 3, 4)


def _call1(name: str):
    return lambda m, xs, p: [m.call(name, xs[0])]


def _call2(name: str):
    return lambda m, xs, p: [m.call(name, xs[0], xs[1])]


def _sign(m, x):
    return m.where(x > 0, 1.0, m.where(x < 0, -1.0, 0.0))


def _gamma_density(m, a, x):
    """d/dx P(a, x) = e^-x x^(a-1) / Gamma(a)."""
    return m.exp((a - 1.0) * m.log(x) - x - m.call("lgamma", a))


def _log_ndtr(m, x):
    """log Phi(x) (torch's): log(erfcx(-x / sqrt 2) / 2) - x^2 / 2 below -1, where Phi
    underflows, else log1p(-erfc(x / sqrt 2) / 2)."""
    t = x * SQRT_HALF
    return m.where(x < -1.0, m.log(m.call("planner_erfcx", -t) / 2.0) - t * t,
                   m.log1p(-m.erfc(t) / 2.0))


def _polygamma_row(n: int) -> Row:
    return Row(f"Polygamma{n}", lambda m, xs, p: [m.call("planner_polygamma", float(n), xs[0])],
               f"y = the polygamma function of order {n} (d^{n + 1}/dx^{n + 1} log gamma(x)).",
               grads=(lambda m, xs, y: m.call("planner_polygamma", float(n + 1), xs[0]),),
               flops=60, domain=("positive",))


def _plain(name: str, fn: str, doc: str, aten: str, arity: int = 1, flops: int = 30,
           domain: tuple[str, ...] = (), refused: bool = False) -> Row:
    """A row torch gives no gradient: its output is non-differentiable (no gradient reaches its
    inputs, the rest of the module trains: planner/ops/kinks.py), or, `refused`, its
    derivative is not implemented (autodiff refuses a loss that needs it, as torch raises)."""
    return Row(name, (_call1 if arity == 1 else _call2)(fn), doc, arity=arity, flops=flops,
               aten=(aten,), domain=domain, differentiable=not refused)


def _polynomial(name: str, fn: str, what: str, aten: str) -> Row:
    row = _plain(name, fn, f"y = the {what} of degree trunc(n) at x (0 for n < 0): [x, n].",
                 aten, arity=2, flops=20)
    # torch.special.*_polynomial_*(x, 3) exports as the n_scalar overload, (2.0, n) x_scalar
    base = aten.split(".")[0]
    return dataclasses.replace(row, aten=(aten, f"{base}.n_scalar", f"{base}.x_scalar"))


ROWS: tuple[Row, ...] = (
    Row("Erfinv", _call1("planner_erfinv"), "y = erf^-1(x).",
        grads=(lambda m, xs, y: SQRT_PI_OVER_2 * m.exp(y * y),), uses_y=True, flops=20,
        aten=("erfinv.default",), domain=("sym",)),
    Row("Ndtri", _call1("planner_ndtri"), "y = the standard normal quantile of x.",
        grads=(lambda m, xs, y: SQRT_2PI * m.exp(0.5 * (y * y)),), uses_y=True, flops=20,
        aten=("special_ndtri.default",), domain=("unit",)),
    Row("Erfcx", _call1("planner_erfcx"), "y = exp(x^2) erfc(x), without overflow.",
        grads=(lambda m, xs, y: 2.0 * xs[0] * y - TWO_OVER_SQRT_PI,), uses_y=True, flops=20,
        aten=("special_erfcx.default",)),
    # kept whole at import (its decomposition's unselected branch gives a NaN gradient)
    Row("LogNdtr", lambda m, xs, p: [_log_ndtr(m, xs[0])],
        "y = log of the standard normal distribution function at x.",
        grads=(lambda m, xs, y: m.exp(-(y + 0.5 * (xs[0] * xs[0]))) / SQRT_2PI,),
        uses_y=True, flops=25, aten=("special_log_ndtr.default",)),
    Row("I0", _call1("planner_i0"), "y = the modified Bessel function I0(x).",
        grads=(lambda m, xs, y: m.call("planner_i1", xs[0]),), flops=30,
        aten=("i0.default",)),
    Row("I0e", _call1("planner_i0e"), "y = exp(-|x|) I0(x).",
        grads=(lambda m, xs, y: m.call("planner_i1e", xs[0]) - _sign(m, xs[0]) * y,),
        uses_y=True, flops=30, aten=("special_i0e.default",)),
    Row("I1", _call1("planner_i1"), "y = the modified Bessel function I1(x).",
        grads=(lambda m, xs, y: m.where(xs[0] == 0, 0.5,
                                        m.call("planner_i0", xs[0]) - y / xs[0]),),
        uses_y=True, flops=30, aten=("special_i1.default",)),
    Row("I1e", _call1("planner_i1e"), "y = exp(-|x|) I1(x).",
        grads=(lambda m, xs, y: m.where(xs[0] == 0, 0.5, m.call("planner_i0e", xs[0])
                                        - y * (_sign(m, xs[0]) + 1.0 / xs[0])),),
        uses_y=True, flops=30, aten=("special_i1e.default",)),
    *(_polygamma_row(n) for n in POLYGAMMA_ORDERS),
    # torch.frexp's two outputs (the mantissa's derivative is 2^-exponent, torch's)
    Row("FrexpMantissa", _call1("planner_frexp_mantissa"),
        "y = x's mantissa m, x = m 2^e with |m| in [0.5, 1) (x for 0, inf and NaN).",
        grads=(lambda m, xs, y: m.call("exp2", -m.call("planner_frexp_exponent", xs[0])),),
        flops=2),
    Row("FrexpExponent",
        lambda m, xs, p: [m.cast(m.call("planner_frexp_exponent", xs[0]), "int32")],
        "y = x's exponent e (int32), x = m 2^e with |m| in [0.5, 1) (0 for 0, inf and NaN).",
        out="int32", flops=2),
    Row("Igamma", _call2("planner_igamma"),
        "y = P(a, x), the regularized lower incomplete gamma function: [a, x].", arity=2,
        grads=(None, lambda m, xs, y: _gamma_density(m, xs[0], xs[1])), flops=60,
        aten=("igamma.default",), domain=("positive", "positive")),
    Row("Igammac", _call2("planner_igammac"),
        "y = Q(a, x) = 1 - P(a, x), the regularized upper incomplete gamma function: [a, x].",
        arity=2, grads=(None, lambda m, xs, y: -_gamma_density(m, xs[0], xs[1])), flops=60,
        aten=("igammac.default",), domain=("positive", "positive")),
    _plain("Zeta", "planner_zeta", "y = the Hurwitz zeta function zeta(x, q): [x, q].",
           "special_zeta.default", arity=2, flops=60, domain=("gt1", "positive"), refused=True),
    _plain("BesselJ0", "planner_bessel_j0", "y = the Bessel function J0(x).",
           "special_bessel_j0.default"),
    _plain("BesselJ1", "planner_bessel_j1", "y = the Bessel function J1(x).",
           "special_bessel_j1.default"),
    _plain("BesselY0", "planner_bessel_y0", "y = the Bessel function Y0(x).",
           "special_bessel_y0.default", domain=("positive",)),
    _plain("BesselY1", "planner_bessel_y1", "y = the Bessel function Y1(x).",
           "special_bessel_y1.default", domain=("positive",)),
    _plain("BesselK0", "planner_k0", "y = the modified Bessel function K0(x).",
           "special_modified_bessel_k0.default", domain=("positive",)),
    _plain("BesselK1", "planner_k1", "y = the modified Bessel function K1(x).",
           "special_modified_bessel_k1.default", domain=("positive",)),
    _plain("BesselK0e", "planner_k0e", "y = exp(x) K0(x).",
           "special_scaled_modified_bessel_k0.default", domain=("positive",)),
    _plain("BesselK1e", "planner_k1e", "y = exp(x) K1(x).",
           "special_scaled_modified_bessel_k1.default", domain=("positive",)),
    _plain("AiryAi", "planner_airy_ai", "y = the Airy function Ai(x).",
           "special_airy_ai.default"),
    _plain("SphericalBesselJ0", "planner_spherical_bessel_j0", "y = sin(x) / x (1 at 0).",
           "special_spherical_bessel_j0.default", flops=10),
    _polynomial("ChebyshevT", "planner_chebyshev_t", "Chebyshev polynomial of the first kind",
                "special_chebyshev_polynomial_t.default"),
    _polynomial("ChebyshevU", "planner_chebyshev_u", "Chebyshev polynomial of the second kind",
                "special_chebyshev_polynomial_u.default"),
    _polynomial("ChebyshevV", "planner_chebyshev_v", "Chebyshev polynomial of the third kind",
                "special_chebyshev_polynomial_v.default"),
    _polynomial("ChebyshevW", "planner_chebyshev_w", "Chebyshev polynomial of the fourth kind",
                "special_chebyshev_polynomial_w.default"),
    _polynomial("ShiftedChebyshevT", "planner_shifted_chebyshev_t",
                "shifted Chebyshev polynomial of the first kind (T_n(2x - 1))",
                "special_shifted_chebyshev_polynomial_t.default"),
    _polynomial("ShiftedChebyshevU", "planner_shifted_chebyshev_u",
                "shifted Chebyshev polynomial of the second kind (U_n(2x - 1))",
                "special_shifted_chebyshev_polynomial_u.default"),
    _polynomial("ShiftedChebyshevV", "planner_shifted_chebyshev_v",
                "shifted Chebyshev polynomial of the third kind (V_n(2x - 1))",
                "special_shifted_chebyshev_polynomial_v.default"),
    _polynomial("ShiftedChebyshevW", "planner_shifted_chebyshev_w",
                "shifted Chebyshev polynomial of the fourth kind (W_n(2x - 1))",
                "special_shifted_chebyshev_polynomial_w.default"),
    _polynomial("HermiteH", "planner_hermite_h",
                "physicists' Hermite polynomial (NaN above degree 128, as torch's float32)",
                "special_hermite_polynomial_h.default"),
    _polynomial("HermiteHe", "planner_hermite_he",
                "probabilists' Hermite polynomial (NaN above degree 128, as torch's float32)",
                "special_hermite_polynomial_he.default"),
    _polynomial("LaguerreL", "planner_laguerre_l", "Laguerre polynomial",
                "special_laguerre_polynomial_l.default"),
    _polynomial("LegendreP", "planner_legendre_p", "Legendre polynomial",
                "special_legendre_polynomial_p.default"),
)

# Compute-bound (tens of flops an element, loops): the CUDA block size does not move their
# time, so one threads-per-block variant of each kernel is generated.
ROWS = tuple(dataclasses.replace(row, blocks=(256,)) for row in ROWS)

for _row in ROWS:
    register_row(_row)

# rows whose output torch marks non-differentiable: no gradient flows through them
NONDIFFERENTIABLE = frozenset(row.name for row in ROWS if row.grads is None and row.differentiable
                              and row.name not in ("FrexpExponent",))

# the ops these rows define (theirs and their gradient ops'): kernels calling special_math.h
OPS = frozenset(name for row in ROWS for name in (
    row.name, *(row.grad_name(k) for k, d in enumerate(row.grads or ()) if d not in (None, 1))))
