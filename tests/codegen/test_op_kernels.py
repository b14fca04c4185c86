"""Every CPU kernel against its op's numpy reference, one op at a time, on clean inputs and on
inputs holding NaN, +inf and -inf: the executor must give NaN, inf and finite values exactly
where the float32 reference does (a kernel that turns NaN into a number hides a diverged run),
and the finite values within float32 error of the float64 reference.

All cases (tests/codegen/op_cases.py) are nodes of one inference graph (inputs named per
case), so one plan and one build cover them. The table must cover every op the CPU backend
registers (codegen.backends; that the built runtime registers the same ops is
tests/codegen/test_build.py's check).
"""

from __future__ import annotations

import numpy as np
import pytest

from codegen.backends import RUNTIMES
from planner.ops import get_op
from planner.ops.collective import COLLECTIVE_OPS
from tests.codegen.op_cases import CASES, VARIANTS, check_variant, run_variants


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    return run_variants(tmp_path_factory.mktemp("ops") / "op_kernels", "cpu", VARIANTS)


def test_the_cases_cover_every_cpu_op():
    # The collectives need a process group: tests/codegen/test_data_parallel.py runs them
    # over gloo.
    ops = RUNTIMES["cpu"].ops - COLLECTIVE_OPS
    assert set(CASES) == set(ops), sorted(set(ops) ^ set(CASES))


# float32 kernels: a few ulps per element, more where a sum or a library's polynomial
# approximation (oneDNN's exp, erf, tanh) enters.
CPU_TOL = 2e-6 * 8


@pytest.mark.parametrize("label,op,attrs,xs", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_kernel_matches_reference(label, op, attrs, xs, executed):
    check_variant(op, attrs, xs, executed[label], CPU_TOL)


U32 = 2.0 ** -24  # float32's unit roundoff


@pytest.mark.parametrize("label", ["Gelu.2", "GeluGrad.2"])
def test_gelu_bound(label, executed):
    """The erf form's float32 pass (eltwise.cpp) within its stated bound, element by element,
    over (-12, 12): Phi(x) = erfc(-x / sqrt 2) / 2 with erfc from Abramowitz & Stegun 7.1.26
    (absolute error <= 1.5e-7), plus float32 rounding in its evaluation (t, the degree-5
    Horner steps, exp: <= 21 u absolute on erfc <= 2) and the final products; so
    |dPhi| <= 0.75e-7 + 12 u, |dGelu| <= |x| dPhi + u |y|, and for the slope Phi + x phi, whose
    x phi term is exact to a few u, |dslope| <= dPhi + 2 u."""
    op, attrs, xs = next((op, a, xs) for lab, op, a, xs in VARIANTS if lab == label)
    got = executed[label][0].astype(np.float64)
    opdef = get_op(op)
    want = opdef.reference([x.astype(np.float64) for x in xs], opdef.normalize_attrs(attrs))[0]
    d_phi = 0.75e-7 + 12 * U32
    if op == "Gelu":
        x = xs[0].astype(np.float64)
        bound = np.abs(x) * d_phi + U32 * np.abs(want)
    else:
        dy = xs[0].astype(np.float64)
        bound = np.abs(dy) * (d_phi + 2 * U32) + U32 * np.abs(want)
    excess = np.abs(got - want) - bound
    worst = np.unravel_index(excess.argmax(), excess.shape)
    assert (excess <= 0).all(), f"worst excess {excess.max():.2e} at {worst}"
