"""The numpy references of the special functions the pointwise table's rows call as
m.call("planner_<name>", ...): scipy.special's, with torch's conventions where the two differ:
the polynomials' float degree truncated toward zero, zero for a negative, NaN or infinite
degree, Hermite polynomials NaN above degree 128 (torch's float32 kernels); the incomplete
gamma functions' edge cases in torch's order (x = 0 first, then infinite a, then infinite x,
NaN after); zeta(x, +inf) NaN (but zeta(1, q) = inf). At x = +-inf a polynomial of degree
k >= 1 is its limit, +-inf (where
torch's recurrence meets inf - inf and gives NaN). The executors' kernels call the
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


def _polynomial(fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                limit: int = POLYNOMIAL_DEGREE_LIMIT, alternating: bool = False):
    """P_n(x) of a float degree n: truncated toward zero; 0 below zero and for a NaN or
    infinite degree (torch's Hermite rule: -1); NaN past `limit`; at x = +-inf the limit by the
    leading coefficient's sign (positive, or (-1)^k: `alternating`) and the degree's parity."""
    def apply(x: np.ndarray, n: np.ndarray) -> np.ndarray:
        x, n = np.broadcast_arrays(x, np.trunc(n))
        n = np.where(np.isfinite(n), n, -1.0)
        bad = n > limit
        k = np.where(bad | (n < 0), 0, n).astype(np.int64)
        out = fn(k, np.where(np.isinf(x), 0.0, x))
        odd = k % 2 == 1
        negative = (x < 0) & odd ^ (alternating & odd)
        limit_value = np.where(k == 0, 1.0, np.where(negative, -np.inf, np.inf))
        out = np.where(np.isinf(x), limit_value, np.where(k == 0, 1.0, out))  # P_0 = 1, at NaN too
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
    return np.where(x == 1, np.inf, np.where(np.isposinf(q), np.nan, sc.zeta(x, q)))


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
    "planner_chebyshev_t": _polynomial(sc.eval_chebyt),
    "planner_chebyshev_u": _polynomial(_chebyshev_u),
    "planner_chebyshev_v": _polynomial(_chebyshev_v),
    "planner_chebyshev_w": _polynomial(_chebyshev_w),
    "planner_shifted_chebyshev_t": _polynomial(_shifted(sc.eval_chebyt)),
    "planner_shifted_chebyshev_u": _polynomial(_shifted(_chebyshev_u)),
    "planner_shifted_chebyshev_v": _polynomial(_shifted(_chebyshev_v)),
    "planner_shifted_chebyshev_w": _polynomial(_shifted(_chebyshev_w)),
    "planner_hermite_h": _polynomial(sc.eval_hermite, HERMITE_LIMIT),
    "planner_hermite_he": _polynomial(sc.eval_hermitenorm, HERMITE_LIMIT),
    "planner_laguerre_l": _polynomial(sc.eval_laguerre, alternating=True),
    "planner_legendre_p": _polynomial(sc.eval_legendre),
}
