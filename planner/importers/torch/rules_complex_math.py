"""Complex elementary functions on the planes (rules_complex.py's layout): each is real ops of
the real and imaginary parts, in the formulas of c10's complex math (c10/util/complex_math.h)
or glibc's (which c10 calls through std::), so that their principal branches, branch cuts and
signed zeros are torch's:

    log z    = log|z| + i atan2(y, x)      (|z| scaled: rules_complex._unit_modulus; the cut on
                                            the negative reals follows y's sign, as atan2's)
    sqrt z   = (t, y / 2t) for x >= 0, (|y| / 2t, copysign(t, y)) below, t = sqrt((|z| + |x|) / 2)
               computed on z / s times sqrt(s), s the larger plane (no square overflows)
    log1p z  = c10's: (log1p(x (2 + x) + y^2) / 2 or log|1 + z|, atan2(y, 1 + x))
    expm1 z  = c10's: (expm1(x) cos y - 2 sin^2(y / 2), e^x sin y)
    exp2 z   = exp(z ln 2), log2 and log10 are log z / ln 2, / ln 10
    sin, cos, sinh, cosh: the addition formulas (sin x cosh y, cos x sinh y), ...
    tanh z   = (T (1 + t^2), t sech^2 x) / (1 + T^2 t^2), T = tanh x, t = tan y (tanh(x + iy)
               by the addition formula, the imaginary part's 1 - T^2 as sech^2 x: no
               cancellation, and no overflow where x is large), tan z = -i tanh(iz)
    asinh z  = log(w + sqrt(w^2 + 1)), w = +-z of Re w >= +0, the sign given back; atanh glibc's
               catanh; asin z = -i asinh(iz), atan z = -i atanh(iz), acos z = pi/2 - asin z,
               acosh z = +-i acos z (Re >= 0)
    sigmoid  = 1 / (1 + e^-z) (ATen's), rsqrt = 1 / sqrt z
    z ** k   = for k in 2, 3, -1, -2, 0.5, -0.5 ATen's products, reciprocal, sqrt and rsqrt;
               any other number std::pow's exp(k log z), in float64 (_power)

Everything is ops of the op table, so the reference interpreter, autodiff and the executors
need nothing new. The gradient of sin, cos, sinh, cosh, expm1, sigmoid is the real ops' own:
for a holomorphic function the derivative of the planes, PyTorch's conjugate-Wirtinger
gradient. The others take torch's backward formula instead (_with_derivative: the value held,
plus d (z - z), the derivative d held): differentiating tanh's formula loses digits near its
poles, and torch's formula fixes what its gradient is at a branch point or pole (NaN, or the
cotangent over 0), where the formula's own derivative is 0 / 0 or another infinity. A Where
that guards a singular point feeds each branch a finite input, so that the branch it does not
pick passes no 0 * inf (a NaN) into the gradient.

Beside them, the other elementwise functions of complex numbers: the predicates (isnan, eq,
logical_and, any, ...: of the two parts), lerp, and the distances |a - b| (l1_loss, dist).

Refused: pow of an exponent tensor (pow.Tensor_Tensor, pow.Scalar: pow_scalar's docstring).
"""

from __future__ import annotations

import math
from typing import Any

from planner.importers.kit import Unsupported
from planner.importers.torch.context import NodeCtx
from planner.importers.torch.rules_complex import (
    Cx,
    _arg_cx,
    _joined,
    _modulus,
    _planes,
    _promote,
    _quotient,
    _real_of,
    _real_rule,
    _times,
    _unit_modulus,
    cx_rule,
)


def _ops(n: NodeCtx, real: str) -> Any:
    """Short spellings of the real ops of one rule (u.exp(x), u.mul(a, b), u.c(2.0))."""

    class U:
        @staticmethod
        def c(v: float) -> Any:
            return n.const(v, real)

        def __getattr__(self, op: str) -> Any:
            name = _NAMES[op]
            return lambda *xs, **attrs: n.emit1(name, list(xs), attrs)

    return U()


_NAMES = {"exp": "Exp", "log": "Log", "log1p": "Log1p", "expm1": "Expm1", "sqrt": "Sqrt",
          "sin": "Sin", "cos": "Cos", "sinh": "Sinh", "cosh": "Cosh", "tanh": "Tanh",
          "tan": "Tan", "atan2": "Atan2", "hypot": "Hypot", "abs": "Abs", "add": "Add",
          "sub": "Sub", "mul": "Mul", "div": "Div", "where": "Where", "equal": "Equal",
          "less": "Less", "greater": "Greater", "ge": "GreaterOrEqual", "copysign": "CopySign",
          "scale": "Scale", "neg": "Neg"}


def _parts(n: NodeCtx) -> tuple[Cx, Any, Any, Any]:
    z = _arg_cx(n, 0)
    x, y = _planes(n, z)
    return z, x, y, _ops(n, n.dtype(z.v))


# ---- logarithms and roots ---------------------------------------------------------------------

def _log(n: NodeCtx, z: Cx) -> tuple[Any, Any]:
    """log z's planes: log|z| (|z| as s |z / s|, never overflowing) and the angle."""
    x, y = _planes(n, z)
    u = _ops(n, n.dtype(z.v))
    norm, s = _unit_modulus(n, z)
    return u.add(u.log(norm), u.log(s)), u.atan2(y, x)


@cx_rule("aten.log.default", "aten.log2.default", "aten.log10.default")
def log(n: NodeCtx) -> Any:
    """log z (log2, log10: over ln 2, ln 10); the derivative torch's, 1 / (z ln b), whose
    pole at 0 gives the cotangent over 0 (_with_derivative)."""
    z = _arg_cx(n, 0)
    re, im = _log(n, z)
    scale = 1.0 / math.log({"aten.log2.default": 2.0, "aten.log10.default": 10.0}.get(n.op,
                                                                                     math.e))
    u = _ops(n, n.dtype(z.v))
    w = _joined(n, *(u.scale(p, factor=scale) for p in (re, im)))
    return _with_derivative(n, w, z, _quotient(n, scale, z), pole=True)


@cx_rule("aten.log1p.default")
def log1p(n: NodeCtx) -> Any:
    """c10's log1p: near 0 (|z| < 1/2) log1p of x (2 + x) + y^2 halved (x itself where that
    underflows to 0), else log|1 + z|; the angle atan2(y, 1 + x). The derivative torch's,
    1 / (1 + z), its pole at -1 giving the cotangent over 0."""
    z, x, y, u = _parts(n)
    x1 = u.add(x, u.c(1.0))
    near = u.less(u.hypot(x, y), u.c(0.5))
    r = u.add(u.mul(x, u.add(x, u.c(2.0))), u.mul(y, y))
    r = u.where(near, r, u.c(0.0))  # the far branch's r may reach -1, log1p's pole
    small = u.where(u.equal(r, u.c(0.0)), x, u.scale(u.log1p(r), factor=0.5))
    far = u.log(u.hypot(u.where(near, u.c(1.0), x1), y))
    w = _joined(n, u.where(near, small, far), u.atan2(y, x1))
    return _with_derivative(n, w, z, _quotient(n, 1.0, _joined(n, x1, y)), pole=True)


def _sqrt(n: NodeCtx, z: Cx) -> tuple[Any, Any]:
    """sqrt z's planes (the module docstring's formula; z = 0 gives +0 and y)."""
    x, y = _planes(n, z)
    u = _ops(n, n.dtype(z.v))
    norm, s = _unit_modulus(n, z)
    half = u.scale(u.add(norm, u.div(u.abs(x), s)), factor=0.5)
    t = u.mul(u.sqrt(half), u.sqrt(s))
    zero = u.equal(t, u.c(0.0))
    q = u.div(y, u.scale(u.where(zero, u.c(0.5), t), factor=2.0))
    right = u.ge(x, u.c(0.0))
    # |q| and copysign(t, y) as products with y's sign (-1 at -0.0): on the cut (y = +-0) the
    # derivative is the one of y's side, as torch's 1 / (2 sqrt z), not Abs's 0 at 0
    sign = u.copysign(u.c(1.0), y)
    return u.where(right, t, u.mul(q, sign)), u.where(right, q, u.mul(t, sign))


@cx_rule("aten.sqrt.default")
def sqrt(n: NodeCtx) -> Any:
    """sqrt z; the derivative torch's, 1 / (2 sqrt z), the cotangent over 0 at 0."""
    z = _arg_cx(n, 0)
    w = _joined(n, *_sqrt(n, z))
    return _with_derivative(n, w, z, _quotient(n, 0.5, w), pole=True)


@cx_rule("aten.rsqrt.default")
def rsqrt(n: NodeCtx) -> Any:
    """1 / sqrt z; the derivative torch's, -w^3 / 2 of the result w (NaN at 0)."""
    z = _arg_cx(n, 0)
    w = _quotient(n, 1.0, _joined(n, *_sqrt(n, z)))
    return _with_derivative(n, w, z, _times(n, _times(n, _times(n, w, w), w), -0.5))


# ---- exponentials ------------------------------------------------------------------------------

@cx_rule("aten.exp2.default")
def exp2(n: NodeCtx) -> Any:
    """2^z = e^(z ln 2), ATen's exp2 of a complex number; the derivative torch's, 2^z ln 2
    (NaN where that overflows)."""
    z = _arg_cx(n, 0)
    w = _exp(n, Cx(_ops(n, n.dtype(z.v)).scale(z.v, factor=math.log(2.0))))
    return _with_derivative(n, w, z, _times(n, w, math.log(2.0)))


def _exp(n: NodeCtx, z: Cx) -> Cx:
    x, y = _planes(n, z)
    u = _ops(n, n.dtype(z.v))
    size = u.exp(x)
    return _joined(n, u.mul(size, u.cos(y)), u.mul(size, u.sin(y)))


@cx_rule("aten.expm1.default")
def expm1(n: NodeCtx) -> Any:
    """c10's expm1: (expm1(x) cos y - 2 sin^2(y / 2), e^x sin y), no cancellation near 0."""
    _, x, y, u = _parts(n)
    a = u.sin(u.scale(y, factor=0.5))
    re = u.sub(u.mul(u.expm1(x), u.cos(y)), u.scale(u.mul(a, a), factor=2.0))
    return _joined(n, re, u.mul(u.exp(x), u.sin(y)))


@cx_rule("aten.sigmoid.default")
def sigmoid(n: NodeCtx) -> Any:
    """1 / (1 + e^-z), ATen's complex sigmoid."""
    z = _arg_cx(n, 0)
    u = _ops(n, n.dtype(z.v))
    e = _exp(n, Cx(u.neg(z.v)))
    return _quotient(n, 1.0, Cx(u.add(e.v, n.const([1.0, 0.0], n.dtype(z.v)))))


# ---- trigonometric and hyperbolic -------------------------------------------------------------

@cx_rule("aten.sin.default", "aten.cos.default", "aten.sinh.default", "aten.cosh.default")
def sin_cos(n: NodeCtx) -> Any:
    """The addition formulas: sin(x + iy) = sin x cosh y + i cos x sinh y, cos(x + iy) =
    cos x cosh y - i sin x sinh y, sinh(x + iy) = sinh x cos y + i cosh x sin y,
    cosh(x + iy) = cosh x cos y + i sinh x sin y."""
    _, x, y, u = _parts(n)
    name = n.op.split(".")[1]
    if name in ("sin", "cos"):
        return _joined(n, *_sin_cos(n, x, y)[name == "cos"])
    sh, ch, s, c = u.sinh(x), u.cosh(x), u.sin(y), u.cos(y)
    if name == "sinh":
        return _joined(n, u.mul(sh, c), u.mul(ch, s))
    return _joined(n, u.mul(ch, c), u.mul(sh, s))


def _sin_cos(n: NodeCtx, x: Any, y: Any) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """The planes of sin(x + iy) and of cos(x + iy)."""
    u = _ops(n, n.dtype(x))
    s, c, sh, ch = u.sin(x), u.cos(x), u.sinh(y), u.cosh(y)
    return (u.mul(s, ch), u.mul(c, sh)), (u.mul(c, ch), u.neg(u.mul(s, sh)))


@cx_rule("aten.sinc.default")
def sinc(n: NodeCtx) -> Any:
    """sin(pi z) / (pi z), 1 at 0 (ATen's); the derivative torch's sinc_backward,
    (pi z cos(pi z) - sin(pi z)) / (pi z^2), 0 where pi z^2 is 0: both on a z of 1 there."""
    z, x, y, u = _parts(n)
    real = n.dtype(z.v)
    zero = _column(n, n.emit1("And", [u.equal(x, u.c(0.0)), u.equal(y, u.c(0.0))]))
    safe = Cx(u.where(zero, n.const([1.0, 0.0], real), z.v))
    q = Cx(u.scale(safe.v, factor=math.pi))
    sine, cosine = (_joined(n, *p) for p in _sin_cos(n, *_planes(n, q)))
    one = n.const([1.0, 0.0], real)
    w = Cx(u.where(zero, one, _quotient(n, sine, q).v))
    top = u.sub(_times(n, q, cosine).v, sine.v)
    slope = _quotient(n, Cx(top), _times(n, _times(n, safe, safe), math.pi))
    d = Cx(u.where(zero, u.c(0.0), slope.v))
    return _with_derivative(n, w, z, d)


def _tanh(n: NodeCtx, x: Any, y: Any, u: Any) -> tuple[Any, Any]:
    """tanh(x + iy)'s planes (the module docstring's formula)."""
    big_t, t = u.tanh(x), u.tan(y)
    ch = u.cosh(x)
    sech2 = u.div(u.c(1.0), u.mul(ch, ch))
    den = u.add(u.c(1.0), u.mul(u.mul(big_t, big_t), u.mul(t, t)))
    re = u.div(u.mul(big_t, u.add(u.c(1.0), u.mul(t, t))), den)
    return re, u.div(u.mul(t, sech2), den)


@cx_rule("aten.tanh.default", "aten.tan.default")
def tanh(n: NodeCtx) -> Any:
    """tanh by the formula, tan z = -i tanh(iz); the derivative torch's, 1 - tanh^2 and
    1 + tan^2 of the result (_with_derivative: the formula's own loses digits near the
    poles)."""
    z, x, y, u = _parts(n)
    if n.op == "aten.tanh.default":
        w, sign = _joined(n, *_tanh(n, x, y, u)), -1.0
    else:
        re, im = _tanh(n, u.neg(y), x, u)  # iz = -y + ix
        w, sign = _joined(n, im, u.neg(re)), 1.0
    square = _times(n, w, w)
    d = u.add(u.scale(square.v, factor=sign), n.const([1.0, 0.0], n.dtype(z.v)))
    return _with_derivative(n, w, z, Cx(d))


def _with_derivative(n: NodeCtx, w: Cx, z: Cx, d: Cx, pole: bool = False) -> Cx:
    """w, the value of a holomorphic function at z, whose derivative there is d: w held, plus
    d (z - z) (0), d and the second z held, so that the gradient is conj(d) times the cotangent,
    torch's backward formula, rather than the derivative of w's formula. Where d is not
    finite (a branch point or a pole, where it is c10's 1 / 0, (inf, NaN)), the gradient is
    torch's there: NaN where torch multiplies by d, the cotangent over +0 (`pole`: torch
    divides by 1 / d) (_singular)."""
    u = _ops(n, n.dtype(z.v))
    dr, di = _planes(n, d)
    finite = n.emit1("And", [n.emit1("IsFinite", [dr]), n.emit1("IsFinite", [di])])
    held = Cx(u.where(_column(n, finite), n.emit1("StopGradient", [d.v]), u.c(0.0)))
    # d (z - z): 0, of derivative d (d z less its held self would overflow with d z)
    step = _times(n, held, Cx(u.sub(z.v, n.emit1("StopGradient", [z.v])))).v
    step = u.where(n.emit1("IsNaN", [step]), u.c(0.0), step)  # z itself not finite
    jump = _singular(n, z, n.emit1("Not", [finite]), nan=not pole)
    return Cx(u.add(u.add(n.emit1("StopGradient", [w.v]), step), jump))


def _one_plus_square(n: NodeCtx, x: Any, y: Any, sign: float) -> Cx:
    """1 + sign z^2 with its real part's cancellation near z^2 = -sign exact-ish:
    1 + (x^2 - y^2) is (1 - y)(1 + y) + x^2, 1 - (x^2 - y^2) is (1 - x)(1 + x) + y^2."""
    u = _ops(n, n.dtype(x))
    a, b = (y, x) if sign > 0 else (x, y)
    re = u.add(u.mul(u.sub(u.c(1.0), a), u.add(u.c(1.0), a)), u.mul(b, b))
    return _joined(n, re, u.scale(u.mul(x, y), factor=2.0 * sign))


def _asinh(n: NodeCtx, x: Any, y: Any) -> tuple[Any, Any]:
    """asinh(x + iy)'s planes: log(w + sqrt(w^2 + 1)) of w = z or -z, the one of Re w >= +0
    (no cancellation in w + sqrt), then the sign given back (asinh is odd); sqrt's and log's
    cuts give the cut on the imaginary axis past +-i glibc's signed zeros."""
    u = _ops(n, n.dtype(x))
    s = u.copysign(u.c(1.0), x)
    xw, yw = u.mul(x, s), u.mul(y, s)
    root = _sqrt(n, _one_plus_square(n, xw, yw, 1.0))
    re, im = _log(n, _joined(n, u.add(xw, root[0]), u.add(yw, root[1])))
    return u.mul(re, s), u.mul(im, s)


def _atanh(n: NodeCtx, x: Any, y: Any) -> tuple[Any, Any]:
    """atanh(x + iy)'s planes, glibc's catanh: the real part a quarter of log1p(4x / den),
    den = (1 - x)^2 + y^2, or of log(((1 + x)^2 + y^2) / den) where that ratio is below 1/2
    (near -1); the imaginary part half of atan2(2y, (1 - x)(1 + x) - y^2)."""
    u = _ops(n, n.dtype(x))
    one = u.c(1.0)
    den = u.add(u.mul(u.sub(one, x), u.sub(one, x)), u.mul(y, y))
    num = u.add(u.mul(u.add(one, x), u.add(one, x)), u.mul(y, y))
    f = u.div(num, den)
    near = u.less(f, u.c(0.5))
    re = u.where(near, u.log(f), u.log1p(u.div(u.scale(x, factor=4.0), den)))
    im = u.atan2(u.scale(y, factor=2.0),
                 u.sub(u.mul(u.sub(one, x), u.add(one, x)), u.mul(y, y)))
    return u.scale(re, factor=0.25), u.scale(im, factor=0.5)


@cx_rule("aten.asinh.default", "aten.asin.default", "aten.acos.default",
         "aten.acosh.default", "aten.atanh.default", "aten.atan.default")
def inverse(n: NodeCtx) -> Any:
    """asinh and atanh (_asinh, _atanh); asin z = -i asinh(iz) and atan z = -i atanh(iz) (as
    glibc's casin, catan), acos z = pi/2 - asin z, acosh z = +-i acos z, the sign making its
    real part non-negative (as C99's cacosh, the cut's zeros included). The derivatives are
    torch's formulas (_with_derivative)."""
    z, x, y, u = _parts(n)
    name = n.op.split(".")[1]
    if name in ("asinh", "atanh"):
        w = _joined(n, *(_asinh if name == "asinh" else _atanh)(n, x, y))
    else:
        re, im = (_atanh if name == "atan" else _asinh)(n, u.neg(y), x)  # iz = -y + ix
        w = _joined(n, im, u.neg(re))
        if name in ("acos", "acosh"):
            a, b = u.sub(u.c(math.pi / 2), im), re  # acos z = (pi/2 - asin re, -asin im)
            s = u.copysign(u.c(1.0), b)
            w = _joined(n, a, b) if name == "acos" else _joined(n, u.mul(b, s), u.neg(
                u.mul(a, s)))
    return _with_derivative(n, w, z, _inverse_derivative(n, name, z, x, y),
                            pole=name in ("atan", "atanh"))


def _inverse_derivative(n: NodeCtx, name: str, z: Cx, x: Any, y: Any) -> Cx:
    """torch's derivative of the inverse function `name` at z: 1 / sqrt(1 - z^2) (asin; acos
    its negative), 1 / sqrt(z^2 + 1) (asinh), 1 / (sqrt(z - 1) sqrt(z + 1)) (acosh),
    1 / (1 + z^2) (atan), 1 / (1 - z^2) (atanh)."""
    real = n.dtype(z.v)
    if name == "acosh":
        below, above = (Cx(n.emit1("Add", [z.v, n.const([c, 0.0], real)])) for c in (-1.0, 1.0))
        return _quotient(n, 1.0, _times(n, _joined(n, *_sqrt(n, below)),
                                        _joined(n, *_sqrt(n, above))))
    sign = 1.0 if name in ("asinh", "atan") else -1.0
    base = _one_plus_square(n, x, y, sign)
    # torch's 1 +- z^2 adds the 1's imaginary +0: on the cut its zero is +0 (-0 + 0)
    re, im = _planes(n, base)
    base = _joined(n, re, n.emit1("Add", [im, n.const(0.0, real)]))
    if name in ("asin", "acos", "asinh"):
        base = _joined(n, *_sqrt(n, base))
    return _quotient(n, -1.0 if name == "acos" else 1.0, base)


# ---- powers ----------------------------------------------------------------------------------

@cx_rule("aten.pow.Tensor_Scalar")
def pow_scalar(n: NodeCtx) -> Any:
    """z ** k: for the exponents ATen's pow_tensor_scalar computes without std::pow, products,
    the reciprocal, sqrt and rsqrt (and z itself); for any other, std::pow's (_power). An
    exponent tensor (aten.pow.Tensor_Tensor, pow.Scalar) stays refused: of OpInfo pow's large
    values (a base of 1e20, an exponent of 1e20 i) the angle w log z is 7e20 radians, where
    the infinities' signs are rounding's, even torch's float64 and numpy's differing."""
    z, k = _arg_cx(n, 0), complex(n.arg(1, "exponent"))
    if abs(k) > 2.0 ** 20 or not math.isfinite(abs(k)):
        raise Unsupported(f"{n.op} (a complex tensor to the power {k}: exp(k log z)'s angle "
                          "has no correct digit)")
    if k.imag != 0 or k.real not in _ATEN_POWERS:
        return _power(n, z, _promote(n, k, n.dtype(z.v)))
    if k.real == 1:
        return z
    # the derivative torch's pow_backward, k z^(k - 1): NaN at 0 where that is 0 to a negative
    # power (sqrt's own is +-inf there)
    slope = _times(n, _aten_power(n, z, k.real - 1), k.real)
    return _with_derivative(n, _aten_power(n, z, k.real), z, slope)


# exponents ATen's pow_tensor_scalar computes by products, the reciprocal, sqrt or rsqrt
_ATEN_POWERS = (1, 2, 3, -1, -2, 0.5, -0.5)


def _aten_power(n: NodeCtx, z: Cx, k: float) -> Cx:
    """z ** k as ATen's pow computes it: by products, the reciprocal, sqrt or rsqrt for
    _ATEN_POWERS, 1 for 0, else std::pow (_power)."""
    if k == 0:
        return Cx(n.emit1("Add", [n.emit1("Mul", [z.v, n.const(0.0, n.dtype(z.v))]),
                                  n.const([1.0, 0.0], n.dtype(z.v))]))
    if k not in _ATEN_POWERS:
        return _power(n, z, _promote(n, k, n.dtype(z.v)))
    if abs(k) == 0.5:
        root = _joined(n, *_sqrt(n, z))
        return root if k > 0 else _quotient(n, 1.0, root)
    p = z
    for _ in range(int(abs(k)) - 1):
        p = _times(n, p, z)
    return p if k > 0 else _quotient(n, 1.0, p)


def _power(n: NodeCtx, z: Cx, w: Cx) -> Cx:
    """std::pow of complex numbers, glibc's cpow: exp(w log z), computed in float64 and
    rounded: the angle w log z of a large base or exponent (OpInfo pow's 1e20 and 5e6) has no
    correct digit in float32, nor then the signs of an overflowed result's infinities."""
    real = n.dtype(z.v)
    if real == "float64":
        return _wide_power(n, z, w)
    z, w = (Cx(n.emit1("Cast", [v.v], {"to": "float64"})) for v in (z, w))
    return Cx(n.emit1("Cast", [_wide_power(n, z, w).v], {"to": real}))


def _wide_power(n: NodeCtx, z: Cx, w: Cx) -> Cx:
    """exp(w log z) in z's dtype. A base 0 (whose log is -inf) gives 0 where Re w > 0,
    (inf, NaN) where Re w < 0, NaN where Re w = 0; torch's gradient there is 0 or NaN
    (pow_backward: w 0^(w - 1) is 0 where Re w > 1 or w = 0; log(0) 0^w is 0 where w is real
    and not negative): the formula runs on a base of 1 there, and _singular gives the
    NaNs."""
    real = n.dtype(z.v)
    u = _ops(n, real)
    x, y = _planes(n, z)
    wr, wi = _planes(n, w)
    zero = n.emit1("And", [u.equal(x, u.c(0.0)), u.equal(y, u.c(0.0))])
    safe = Cx(u.where(_column(n, zero), n.const([1.0, 0.0], real), z.v))
    lr, li = _log(n, safe)
    e = _exp(n, _joined(n, u.sub(u.mul(wr, lr), u.mul(wi, li)),
                        u.add(u.mul(wr, li), u.mul(wi, lr))))
    nan = n.const(float("nan"), real)
    at_zero = _joined(n, u.where(u.greater(wr, u.c(0.0)), u.c(0.0),
                                 u.where(u.less(wr, u.c(0.0)), u.c(float("inf")), nan)),
                      u.where(u.greater(wr, u.c(0.0)), u.c(0.0), nan))
    v = u.where(_column(n, zero), at_zero.v, e.v)
    w_zero = n.emit1("And", [u.equal(wr, u.c(0.0)), u.equal(wi, u.c(0.0))])
    flat = n.emit1("Or", [u.greater(wr, u.c(1.0)), w_zero])
    nan_z = n.emit1("And", [zero, n.emit1("Not", [flat])])
    real_w = n.emit1("And", [u.equal(wi, u.c(0.0)), u.ge(wr, u.c(0.0))])
    nan_w = n.emit1("And", [zero, n.emit1("Not", [real_w])])
    return Cx(u.add(u.add(v, _singular(n, z, nan_z)), _singular(n, w, nan_w)))


def _column(n: NodeCtx, mask: Any) -> Any:
    """A mask of a complex value's shape as one over its planes (a trailing 1)."""
    return n.emit1("Reshape", [mask], {"shape": [*n.shape(mask), 1]})


def _singular(n: NodeCtx, z: Cx, mask: Any, nan: bool = True) -> Any:
    """Zeros of z's planes whose gradient with respect to z is, where `mask`, NaN (`nan`) or
    the cotangent over +0 (c10's division by 0: +-inf, NaN where the cotangent is 0), and 0
    elsewhere: sqrt(z - z) (0, of infinite derivative), times 0 for the NaN (0 / 0)."""
    real = n.dtype(z.v)
    u = _ops(n, real)
    d = u.where(_column(n, mask), u.sub(z.v, n.emit1("StopGradient", [z.v])), u.c(1.0))
    root = u.sqrt(u.add(d, u.c(0.0)))
    return u.mul(root, u.c(0.0)) if nan else u.sub(root, n.emit1("StopGradient", [root]))


# ---- predicates, interpolation, distances ----------------------------------------------------

@cx_rule("aten.isnan.default", "aten.isinf.default", "aten.isfinite.default")
def classify(n: NodeCtx) -> Any:
    """NaN or infinite where either part is (torch's), finite where both are."""
    test, join = {"isnan": ("IsNaN", "Or"), "isinf": ("IsInf", "Or"),
                  "isfinite": ("IsFinite", "And")}[n.op.split(".")[1]]
    return n.emit1(join, [n.emit1(test, [p]) for p in _planes(n, _arg_cx(n, 0))])


@cx_rule("aten.eq.Tensor", "aten.eq.Scalar", "aten.ne.Tensor", "aten.ne.Scalar")
def equal(n: NodeCtx) -> Any:
    """Equal where both parts are (a NaN part never is), a real operand promoted."""
    real = _real_of(n)
    (ar, ai), (br, bi) = (_planes(n, _promote(n, n.arg(k, name), real))
                          for k, name in ((0, "self"), (1, "other")))
    same = n.emit1("And", [n.emit1("Equal", [ar, br]), n.emit1("Equal", [ai, bi])])
    return same if n.op.startswith("aten.eq") else n.emit1("Not", [same])


@cx_rule("aten.logical_not.default", "aten.logical_and.default", "aten.logical_or.default",
         "aten.logical_xor.default", "aten.any.default", "aten.any.dim", "aten.any.dims",
         "aten.all.default", "aten.all.dim", "aten.all.dims")
def truth(n: NodeCtx) -> Any:
    """The real rule on each complex operand's truth: a part non-zero (NaN is)."""
    def nonzero(v: Any) -> Any:
        if not isinstance(v, Cx):
            return v
        return n.emit1("Or", [n.emit1("NotEqual", [p, n.const(0.0, n.dtype(v.v))])
                              for p in _planes(n, v)])

    return _real_rule(n, [nonzero(a) for a in n.args], n.kwargs)


@cx_rule("aten.lerp.Scalar", "aten.lerp.Tensor")
def lerp(n: NodeCtx) -> Any:
    """start + weight (end - start), the weight a number (real or complex) or a tensor; torch's
    other form for weights past 1/2, end - (end - start)(1 - weight), is the same number but
    for rounding."""
    real = _real_of(n)
    a, b = (_promote(n, n.arg(k, name), real) for k, name in ((0, "self"), (1, "end")))
    weight = n.arg(2, "weight")
    if not isinstance(weight, (int, float, complex)):
        weight = _promote(n, weight, real)
    step = _times(n, Cx(n.emit1("Sub", [b.v, a.v])), weight)
    return Cx(n.emit1("Add", [a.v, step.v]))


@cx_rule("aten.l1_loss.default", "aten.dist.default")
def distance(n: NodeCtx) -> Any:
    """|a - b| (the modulus, whose gradient at 0 is 0 as torch's sgn), reduced as l1_loss's
    reduction, or its p-norm (dist)."""
    from planner.importers.torch.rules_losses import _reduce, _reduction
    from planner.importers.torch.rules_products import _norm

    real = _real_of(n)
    a, b = (_promote(n, n.arg(k, name), real) for k, name in ((0, "self"), (1, "other")))
    size = _modulus(n, Cx(n.emit1("Sub", [a.v, b.v])))
    if n.op == "aten.l1_loss.default":
        return _reduce(n, size, _reduction(n, 2))
    return n.emit1("Reshape", [_norm(n, size, float(n.arg(2, "p", 2)), [])], {"shape": []})
