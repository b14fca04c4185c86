"""The runtime of each executor backend codegen renders for, looked up by the plan's `backend`
(the backend itself is chosen once, by the planner's pipeline: planner.pipeline.BACKENDS).

A runtime is one folder of templates/ behind one interface: its runtime sources (built once
per host and cached), its per-plan package template, the element types it moves, and the ops
it has kernels for. That list is read from the kernel registrations themselves
(`r["Op"] = factory;` inside PLANNER_REGISTER_KERNELS, templates/cpu/runtime/kernel.h), so
adding a kernel is one file and one registration; a test checks it against the built
runtime's `registered_ops()`. So are the dtype sets a kernel takes, where it declares them
(`r["Op"] = {factory, "float32|int64"};`, templates/common/kernel_dtypes.h): `admits` answers
from them, and the executor refuses the same nodes at load.

    templates/common/   schedule data, attrs parser, loader, arena, array checks: every backend
    templates/cpu/      oneDNN + OpenMP kernels, the CPU executor, its bindings
    templates/cuda/     cuDNN, cuBLAS and TVM-generated kernels, the CUDA executor, its bindings

Example:
    >>> cpu, cuda = RUNTIMES["cpu"], RUNTIMES["cuda"]
    >>> "Conv2D" in cpu.ops and "float32" in cpu.dtypes, cuda.module
    (True, 'planner_cuda_rt')
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from codegen.errors import UnsupportedError
from planner.ir.record import Backend

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
COMMON = TEMPLATES / "common"

_REGISTRATION = re.compile(r'\br\["([A-Za-z0-9_]+)"\]\s*=')
# `r["Op"] = {factory, "float32|int64"};`: the dtype sets it takes (common/kernel_dtypes.h)
_DECLARED = re.compile(r'\br\["([A-Za-z0-9_]+)"\]\s*=\s*\{\s*[A-Za-z0-9_:]+\s*,\s*"([^"]*)"\s*\}')
# What a kernel registered without a declaration takes: float32 tensors, int64 indices with
# them (require_f32 in templates/common/runtime.h).
UNDECLARED: tuple[frozenset[str], ...] = (frozenset({"float32"}), frozenset({"float32", "int64"}))
ANY = frozenset({"*"})


@dataclass(frozen=True)
class Runtime:
    """The executor of one backend: where its templates are and what it runs."""

    name: str
    # The enumerator of schedule.h's Backend that its schedules carry.
    code: str
    # The runtime's Python extension module.
    module: str
    # Its runtime's sources (the kernel library, built once per host).
    sources: Path
    package: Path
    dtypes: frozenset[str]
    # Low-precision float types (mixed precision) and the ops whose kernels read and write
    # them; every other kernel of the backend is float32-only.
    low_dtypes: frozenset[str] = frozenset()
    low_precision_ops: frozenset[str] = frozenset()
    # The oldest GPU compute capability (major, minor) whose libraries run a dtype (cuDNN and
    # cuBLAS take bfloat16 from Ampere, 8.0, on); absent: any the runtime builds for.
    min_capability: dict[str, tuple[int, int]] = field(default_factory=dict)
    # What its libraries read from the environment once, when loaded: the package sets these
    # only while the runtime loads (templates/common/package.py.j2): none the user set, and
    # none of `load_choices` when the user set any of them (a choice of their own).
    load_environment: dict[str, str] = field(default_factory=dict)
    load_choices: tuple[str, ...] = ()
    # For a runtime whose kernels declare no dtypes: the ops that take integer or bool tensors
    # only in their Pointwise signatures (its generated kernels; none for an op without one),
    # where `dtypes` alone would admit every such node (the CPU's kernels take more).
    integer_checked_ops: frozenset[str] = frozenset()
    # For a runtime whose kernels declare no dtypes: the ops whose kernels are generated from
    # their Pointwise signatures alone, so a node of another arity (an ApplyMomentum with
    # dampening's step count, an ApplyAdam with amsgrad's v_max) has no kernel there.
    arity_checked_ops: frozenset[str] = frozenset()
    # Ops whose kernels compile (the nvcc tier builds them) but have not yet run on the
    # device: their device tests exist (marked `gpu`) and wait for a machine to run them on.
    # The ops table marks them apart (codegen.ops_table); a kernel leaves the set with the
    # run that passes its tests.
    not_yet_run_ops: frozenset[str] = frozenset()
    kernels: Path = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernels", self.sources / "kernels")

    @cached_property
    def registered(self) -> frozenset[str]:
        """Op names its kernel files register (the runtime's `registered_ops()`)."""
        return frozenset(m.group(1) for f in sorted(self.kernels.glob("*.c[pu]*"))
                         for m in _REGISTRATION.finditer(f.read_text(encoding="utf-8")))

    @cached_property
    def kernel_dtypes(self) -> dict[str, tuple[frozenset[str], ...]]:
        """Per op, the dtype sets its kernel declares it takes (empty: the runtime's kernels
        declare none, and the runtime's `dtypes` hold for every op)."""
        return {m.group(1): tuple(frozenset(one.split(",")) for one in m.group(2).split("|"))
                for f in sorted(self.kernels.glob("*.c[pu]*"))
                for m in _DECLARED.finditer(f.read_text(encoding="utf-8"))}

    def admits(self, op: str, ins: Sequence[str], outs: Sequence[str]) -> bool:
        """Whether the kernel of `op` takes a node whose inputs and outputs have these dtypes
        (the low floats counted as float32: their own rule is `low_precision_ops`).

            >>> cpu = RUNTIMES["cpu"]
            >>> cpu.admits("ReduceSum", ["int64"], ["int64"])
            True
            >>> cpu.admits("Relu", ["int64"], ["int64"])  # its kernel declares nothing
            False
        """
        dtypes = {*ins, *outs}
        if not self.kernel_dtypes:
            if op in self.arity_checked_ops and not self._generated_arity(op, ins, outs):
                return False
            if not dtypes - {"float32", "float64"} - self.low_dtypes:
                return True
            if op not in self.integer_checked_ops:
                return True
            from planner.ops import get_op

            pointwise = get_op(op).pointwise
            return pointwise is not None and f"{','.join(ins)}->{','.join(outs)}" in \
                pointwise.signatures
        have = frozenset("float32" if d in self.low_dtypes else d for d in dtypes)
        return any(s == ANY or s == have for s in self.kernel_dtypes.get(op, UNDECLARED))

    @staticmethod
    def _generated_arity(op: str, ins: Sequence[str], outs: Sequence[str]) -> bool:
        from planner.ops import get_op

        pointwise = get_op(op).pointwise
        return pointwise is not None and any(
            len(s.split("->")[0].split(",")) == len(ins)
            and len(s.split("->")[1].split(",")) == len(outs) for s in pointwise.signatures)

    @cached_property
    def ops(self) -> frozenset[str]:
        """The graph ops it runs: its registrations but the transfers memory planning adds
        (planner.plan.TRANSFER_OPS), which no graph node may name."""
        from planner.plan import TRANSFER_OPS

        return self.registered - frozenset(TRANSFER_OPS.values())


# The ops mixed precision runs in the low types (planner.frontend.passes.precision's
# LOW_PRECISION_OPS and FOLLOW_OPS, and the casts between them): both runtimes have kernels reading
# and writing them. Transpose too: a CPU plan copies a bfloat16 recurrent weight transposed
# (planner.step.for_cores), and both runtimes' Transpose moves elements of any size.
MIXED_OPS: frozenset[str] = frozenset({
    "Cast", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul", "Relu",
    "ReluGrad", "BiasAdd", "BiasAddGrad", "BatchNorm", "BatchNormGrad", "MaxPool", "MaxPoolGrad",
    "AvgPool", "AvgPoolGrad", "Add", "AddN", "Reshape", "Flatten", "Concat", "GlobalAvgPool",
    "Transpose"})

# How long an OpenMP worker whose parallel region ended spins before it sleeps: 3,000 spins
# (libgomp counts `pause` instructions: ~40 us on the 2-core Xeon, 13 ns each). Consecutive ops
# of a lane open their parallel regions microseconds apart, so a team that sleeps at once
# (OMP_WAIT_POLICY=passive, the package's choice until 2026-11-25) wakes its workers at every
# op: uniform plans ran 2-2.5x slower and the optimized ones 3-7% (inception_v3 uniform 174 ->
# 67 ms); 300 spins were too few (151 ms), more than 1,000 gained little. libgomp's own default
# (300,000, ~4 ms) holds a core that a co-running lane or another process needs long after the
# step has moved on (bench/bench_under_load.py; bench/RESULTS.md, "The executor's wait policy").
# OPENBLAS_NUM_THREADS=1: the LAPACK wheel's OpenBLAS (pthreads) starts no thread pool of its
# own. The kernels call it one thread per call from their teams (openblas_set_num_threads(1),
# kernels/lapack.cpp, matmul_f64.cpp), yet with the pool alive every op of a float64 MLP's
# trainer step took ~6 ms, Tanh and dgemm alike, against ~1 ms without it (1024 x 128 layers,
# 2-core Xeon: the step 90 -> 27 ms). A user's own OPENBLAS_NUM_THREADS is kept.
CPU_LOAD_ENVIRONMENT = {"GOMP_SPINCOUNT": "3000", "OPENBLAS_NUM_THREADS": "1"}

RUNTIMES: dict[Backend, Runtime] = {
    "cpu": Runtime("cpu", "CPU", "planner_cpu_rt", TEMPLATES / "cpu" / "runtime",
                   TEMPLATES / "cpu" / "plan",
                   # float32 math, int64 ids and labels, bool masks and conditions (Where,
                   # comparisons), integer arithmetic (kernels/integer.cpp), int16, int8 and
                   # uint8 storage (casts, the integer kernels, embedding ids), float64 where a
                   # kernel declares it (a float64 MLP's step: docs/executor.md, "dtypes")
                   frozenset({"float32", "float64", "int64", "int32", "bool", "int16", "int8",
                              "uint8"}),
                   # oneDNN bf16 / f16 primitives (a float32 fallback where the ISA has none)
                   frozenset({"bfloat16", "float16"}), MIXED_OPS,
                   load_environment=CPU_LOAD_ENVIRONMENT,
                   load_choices=("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")),
    "cuda": Runtime("cuda", "CUDA", "planner_cuda_rt", TEMPLATES / "cuda" / "runtime",
                    TEMPLATES / "cuda" / "plan",
                    frozenset({"float32", "int64", "int32", "bool"}),
                    # cuDNN / cuBLAS in bf16 / f16 with float32 compute (tensor cores),
                    # generated pointwise kernels with float32 arithmetic inside
                    frozenset({"bfloat16", "float16"}), MIXED_OPS, {"bfloat16": (8, 0)},
                    # the CPU's integer kernels (templates/cpu/runtime/kernels/integer.cpp)
                    integer_checked_ops=frozenset({
                        "Add", "Sub", "Mul", "Neg", "Abs", "Max", "Min", "Where", "ReduceSum",
                        "ReduceProd", "ReduceMax", "ReduceMin", "CumSum"}),
                    arity_checked_ops=frozenset({"SGD", "ApplyMomentum", "ApplyAdam"}),
                    # cuFFT (kernels/fft.cu): tests/cuda/test_cuda_fft.py; cuSOLVER
                    # (kernels/eigh.cu): tests/cuda/test_cuda_kernels.py's MatrixEigh cases
                    not_yet_run_ops=frozenset({"FFT", "MatrixEigh"})),
}


def runtime_for(plan) -> Runtime:
    """The runtime that runs `plan` (by its `backend`); UnsupportedError for one this planner
    cannot generate."""
    runtime = RUNTIMES.get(plan.backend)
    if runtime is None:
        raise UnsupportedError(
            f"plan for target {plan.target.name!r} is a {plan.backend} plan, and this planner "
            f"generates executors for {', '.join(sorted(RUNTIMES))} only")
    return runtime
