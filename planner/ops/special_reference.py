"""The numpy references of the special functions the pointwise table's rows call as
m.call("planner_<name>", ...): scipy.special's, with torch's conventions where the two differ:
the polynomials' float degree truncated toward zero, zero for a negative, NaN or infinite
degree and for one of 2^63 or more (torch's conversion to int64 makes it negative), Hermite
polynomials NaN above degree 128 (torch's float32 kernels); where scipy's value is not finite
(x = +-inf, or an overflow) torch's own recurrence, which meets inf - inf two steps past an
overflow and gives NaN; the incomplete gamma functions' edge cases in torch's order (x = 0
first, then infinite a, then infinite x, NaN after); zeta(x, +inf) NaN (but zeta(1, q) = inf),
and NaN where torch's Euler-Maclaurin sum is 0 (underflowed) and its terms' product
x (x + 1) ... (x + 22) overflows (0 * inf). The executors' kernels call the
C++ of templates/common/special_math.h (`planner_<name>f`), a port of PyTorch's algorithms, so
the two are independent; tests/ops/test_special_functions.py holds them equal and both to
torch in float64.

Every function takes and gives numpy arrays, computing in float64 and returning the first
input's dtype.

Example:
    >>> import numpy as np
    >>> SPECIAL_FUNCTIONS["planner_chebyshev_t"](np.float32([0.5, 0.5]), np.float32([2.7, -1.0]))
    array([-0.5,  0. ], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.special as sc

# Past this degree the polynomials are NaN (the C++'s recurrence loops stop there too).
POLYNOMIAL_DEGREE_LIMIT = 65536
HERMITE_LIMIT = 128  # torch's, float32


def _float64(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def apply(*xs: np.ndarray) -> np.ndarray:
        xs = tuple(np.asarray(x) for x in xs)
        dtype = np.result_type(*xs)
        with np.errstate(all="ignore"):
            out = fn(*(x.astype(np.float64) for x in xs))
        return np.asarray(out).astype(dtype)

    return apply


# torch's recurrences (aten/src/ATen/native/Math.h), run where scipy's value is not finite:
# (x, k) -> the start (P_0, P_1) and the step from (P_(j-1), P_j) at j to P_(j+1)
Recurrence = tuple[Callable[[float], tuple[float, float]],
                   Callable[[float, int, float, float], float]]


def _chebyshev(first: Callable[[float], float]) -> Recurrence:
    return (lambda x: (1.0, first(x)), lambda x, j, p, q: (x + x) * q - p)


RECURRENCES: dict[str, Recurrence] = {
    "t": _chebyshev(lambda x: x),
    "u": _chebyshev(lambda x: x + x),
    "v": _chebyshev(lambda x: x + x - 1.0),
    "w": _chebyshev(lambda x: x + x + 1.0),
    "h": (lambda x: (1.0, x + x), lambda x, j, p, q: (x + x) * q - 2 * j * p),
    "he": (lambda x: (1.0, x), lambda x, j, p, q: x * q - j * p),
    "l": (lambda x: (1.0, 1.0 - x),
          lambda x, j, p, q: (((j + j) + (1.0 - x)) * q - j * p) / (j + 1)),
    "p": (lambda x: (1.0, x), lambda x, j, p, q: ((j + j + 1) * x * q - j * p) / (j + 1)),
}


def _recurrence(kind: str, x: float, k: int) -> float:
    """P_k(x) by torch's recurrence in float64, k >= 1; it stops at a NaN (inf - inf past an
    overflow), which stays NaN."""
    start, step = RECURRENCES[kind]
    p, q = start(x)
    for j in range(1, k):
        if math.isnan(q):
            break
        p, q = q, step(x, j, p, q)
    return q


def _polynomial(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], kind: str,
                limit: int = POLYNOMIAL_DEGREE_LIMIT, shifted: bool = False):
    """P_n(x) of a float degree n: truncated toward zero; 0 below zero, for a NaN or infinite
    degree (torch's Hermite rule: -1) and from 2^63 (torch's int64 conversion gives the lowest
    int64); NaN past `limit`; torch's recurrence where scipy's value is not finite."""
    def apply(x: np.ndarray, n: np.ndarray) -> np.ndarray:
        x, n = np.broadcast_arrays(x, np.trunc(n))
        n = np.where(np.isfinite(n) & (n < 2.0 ** 63), n, -1.0)
        bad = n > limit
        k = np.where(bad | (n < 0), 0, n).astype(np.int64)
        out = fn(k, np.where(np.isinf(x), 0.0, x))
        out = np.where(np.isinf(x), np.inf, out)
        at = (x + x - 1.0 if shifted else x).reshape(-1)
        out = np.array(out, np.float64)  # its own (writable) copy
        flat = out.reshape(-1)
        for i in np.flatnonzero(~np.isfinite(out) & ~np.isnan(x) & (k > 0)):
            flat[i] = _recurrence(kind, float(at[i]), int(k.reshape(-1)[i]))
        out = np.where(k == 0, 1.0, out)  # P_0 = 1, at NaN too
        return np.where(bad, np.nan, np.where(n < 0, 0.0, out))

    return _float64(apply)


def _incomplete_gamma(lower: bool):
    """P(a, x) (lower) or Q(a, x) with torch's edge cases, in its order."""
    fn = sc.gammainc if lower else sc.gammaincc
    zero_x = 0.0 if lower else 1.0

    def apply(a: np.ndarray, x: np.ndarray) -> np.ndarray:
        a, x = np.broadcast_arrays(a, x)
        out = fn(a, x)
        out = np.where(np.isinf(x), 1.0 - zero_x, out)
        out = np.where(np.isinf(a), np.where(np.isinf(x), np.nan, zero_x), out)
        out = np.where(x == 0, zero_x, out)
        out = np.where(a == 0, np.where(x > 0, 1.0 - zero_x, np.nan), out)
        return np.where((a < 0) | (x < 0), np.nan, out)

    return _float64(apply)


def _zeta(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    out = sc.zeta(x, q)
    # torch's Euler-Maclaurin sum at 0 (every term underflowed): its correction's a, the
    # product x (x + 1) ... (x + 22), overflows and a * b is inf * 0
    product = np.sum(np.log(np.maximum(x[..., None], 1.0) + np.arange(23)), axis=-1)
    out = np.where((out == 0) & (product > np.log(np.finfo(np.float64).max)), np.nan, out)
    return np.where(x == 1, np.inf, np.where(np.isposinf(q), np.nan, out))


def _chebyshev_u(k: np.ndarray, x: np.ndarray) -> np.ndarray:
    return sc.eval_chebyu(k, x)


def _chebyshev_u_before(k: np.ndarray, x: np.ndarray) -> np.ndarray:
    """U_{k-1}(x), U_{-1} = 0."""
    return np.where(k > 0, sc.eval_chebyu(np.maximum(k - 1, 0), x), 0.0)


def _chebyshev_v(k, x):  # third kind: V_n = U_n - U_{n-1}
    return _chebyshev_u(k, x) - _chebyshev_u_before(k, x)


def _chebyshev_w(k, x):  # fourth kind: W_n = U_n + U_{n-1}
    return _chebyshev_u(k, x) + _chebyshev_u_before(k, x)


def _shifted(fn):
    return lambda k, x: fn(k, 2.0 * x - 1.0)


def _polygamma(n: np.ndarray, x: np.ndarray) -> np.ndarray:
    return sc.polygamma(n.astype(np.int64), x)


SPECIAL_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "planner_erfinv": _float64(sc.erfinv),
    "planner_ndtri": _float64(sc.ndtri),
    "planner_erfcx": _float64(sc.erfcx),
    "planner_i0": _float64(sc.i0),
    "planner_i1": _float64(sc.i1),
    "planner_i0e": _float64(sc.i0e),
    "planner_i1e": _float64(sc.i1e),
    "planner_k0": _float64(sc.k0),
    "planner_k1": _float64(sc.k1),
    "planner_k0e": _float64(sc.k0e),
    "planner_k1e": _float64(sc.k1e),
    "planner_bessel_j0": _float64(sc.j0),
    "planner_bessel_j1": _float64(sc.j1),
    "planner_bessel_y0": _float64(sc.y0),
    "planner_bessel_y1": _float64(sc.y1),
    "planner_airy_ai": _float64(lambda x: sc.airy(x)[0]),
    "planner_spherical_bessel_j0": _float64(lambda x: sc.spherical_jn(0, x)),
    "planner_zeta": _float64(_zeta),
    "planner_igamma": _incomplete_gamma(lower=True),
    "planner_igammac": _incomplete_gamma(lower=False),
    # polygamma(n, x), n a whole number >= 1 (the row's constant)
    "planner_polygamma": lambda n, x: _float64(_polygamma)(np.asarray(n, np.asarray(x).dtype), x),
    # frexp's parts (the exponent as a float: the row casts it to int32)
    "planner_frexp_mantissa": lambda x: np.frexp(x)[0],
    "planner_frexp_exponent": lambda x: np.frexp(x)[1].astype(np.asarray(x).dtype),
    "planner_chebyshev_t": _polynomial(sc.eval_chebyt, "t"),
    "planner_chebyshev_u": _polynomial(_chebyshev_u, "u"),
    "planner_chebyshev_v": _polynomial(_chebyshev_v, "v"),
    "planner_chebyshev_w": _polynomial(_chebyshev_w, "w"),
    "planner_shifted_chebyshev_t": _polynomial(_shifted(sc.eval_chebyt), "t", shifted=True),
    "planner_shifted_chebyshev_u": _polynomial(_shifted(_chebyshev_u), "u", shifted=True),
    "planner_shifted_chebyshev_v": _polynomial(_shifted(_chebyshev_v), "v", shifted=True),
    "planner_shifted_chebyshev_w": _polynomial(_shifted(_chebyshev_w), "w", shifted=True),
    "planner_hermite_h": _polynomial(sc.eval_hermite, "h", HERMITE_LIMIT),
    "planner_hermite_he": _polynomial(sc.eval_hermitenorm, "he", HERMITE_LIMIT),
    "planner_laguerre_l": _polynomial(sc.eval_laguerre, "l"),
    "planner_legendre_p": _polynomial(sc.eval_legendre, "p"),
}
