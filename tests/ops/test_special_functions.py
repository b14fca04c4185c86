"""The special functions (planner/ops/special_table.py and templates/common/special_math.h):
each row's numpy reference (scipy.special's) against torch in float64 on grids holding NaN,
infinities, zeros, poles and the functions' switch points; the gradient ops against
torch.autograd; the C++ header, compiled for the host, against the reference within float32
rounding; the ATen rules (polygamma's orders, modified Bessel functions without a gradient,
round with decimals)."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from planner.ops import get_op
from planner.ops.pointwise_table import NumpyMath
from planner.ops.special_reference import SPECIAL_FUNCTIONS
from planner.ops.special_table import OPS, POLYGAMMA_ORDERS, ROWS

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
COMMON = ROOT / "templates" / "common"
EPS32 = float(np.finfo(np.float32).eps)

VALUES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 1e-6, 0.25, 0.5, -0.5, 1.0, -1.0, 1.5,
          2.0, -2.5, 3.0, 5.0, -5.5, 7.9, 8.0, 8.5, 12.0, -12.0, 25.0, 30.0, 40.0, 90.0]
# polynomial degrees: negative (0), fractions (truncated), the recurrence / closed-form switch
DEGREES = [-3.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.9, 7.0, 12.0, 40.0]
POLYNOMIALS = [r for r in ROWS if r.aten and "polynomial" in r.aten[0]]


def _torch_fn(row):
    if row.name.startswith("Polygamma"):
        n = int(row.name.removeprefix("Polygamma"))
        return lambda x: torch.polygamma(n, x)
    if row.name.startswith("Frexp"):
        part = 0 if row.name == "FrexpMantissa" else 1
        return lambda x: torch.frexp(x)[part]
    name, overload = row.aten[0].split(".")
    return getattr(getattr(torch.ops.aten, name), overload)


def _grid(row) -> list[np.ndarray]:
    if row in POLYNOMIALS:
        cols = list(zip(*itertools.product(VALUES, DEGREES), strict=True))
    elif row.arity == 2:
        cols = list(zip(*itertools.product(VALUES, repeat=2), strict=True))
    else:
        cols = [VALUES]
    return [np.array(c, dtype=np.float64) for c in cols]


def _assert_same(ours: np.ndarray, want: np.ndarray, rtol: float, what: str,
                 atol: float = 1e-300) -> None:
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(want), err_msg=f"{what}: NaN")
    inf = np.isinf(want)
    np.testing.assert_array_equal(ours[inf], want[inf], err_msg=f"{what}: infinities")
    finite = np.isfinite(want)
    np.testing.assert_allclose(ours[finite], want[finite], rtol=rtol, atol=atol, err_msg=what)


# torch's float64 Bessel and Airy functions are Cephes's rational approximations, good to about
# 1e-8 absolute (2e-7 near Ai's and J0's zeros); scipy's, the reference, to double precision
OSCILLATING = {"BesselJ0", "BesselJ1", "BesselY0", "BesselY1", "AiryAi"}
# torch's incomplete gamma functions agree with scipy's to about 2e-9 relative at a ~ 30
GAMMA = {"Igamma", "Igammac"}


def _compared(row, xs: list[np.ndarray], want: np.ndarray) -> np.ndarray:
    """Where the reference is held to torch's float64 value (the others: see the tests below)."""
    keep = np.ones(want.shape, bool)
    if row.name.startswith("Polygamma"):
        # torch's values at the poles come from sin(pi x) rounding away from 0 (finite, huge);
        # at +inf its zeta(n + 1, inf) is NaN, and for n = 1 at -inf its reflection is NaN
        keep &= np.isfinite(xs[0]) & ~(np.abs(want) > 1e30)
    if row.name == "Igammac":  # torch's series at a = 1e-30 drops Euler's gamma (~1% off)
        keep &= ~(xs[0] < 1e-20)
    return keep


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_reference_is_torchs(row):
    xs = _grid(row)
    ours = get_op(row.name).reference(xs, {})[0]
    want = _torch_fn(row)(*[torch.tensor(x) for x in xs]).numpy()
    keep = _compared(row, xs, want)
    ours, want = ours[keep], want[keep]
    if row.name in OSCILLATING:
        np.testing.assert_allclose(ours, want, rtol=0, atol=3e-7, err_msg=row.name)
        return
    if row in POLYNOMIALS:  # torch's cos(n acos x) form is 4e-16 off at the zeros
        _assert_same(ours, want, 1e-9, row.name, atol=1e-12)
        return
    _assert_same(ours, want, 1e-8 if row.name in GAMMA else 1e-9, row.name)


def test_polynomials_at_infinity_and_beyond_their_degrees():
    """torch's recurrence at +-inf: +-inf up to degree 2, NaN above (inf - inf); 0 below
    degree 0, for a NaN degree (torch's Hermite rule) and from 2^63 (torch's int64 conversion);
    NaN above degree 128 for Hermite's (torch's float32 limit) and above 65536 for the others
    (a loop bound)."""
    x = np.array([np.inf, -np.inf, np.inf, -np.inf, np.inf, 0.3, 0.3, 0.3, 0.3, 0.3])
    n = np.array([3.0, 3.0, 2.0, 2.0, 0.0, -1.0, np.nan, 129.0, 70000.0, 1e20])
    ref = {r.name: get_op(r.name).reference([x, n], {})[0] for r in POLYNOMIALS}
    for name, y in ref.items():
        np.testing.assert_array_equal(y[:5], [np.nan, np.nan, np.inf, np.inf, 1], err_msg=name)
        assert y[5] == 0 and y[6] == 0 and np.isnan(y[8]) and y[9] == 0, name
        assert np.isnan(y[7]) == name.startswith("Hermite"), name


@pytest.mark.parametrize("row", POLYNOMIALS + [r for r in ROWS if r.name == "Zeta"],
                         ids=lambda r: r.name)
def test_overflow_and_huge_arguments_as_torchs(row):
    """OpInfo's extremal reference inputs: degrees and arguments of 501 to 1e20 (recurrences
    that overflow and meet inf - inf, a degree past int64), exactly torch's NaN, inf and 0
    (but for the degree 4.9884e6, past the loop bound: NaN, where torch loops 5e6 times)."""
    big = np.array([-1e20, -4.9884e6, -1.3438e4, -1001.2, -501.0, 501.0, 1001.2, 1.3438e4,
                    4.9884e6, 1e20])
    second = big[big != 4.9884e6] if row in POLYNOMIALS else big
    xs = [np.repeat(big, second.size), np.tile(second, big.size)]
    ours = get_op(row.name).reference(xs, {})[0]
    want = _torch_fn(row)(*[torch.tensor(x) for x in xs]).numpy()
    _assert_same(ours, want, 1e-9, row.name)


def test_polygamma_poles_and_limits():
    x = np.array([-1.0, -12.0, 0.0, np.inf])
    for n in POLYGAMMA_ORDERS:
        y = get_op(f"Polygamma{n}").reference([x], {})[0]
        assert np.isinf(y[:3]).all() and y[3] == 0, (n, y)


GRAD_ROWS = [r for r in ROWS if r.grads is not None]
DOMAINS = {"positive": (0.5, 6.0), "sym": (-0.95, 0.95), "unit": (0.02, 0.98),
           "normal": (-6.0, 6.0)}


@pytest.mark.parametrize("row", GRAD_ROWS, ids=[r.name for r in GRAD_ROWS])
def test_gradients_are_torch_autograds(row):
    rng = np.random.default_rng(5)
    xs = [rng.uniform(*DOMAINS[d], size=(6, 7)) for d in row.inputs_domain]
    xs[0][0, 0] = 0.0 if row.inputs_domain[0] == "normal" else xs[0][0, 0]  # I1's x = 0 case
    dy = rng.standard_normal((6, 7))
    ts = [torch.tensor(x, requires_grad=d is not None) for x, d in zip(xs, row.grads,
                                                                         strict=True)]
    y = _torch_fn(row)(*ts)
    y.backward(torch.tensor(dy))
    for k, d in enumerate(row.grads):
        if d is None:
            continue  # torch has none (igamma's a): the planner gives none either
        ins = [dy, *xs, *([y.detach().numpy()] if row.uses_y else [])]
        got = get_op(row.grad_name(k)).reference(ins, {})[0]
        np.testing.assert_allclose(got, ts[k].grad.numpy(), rtol=1e-8, atol=1e-12,
                                   err_msg=f"{row.name} input {k}")


# ---- the C++ header against the reference ---------------------------------------------------

_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "special_math.h"
int main() {
  float a, b;
  while (std::scanf("%a %a", &a, &b) == 2) {
    std::printf("%a\n", static_cast<double>(CALL));
  }
}
"""


def _header_values(name: str, arity: int, xs: list[np.ndarray], tmp_path: Path) -> np.ndarray:
    """planner_<name>f of special_math.h on float32 inputs, built and run on the host."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    call = f"{name}f(a)" if arity == 1 else f"{name}f(a, b)"
    src = tmp_path / f"{name}.cpp"
    src.write_text(_PROGRAM.replace("CALL", call))
    exe = tmp_path / name
    done = subprocess.run([cxx, "-std=c++17", "-O2", "-Wall", "-Werror", f"-I{COMMON}",
                           str(src), "-o", str(exe)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    pairs = zip(xs[0], xs[1] if arity == 2 else xs[0], strict=True)
    text = "".join(f"{float(a).hex()} {float(b).hex()}\n" for a, b in pairs)
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
    return np.array([float.fromhex(v) for v in out.stdout.split()], dtype=np.float32)


def _header_cases():
    """(LIBM name, arity, a row's grid): each function of the header once."""
    seen = {}
    for row in ROWS:
        name = _called(row)
        if name is not None and name not in seen:
            seen[name] = row
    return [pytest.param(name, row, id=name) for name, row in sorted(seen.items())]


def _called(row) -> str | None:
    """The header function a row's formula calls first (its one call, but for LogNdtr)."""
    calls = []

    class Spy(NumpyMath):
        @staticmethod
        def call(name, *xs):
            calls.append(name)
            return NumpyMath.call(name, *xs)

    with np.errstate(all="ignore"):
        row.formula(Spy(), [np.float64(0.5)] * row.arity, {})
    return next((c for c in calls if c.startswith("planner_")), None)


@pytest.mark.parametrize("name,row", _header_cases())
def test_header_matches_the_reference(name, row, tmp_path):
    """float32 in, float32 out: NaN and infinities where the reference has them, finite
    values within a few float32 roundings of the float64 reference (the header computes in
    double and rounds once)."""
    arity = row.arity
    if name == "planner_polygamma":  # (n, x): every order a row or its gradient calls
        x = np.array(VALUES, np.float32)
        for n in (*POLYGAMMA_ORDERS, POLYGAMMA_ORDERS[-1] + 1):
            got = _header_values(name, 2, [np.full(x.shape, n, np.float32), x], tmp_path)
            want = SPECIAL_FUNCTIONS[name](float(n), x.astype(np.float64))
            _check_float32(got, want, f"{name}({n})")
        return
    xs = [x.astype(np.float32) for x in _grid(row)]
    got = _header_values(name, arity, xs, tmp_path)
    want = SPECIAL_FUNCTIONS[name](*[x.astype(np.float64) for x in xs])
    _check_float32(got, want, name, unit=row.name in OSCILLATING or row in POLYNOMIALS)


def _check_float32(got: np.ndarray, want64: np.ndarray, what: str, unit: bool = False) -> None:
    """`unit`: a function oscillating through zero on a scale of 1 (Bessel, Airy, the
    polynomials on [-1, 1]), whose rounding is relative to that scale near its zeros (torch's
    algorithms, which the header ports, are good to a few 1e-7 there)."""
    near = np.asarray(want64).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(near), err_msg=f"{what}: NaN")
    inf = np.isinf(near)
    np.testing.assert_array_equal(got[inf], near[inf], err_msg=f"{what}: infinities")
    ok = np.isfinite(near)
    err = np.abs(got[ok].astype(np.float64) - want64[ok])
    tol = 4 * EPS32 * (np.abs(want64[ok]) + (1.0 if unit else 0.0)) + 1e-37
    assert (err <= tol).all(), (what, got[ok][err > tol][:4], want64[ok][err > tol][:4])


# ---- the generated CUDA kernels, run on the host ----------------------------------------------

GENERATED = ROOT / "templates" / "cuda" / "runtime" / "kernels" / "generated"
_ENTRY = re.compile(r'\{"(\w+)", "\w+", "", ([01]), 1, 256, \(const void\*\)(\w+), "([^"]*)"')
_HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <cstdint>
struct Index { unsigned x; };
static Index blockIdx, threadIdx;
#define __global__
#define __launch_bounds__(n)
#include "tvm_pointwise.cuh"
template <typename F> void launch(int64_t n, F f) {
  for (unsigned b = 0; b < (n + 255) / 256; ++b)
    for (unsigned t = 0; t < 256; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      f();
    }
}
int main() {
BODY
}
"""
N = 64


def _kernel_inputs(op: str, n_in: int, rng) -> list[np.ndarray]:
    from planner.ops.pointwise_table import TABLE
    from tests.codegen.pointwise_cases import derive

    row = TABLE[op]
    forward = next((r for r in ROWS for k in range(r.arity)
                    if r.grads and r.grads[k] not in (None, 1) and r.grad_name(k) == op), None)
    domains = list((forward or row).inputs_domain)
    if forward is not None:  # [dy, x.., (y)]
        domains = ["normal", *domains] + (["normal"] if forward.uses_y else [])
    xs = [rng.uniform(*DOMAINS.get(d, (-6.0, 6.0)), size=N).astype(np.float32)
          for d in domains[:n_in]]
    xs[-1][:4] = [np.nan, np.inf, -np.inf, 0.0] if forward is None else xs[-1][:4]
    return derive(op, xs)


def test_generated_cuda_kernels_of_the_rows_on_the_host(tmp_path):
    """Each special row's generated CUDA kernel (and its gradient ops'), flat (rank 0) or
    broadcast at rank 1 with contiguous operands, built for the host with special_math.h (the
    launch qualifiers defined away, every (block, thread) run in turn) against the op's
    reference: the TVM source calls the header's functions with the formula's arguments."""
    from tests.codegen.op_cases import check_variant

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    text = (GENERATED / "tvm_pointwise.cuh").read_text()
    entries = {op: (int(rank), sym, args) for op, rank, sym, args in _ENTRY.findall(text)
               if op in OPS}
    assert set(entries) == OPS, sorted(OPS - set(entries))
    rng = np.random.default_rng(11)
    body, cases = [], {}
    for k, (op, (rank, sym, args)) in enumerate(sorted(entries.items())):
        names = [a.split(":")[0] for a in args.split(",")]  # (inputs it does not read left out)
        xs = _kernel_inputs(op, get_op(op).arity, rng)
        cases[op] = xs
        for j, x in enumerate(xs):
            values = ", ".join(float(v).hex() if np.isfinite(v) else
                               ("NAN" if np.isnan(v) else ("INFINITY" if v > 0 else "-INFINITY"))
                               for v in x.astype(np.float64))
            body.append(f"  static float c{k}_in{j}[{N}] = {{{values}}};")
        out_type = "int32_t" if get_op(op).pointwise.signatures[0].endswith("int32") else "float"
        body.append(f"  static {out_type} c{k}_out[{N}];")
        call = ", ".join(f"c{k}_{name}" if name.startswith("in") else f"c{k}_out"
                         if name.startswith("out") else str(N) if name == "n" else "1"
                         for name in names)
        body.append(f"  launch({N}, [&] {{ {sym}({call}); }});")
        body.append(f'  for (int i = 0; i < {N}; ++i) std::printf("%a\\n", '
                    f"static_cast<double>(c{k}_out[i]));")
        assert rank in (0, 1)
    src = tmp_path / "main.cpp"
    src.write_text(_HARNESS.replace("BODY", "\n".join(body)))
    exe = tmp_path / "main"
    done = subprocess.run([cxx, "-std=c++17", "-O1", "-w", f"-I{GENERATED}", f"-I{COMMON}",
                           str(src), "-o", str(exe)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    got = np.array([float.fromhex(v) for v in out]).reshape(len(cases), N)
    for k, (op, xs) in enumerate(sorted(cases.items())):
        dtype = get_op(op).pointwise.signatures[0].split("->")[1]
        try:
            check_variant(op, {}, xs, [got[k].astype(dtype)], 16 * EPS32)
        except AssertionError as e:
            raise AssertionError(f"{op}: {e}") from None


# ---- the ATen rules ------------------------------------------------------------------------------

class _Apply(torch.nn.Module):
    def __init__(self, f) -> None:
        super().__init__()
        self.f = f
        self.p = torch.nn.Parameter(torch.tensor([0.3, 1.7, 2.5]))

    def forward(self):
        return self.f(self.p)


def _ops_of(f) -> list[str]:
    from planner.importers.torch.convert import convert

    imported = convert(torch.export.export(_Apply(f), ()))
    return [node.op for node in imported.graph.nodes]


def test_polygamma_orders_pick_their_rows_and_higher_ones_are_refused():
    from planner.importers.torch.context import TorchImportError

    assert "Digamma" in _ops_of(lambda p: torch.polygamma(0, p))
    assert "Polygamma3" in _ops_of(lambda p: torch.special.polygamma(3, p))
    with pytest.raises(TorchImportError, match=r"aten\.polygamma\.default \(order 5: the "
                                               r"planner has orders 0 to 4\)") as err:
        _ops_of(lambda p: torch.polygamma(5, p))
    assert "\n" not in str(err.value)


def test_modified_bessel_i_has_no_gradient_as_torchs():
    ops = _ops_of(torch.special.modified_bessel_i0)
    assert ops.index("I0") < ops.index("StopGradient")
    assert "I1" in _ops_of(torch.special.modified_bessel_i1)
