"""The analytical cost model: the fallback for signatures the cost table has not measured.

A roofline gives the parallel work's time at k threads from the op's FLOPs and bytes (its
`flops` and `bytes_moved` in the op registry) and the target's peaks; a scaling curve per op
type adds what stops small ops scaling (seed 002, Fig. 1 and Table II): a serial fraction, and a
thread spawn and synchronisation overhead that grows with the team.

    roofline(k) = max(flops / (k * peak_flops[math] / cores * efficiency),
                      bytes / min(memory_bandwidth, k * core_bandwidth))
    t(k) = call + serial * roofline(1) + (1 - serial) * roofline(k)
           + spawn * (k - 1) + sync * ceil(log2 k)

The optimum lies near k* = sqrt((1 - serial) * roofline(1) / spawn): a 1 ms op peaks at some
tens of threads, a 10 us op at a few. The model cannot tell the affinities apart; measurements
can. GPU time is launch overhead plus the roofline on the device.

peak_flops[math] is the target's peak for the type the op computes in (`OpSignature.math`): a
bfloat16 convolution on an H100's tensor cores at ~989 TFLOP/s, not float32's 67; bytes follow
the tensors' dtypes already, so a memory-bound op gains only from its smaller bytes.

Example:
    >>> from planner.target import preset
    >>> work = Work(flops=1 << 20, bytes=8 << 20)
    >>> t1, t8 = (cpu_time(work, k, preset("knl-7250"), curve_for("Relu")) for k in (1, 8))
    >>> 4 < t1 / t8 < 8
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from planner.costs.signature import OpSignature
from planner.ir.graph import Record
from planner.ops import get_op
from planner.target.records import GPU, Target


class ScalingCurve(Record):
    """How one op type scales with threads. Times in seconds."""

    # Fraction of the machine's peak FLOP/s the op's kernel reaches when compute-bound.
    efficiency: float = Field(gt=0, le=1)
    # Fraction of the single-thread time that does not parallelise.
    serial_fraction: float = Field(ge=0, lt=1)
    # Per extra thread: waking and binding it (fork), one at a time.
    spawn_seconds: float = Field(default=0.4e-6, ge=0)
    # Per doubling of the team: one level of the join barrier's tree.
    sync_seconds: float = Field(default=1.0e-6, ge=0)


DEFAULT_CURVE = ScalingCurve(efficiency=0.3, serial_fraction=0.05)

# One curve per cost class (an op's `cost_class`, planner.ops). Convolutions and GEMMs reach a
# good fraction of peak and parallelise well; element-wise ops are bandwidth-bound;
# reductions, pools and normalisation have a combining step; scatter-adds and losses have more
# serial work.
CLASS_CURVES: dict[str, ScalingCurve] = {
    "conv": ScalingCurve(efficiency=0.5, serial_fraction=0.02),
    "gemm": ScalingCurve(efficiency=0.6, serial_fraction=0.01),
    "elementwise": ScalingCurve(efficiency=0.2, serial_fraction=0.01),
    "reduction": ScalingCurve(efficiency=0.2, serial_fraction=0.05),
    "data-movement": ScalingCurve(efficiency=0.2, serial_fraction=0.02),
    "scatter": ScalingCurve(efficiency=0.2, serial_fraction=0.2),
}


def curve_for(op: str, curves: dict[str, ScalingCurve] | None = None) -> ScalingCurve:
    """The op type's scaling curve: `curves[op]` where given (a calibrated model), else its
    cost class's (DEFAULT_CURVE for unknown ops and ops of no class)."""
    if curves and op in curves:
        return curves[op]
    from planner.ops import REGISTRY

    opdef = REGISTRY.get(op)
    return CLASS_CURVES.get(opdef.cost_class, DEFAULT_CURVE) if opdef else DEFAULT_CURVE


@dataclass(frozen=True)
class Work:
    """What an op does, for the roofline: FLOPs, bytes moved, and the math type the FLOPs run
    in (which of the target's peaks applies). `note` says if guessed."""

    flops: int
    bytes: int
    note: str = ""
    math: str = "float32"


def op_work(signature: OpSignature) -> Work:
    """FLOPs and bytes from the op registry; never raises.

    An op the registry does not know, or inputs its shape rule rejects, gets zero FLOPs and
    twice its input bytes (read once, an output of that size written), with a note saying why.
    """
    ins = signature.input_types
    try:
        opdef = get_op(signature.op)
        outs = opdef.infer(ins, signature.attrs)
        return Work(flops=int(opdef.flops(ins, outs, signature.attrs)),
                    bytes=int(opdef.bytes_moved(ins, outs, signature.attrs)),
                    math=signature.math)
    except Exception as e:  # noqa: BLE001 - the fallback must answer for any signature
        return Work(flops=0, bytes=2 * sum(t.nbytes for t in ins),
                    note=f"{signature.op}: no FLOP/byte rule ({e}); time from input bytes only")


# Fixed cost of any call: dispatching the kernel, touching its descriptors.
CALL_SECONDS = 1e-6
# Fixed cost of a GPU kernel launch (the op type's curve gives the fraction of peak it reaches).
GPU_LAUNCH_SECONDS = 5e-6


def cpu_time(work: Work, threads: int, target: Target, curve: ScalingCurve) -> float:
    """Predicted seconds of one run on `threads` cores of the target's CPU (formula above)."""
    return float(cpu_times(work, threads, target, curve)[-1])


def cpu_times(work: Work, cores: int, target: Target, curve: ScalingCurve) -> np.ndarray:
    """`cpu_time` on 1, 2, ..., `cores` threads, as one array (a scheduler prices every thread
    count of every signature: Inception-v3 on 68 cores, 21,000 of them)."""
    return cpu_times_of([work], [curve], cores, target)[0]


def cpu_times_of(works: Sequence[Work], curves: Sequence[ScalingCurve], cores: int,
                 target: Target) -> np.ndarray:
    """`cpu_times` of many ops at once: row i is works[i]'s under curves[i]. Each element is
    the same floats in the same order as one op's alone (per-op numbers are columns,
    broadcast), in one array expression instead of one per op."""
    cpu = target.cpu
    if cpu is None:
        raise ValueError(f"target {target.name!r} has no CPU")

    def column(values: list[float]) -> np.ndarray:
        return np.array(values, dtype=np.float64).reshape(-1, 1)

    core_flops = column([cpu.peak_flops_for(w.math) / target.cores * c.efficiency
                         for w, c in zip(works, curves, strict=True)])
    k = np.arange(1, cores + 1, dtype=np.float64)
    bandwidth = np.minimum(cpu.memory_bandwidth, k * cpu.core_bandwidth)
    # The roofline at every count; its first column is one thread's.
    roofline = np.maximum(column([w.flops for w in works]) / (k * core_flops),
                          column([w.bytes for w in works]) / bandwidth)
    s = column([c.serial_fraction for c in curves])
    # ceil(log2(k)) exactly, from the integers: the depth of a reduction tree over k threads.
    depth = np.array([(j - 1).bit_length() for j in range(1, cores + 1)], dtype=np.float64)
    return (CALL_SECONDS + s * roofline[:, :1] + (1 - s) * roofline
            + column([c.spawn_seconds for c in curves]) * (k - 1)
            + column([c.sync_seconds for c in curves]) * depth)


def gpu_time(work: Work, gpu: GPU, curve: ScalingCurve) -> float:
    """Predicted seconds of one kernel on the GPU: launch plus the device roofline."""
    return GPU_LAUNCH_SECONDS + max(work.flops / (gpu.peak_flops_for(work.math) * curve.efficiency),
                                    work.bytes / gpu.memory_bandwidth)
