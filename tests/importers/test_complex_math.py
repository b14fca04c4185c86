"""The complex elementary functions and the complex products, reductions and diagonals that
issue 86 lowered to real ops on the planes (planner/importers/torch/rules_complex_math.py,
rules_complex.py), each held to torch forward and backward as the complex64 OpInfo sweep holds
an OpInfo (tests/importers/opinfo_cases.py: the complex arguments parameters of their planes,
torch's complex128 run the reference, its complex64 run the rounding noise; an output or a
gradient may be off by 10 x that noise plus 16 float32 ulps of its scale, and a NaN or an
infinity of torch's must be the same): on values that reach the branch cuts from both sides
(signed zeros), the branch points and poles (0, +-1, +-i: torch's NaN or infinite gradients
there), and float32's extremes.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from tests.importers.opinfo_cases import check_call  # noqa: E402

C64 = torch.complex64
PASS = ("pass", "")

# real and imaginary parts: signed zeros (the cuts' two sides), the branch points +-1, a point
# near them, and values past them
PARTS = (0.0, -0.0, 0.25, -1.0, 1.0, 0.999, 2.0, -2.5)
GRID = torch.tensor([complex(a, b) for a, b in itertools.product(PARTS, PARTS)], dtype=C64)
EXTREMES = torch.tensor([3e30 + 4e30j, 1e-30 - 2e-30j, -2e19 + 1e19j, 5e-39j, 3 + 4j,
                         complex(-7, -0.0), 0j], dtype=C64)

UNARY = {"log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p,
         "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "exp2": torch.exp2, "expm1": torch.expm1,
         "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos, "sinh": torch.sinh,
         "cosh": torch.cosh, "tan": torch.tan, "tanh": torch.tanh, "asin": torch.asin,
         "acos": torch.acos, "atan": torch.atan, "asinh": torch.asinh, "acosh": torch.acosh,
         "atanh": torch.atanh}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_a_function_on_its_cuts_branch_points_and_poles(name):
    assert check_call(UNARY[name], GRID, dtype="complex64") == PASS


@pytest.mark.parametrize("name", ["log", "log2", "log1p", "sqrt", "rsqrt"])
def test_logs_and_roots_at_float32s_extremes(name):
    """|z| of 5e30 (whose square overflows float32) and of 5e-39 (a subnormal), and 0."""
    assert check_call(UNARY[name], EXTREMES, dtype="complex64") == PASS


def test_tanh_and_tan_near_their_poles_and_far_out():
    """tan near pi/2 (its pole) and tanh past |x| = 44, where cosh^2 overflows float32."""
    z = torch.tensor([1.5707 + 0.001j, -1.5708 + 0j, 0.3 + 1.57j, 50 - 3j, -60 + 1j], dtype=C64)
    assert check_call(torch.tan, z, dtype="complex64") == PASS
    assert check_call(torch.tanh, z, dtype="complex64") == PASS


@pytest.mark.parametrize("k", [2, 3, -1, -2, 0.5, -0.5, 1.5, -3.5, 0.5 + 1j, 2j],
                         ids=str)
def test_a_power_by_a_number(k):
    """ATen's products, reciprocal, sqrt and rsqrt for its exponents, std::pow's for others;
    a base of 0 (torch's 0, inf or NaN, and its gradient's 0 or NaN) included."""
    assert check_call(lambda z: z ** k, GRID, dtype="complex64") == PASS


def test_a_power_by_a_complex_tensor_is_refused_in_one_line():
    z = torch.tensor([1 + 1j, 2 - 1j], dtype=C64)
    status, detail = check_call(torch.pow, z, z.flip(0), dtype="complex64")
    assert status == "refused" and "aten.pow.Tensor_Tensor (on complex tensors)" in detail


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=C64, generator=torch.Generator().manual_seed(len(shape)))


def test_addmm_with_complex_alpha_and_beta_and_a_linear_layer():
    a, b, c = _randn(3, 4), _randn(4, 5), _randn(5)
    assert check_call(lambda x, y, z: torch.addmm(z, x, y, beta=0.5 - 1j, alpha=2j), a, b, c,
                      dtype="complex64") == PASS
    w, bias = _randn(6, 4), _randn(6)
    assert check_call(torch.nn.functional.linear, _randn(2, 3, 4), w, bias,
                      dtype="complex64") == PASS


@pytest.mark.parametrize("fn", [lambda z: torch.var(z, 1), lambda z: torch.std(z, (0, 2),
                                                                                  correction=0),
                                lambda z: torch.var_mean(z, -1, keepdim=True)],
                         ids=["var", "std", "var_mean"])
def test_the_variance_of_complex_values(fn):
    """The mean of |z - mean|^2: the real parts' variance plus the imaginary parts'."""
    assert check_call(fn, _randn(3, 4, 5), dtype="complex64") == PASS


def test_products_along_a_dim_of_odd_length_and_of_everything():
    """The tree of products (an odd element carried) and torch's gradient where a factor is 0."""
    z = _randn(3, 7, 2)
    z[1, 3, 0] = 0
    assert check_call(lambda t: torch.prod(t, 1), z, dtype="complex64") == PASS
    assert check_call(lambda t: torch.prod(t, -1, keepdim=True), z, dtype="complex64") == PASS
    assert check_call(torch.prod, _randn(5, 3), dtype="complex64") == PASS


def test_diagonals_traces_and_diagonal_scatter():
    z = _randn(2, 4, 5)
    assert check_call(lambda t: torch.diagonal(t, 1, 2, 0), z, dtype="complex64") == PASS
    assert check_call(lambda t: torch.diagonal(t, -2, -1, -2), z, dtype="complex64") == PASS
    assert check_call(torch.trace, _randn(4, 3), dtype="complex64") == PASS
    assert check_call(lambda t, s: torch.diagonal_scatter(t, s, 1, 1, 2), z, _randn(2, 4),
                      dtype="complex64") == PASS


def test_addmv_and_addbmm():
    assert check_call(lambda b, m, v: torch.addmv(b, m, v, beta=2, alpha=1 - 1j), _randn(3),
                      _randn(3, 4), _randn(4), dtype="complex64") == PASS
    assert check_call(lambda b, x, y: torch.addbmm(b, x, y), _randn(3, 5), _randn(2, 3, 4),
                      _randn(2, 4, 5), dtype="complex64") == PASS


NAN = float("nan")
ODD = torch.tensor([complex(NAN, 0), complex(0, NAN), complex(float("inf"), 1), 2j,
                    complex(-0.0, 0.0), 0j, 1 + 0j, complex(1, float("-inf"))], dtype=C64)


@pytest.mark.parametrize("fn", [torch.isnan, torch.isinf, torch.isfinite, torch.logical_not,
                                lambda z: torch.logical_xor(z, z.flip(0)),
                                lambda z: torch.eq(z, z.flip(0)), lambda z: torch.ne(z, 0),
                                lambda z: z == 2j, torch.any, lambda z: z[4:6].all(),
                                torch.count_nonzero],
                         ids=["isnan", "isinf", "isfinite", "logical_not", "logical_xor", "eq",
                              "ne", "eq_scalar", "any", "all", "count_nonzero"])
def test_predicates_of_complex_numbers(fn):
    """A NaN part makes a number NaN, non-zero and unequal to itself; -0 equals 0; a purely
    imaginary number is true."""
    assert check_call(fn, ODD, dtype="complex64") == PASS


def test_a_complex_tensor_padded_with_a_number():
    """Each plane padded with its part of the value (torch.export takes a real one only)."""
    assert check_call(lambda z: torch.nn.functional.pad(z, (1, 2, 0, 1), value=-1.5),
                      _randn(2, 3), dtype="complex64") == PASS


def test_the_running_product_of_an_odd_length_with_a_zero():
    z = _randn(2, 7)
    z[0, 2] = 0
    assert check_call(lambda t: torch.cumprod(t, 1), z, dtype="complex64") == PASS


def test_sinc_at_zero_and_around_it():
    z = torch.tensor([0j, 1e-3 + 1e-3j, 0.5 - 2j, -3 + 0j, complex(0.0, -0.0), 2j], dtype=C64)
    assert check_call(torch.sinc, z, dtype="complex64") == PASS


@pytest.mark.parametrize("weight", [0.25, 0.75, 0.3 - 0.6j], ids=str)
def test_lerp_by_a_number(weight):
    assert check_call(lambda a, b: torch.lerp(a, b, weight), _randn(3, 4), _randn(4),
                      dtype="complex64") == PASS


def test_lerp_by_a_complex_tensor_and_the_distances():
    a, b = _randn(3, 4), _randn(3, 4)
    assert check_call(torch.lerp, a, b, _randn(4), dtype="complex64") == PASS
    b[1, 1] = a[1, 1]  # a zero difference: the modulus's gradient 0 there, as torch's sgn
    assert check_call(torch.nn.functional.l1_loss, a, b, dtype="complex64") == PASS
    assert check_call(lambda x, y: torch.dist(x, y, 3), a, b, dtype="complex64") == PASS
