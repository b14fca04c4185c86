"""Every op x dtype set the CPU kernels declare runs on the CPU executor and gives the op's numpy
reference exactly: what codegen.support admits for the CPU backend is what the registrations
declare (`r["Op"] = {factory, "float32|int64"}`, templates/common/kernel_dtypes.h), so this walk
is what makes each declaration true (an int64 ReduceSum once passed the check and failed at run
time). The sets with float64 are test_float64.py's: held to the reference within float64
rounding (libm's and numpy's transcendental functions differ in the last bit), not exactly.

The walk is complete, not a sample: for each declared op, each of its sets but float32 alone
(test_op_kernels.py runs every op in float32; a loss's float32 with its int64 labels too)
and, for a "*" (any dtype) declaration, each of int64, int32, bool, int16, int8 and uint8;
plus every Cast between any two of them, float32,
bfloat16 and float16 (a low float counts as float32 in a declaration: mixed precision has its
own rule, codegen.backends.MIXED_OPS; a low input is made by a Cast in the graph). A node of
each is made from the op's cases in tests/codegen/op_cases.py, its inputs retyped within the
set (small integers, zeros among them); all of them are one graph, planned, built and run
once. Their values are integers, bools or floats holding integers (a Cast's, fractions in
(-300, 300): a conversion rounds once), so every output is compared exactly.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from codegen import support
from codegen.backends import ANY, RUNTIMES
from codegen.errors import UnsupportedError
from planner.dtypes import INTEGER_DTYPES
from planner.graph import GraphBuilder, check_graph
from planner.ops import TensorType, get_op
from planner.ops.base import OpError
from tests.codegen.helpers import build_module
from tests.codegen.integer_cases import derive  # divisors kept from zero
from tests.codegen.op_cases import VARIANTS, nodes_graph

CPU = RUNTIMES["cpu"]
PLAIN = ("float32", "int64", "int32", "bool", "int16", "int8", "uint8")
LOW = ("bfloat16", "float16")  # not fed (numpy takes no bfloat16 over DLPack): made in-graph


def _values(x: np.ndarray, dtype: str, rng) -> np.ndarray:
    """x's values as `dtype`: x itself where it has it, its values where x is an integer
    tensor whose values `dtype`, another integer type, holds (ids and labels: their range is
    the op's), else small integers with zeros among them (bool: 0 or 1)."""
    if str(x.dtype) == dtype:
        return x
    if x.dtype.kind in "iu" and dtype in INTEGER_DTYPES and x.size and \
            np.iinfo(dtype).min <= x.min() and x.max() <= np.iinfo(dtype).max:
        return x.astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, x.shape).astype(bool)
    return rng.integers(-4, 5, x.shape).astype(dtype)


def _sample(op: str, want: frozenset[str], rng):
    """(attrs, inputs) of a node of `op` whose tensors' dtypes are exactly `want`, from the op's
    cases: one in those dtypes as it is, else one with its inputs retyped within `want`; None
    if none fits."""
    opdef = get_op(op)
    cases = [(attrs, xs) for label, case_op, attrs, xs in VARIANTS
             if case_op == op and ".nan" not in label]
    cases.sort(key=lambda c: not {str(x.dtype) for x in c[1]} <= want)  # as they are, first
    for attrs, xs in cases:
        attrs = dict(attrs)
        if "dtype" in opdef.attrs and len(want) == 1:  # Fill: the dtype it writes
            attrs["dtype"] = next(iter(want))
        for dtypes in itertools.product(sorted(want), repeat=len(xs)):
            typed = list(zip(xs, dtypes, strict=True))
            try:
                outs = opdef.infer([TensorType(x.shape, d) for x, d in typed],
                                   opdef.normalize_attrs(attrs))
            except OpError:
                continue
            if frozenset(dtypes) | {t.dtype for t in outs} == want:
                return attrs, derive(op, [_values(x, d, rng) for x, d in typed])
    return None


# Losses that read int64 labels: float32 with int64 is their float32 case (declared beside
# their float64 one), which test_op_kernels.py holds to float32's tolerance as every op's
# float32 alone (a loss's sums are not exact).
LABELLED_LOSSES = frozenset({"SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad", "NLLLoss",
                             "NLLLossGrad"})


def _walk():
    """(label, op, attrs, inputs) for every declared set, and the declared sets none fits."""
    rng = np.random.default_rng(0)
    samples, missing = [], []
    for op, sets in sorted(CPU.kernel_dtypes.items()):
        if op not in CPU.ops:
            continue  # the transfers memory planning adds
        wanted = []
        for s in sets:
            if s == ANY:
                wanted += [frozenset({d}) for d in PLAIN[1:]]
            elif s != {"float32"} and "float64" not in s and not (
                    op in LABELLED_LOSSES and s == {"float32", "int64"}):
                wanted.append(s)
        if op == "Cast":  # from values in (-300, 300), fractions too: truncation and wrapping
            for a, b in itertools.product(PLAIN, PLAIN + LOW):
                if a == b:
                    continue
                x = rng.uniform(-300, 300, (3, 5)).astype(np.float32)
                x = get_op("Cast").reference([x], {"to": a})[0]
                samples.append((f"Cast.{a}.{b}", op, {"to": b}, [x]))
            continue
        for s in wanted:
            found = _sample(op, s, rng)
            if found is None:
                missing.append(f"{op} in {','.join(sorted(s))}")
            else:
                samples.append((f"{op}.{'.'.join(sorted(s))}", op, *found))
    return samples, missing


SAMPLES, MISSING = _walk()


def test_every_declared_set_has_a_node():
    assert not MISSING, f"no case of op_cases.py fits: {MISSING}"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    graph, feeds, outs = nodes_graph("kernel_dtypes", SAMPLES)
    support.check(graph, CPU)  # everything walked is admitted
    got = build_module(graph, tmp_path_factory.mktemp("dtypes") / "kernel_dtypes").Executor() \
        .forward(feeds)
    return {label: [got[o] for o in names] for label, names in outs.items()}


# Factorizations the CPU runs through LAPACK in float32 (kernels/lapack.cpp), whose references
# factor in float64: their float outputs within test_op_kernels.py's float32 tolerance (a few
# ulps of the scale per element, for these well-conditioned cases), the rest (info, pivots,
# NaN) exact.
LAPACK_FLOATS = {"MatrixInverse", "MatrixSolve", "Cholesky", "MatrixLuFactor", "MatrixLdlFactor",
                 "MatrixLdlSolve"}


@pytest.mark.parametrize("label,op,attrs,xs", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_declared_dtypes_run_exactly(label, op, attrs, xs, executed):
    opdef = get_op(op)
    want = opdef.reference(list(xs), opdef.normalize_attrs(attrs))
    for k, (got, ref) in enumerate(zip(executed[label], want, strict=True)):
        got, ref = np.asarray(got), np.asarray(ref)
        assert got.dtype == ref.dtype and got.shape == ref.shape, f"output {k}"
        if op in LAPACK_FLOATS and got.dtype.kind == "f":
            assert np.array_equal(np.isnan(got), np.isnan(ref)), f"output {k}: NaN"
            scale = float(np.nanmax(np.abs(ref), initial=1e-30))
            np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * 8 * scale,
                                       err_msg=f"output {k}")
            continue
        assert np.array_equal(got, ref, equal_nan=got.dtype.kind == "f"), f"output {k}"


def test_the_check_refuses_what_no_kernel_declares():
    """An int32 ReduceAny is a valid op (any dtype is true where non-zero), but the CPU fold
    reads float32, int64 and bool only: the check says so before anything is built."""
    b = GraphBuilder("undeclared")
    x = b.input("x", (3, 4), "int32")
    y = b.op_n("ReduceAny", [x], {"axes": [1]})
    graph = check_graph(b.build(outputs=y))
    with pytest.raises(UnsupportedError, match=r"no kernel for op ReduceAny in bool,int32"):
        support.check(graph, CPU)
    assert not CPU.admits("ReduceAny", ["int32"], ["bool"])
    assert CPU.admits("ReduceSum", ["int64"], ["int64"])
    # a kernel without a declaration: float32, with int64 indices
    assert CPU.admits("Embedding", ["int64", "float32"], ["float32"])
    assert not CPU.admits("Relu", ["int64"], ["int64"])


def test_cuda_refuses_the_cpus_integer_kernels():
    """The CUDA runtime's kernels declare no dtypes: the ops the CPU's integer kernels widened
    take integers there only in their generated (Pointwise) signatures."""
    cuda = RUNTIMES["cuda"]
    assert not cuda.admits("ReduceSum", ["int64"], ["int64"])
    assert not cuda.admits("Add", ["int32", "int32"], ["int32"])
    assert cuda.admits("Add", ["int64", "int64"], ["int64"])
    assert cuda.admits("Where", ["bool", "int64", "int64"], ["int64"])
    assert not cuda.admits("Where", ["bool", "bool", "bool"], ["bool"])
    assert "BitwiseAnd" not in cuda.ops


def test_the_executor_refuses_at_load_what_the_kernel_does_not_declare(tmp_path, monkeypatch):
    """The registration's declaration is the executor's too: the same int32 ReduceAny, rendered
    past the plan-time check, is refused when the executor loads, naming the op and both sets,
    before any step runs."""
    b = GraphBuilder("undeclared_at_load")
    x = b.input("x", (3, 4), "int32")
    graph = check_graph(b.build(outputs=b.op_n("ReduceAny", [x], {"axes": [1]})))
    monkeypatch.setattr(support, "check", lambda *args, **kwargs: None)
    module = build_module(graph, tmp_path / "undeclared_at_load")
    with pytest.raises(RuntimeError, match=r"ReduceAny.*the kernel takes dtypes "
                                           r"float32,bool\|int64,bool\|bool, not bool,int32"):
        module.Executor()


def test_casts_from_the_low_floats(tmp_path):
    """bfloat16 and float16 to every other dtype (the low value made in the graph from float32:
    feeds cannot be bfloat16), exactly as the reference."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-300, 300, (3, 5)).astype(np.float32)
    b = GraphBuilder("low_casts")
    name = b.input("x", x.shape, "float32")
    outs, want = [], []
    cast = get_op("Cast")
    for low in LOW:
        (narrow,) = b.op_n("Cast", [name], {"to": low})
        for to in PLAIN + tuple(d for d in LOW if d != low):
            outs += b.op_n("Cast", [narrow], {"to": to})
            want.append(cast.reference(cast.reference([x], {"to": low}), {"to": to})[0])
    graph = check_graph(b.build(outputs=outs))
    got = build_module(graph, tmp_path / "low_casts").Executor().forward({name: x})
    for o, w in zip(outs, want, strict=True):
        assert np.asarray(got[o]).dtype == w.dtype and np.array_equal(got[o], w), o
