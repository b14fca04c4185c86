"""Measuring op kernels on this machine's GPU: the `measure` the GPU profiling driver
(planner.costs.gpu_profile) calls, backed by the generated CUDA executor itself.

A batch of signatures becomes one plan (codegen.profiling.signatures_graph, planned for the
GPU target as any graph is): per signature its inputs and, for an op whose CUDA kernel is
generated (pointwise.cu), one copy per threads-per-block variant of the generated kernels
(codegen.tvm_kernels.BLOCKS), that copy's `block` set in the plan; one copy of any other op.
The plan is built and loaded with per-op event timing (`op_timing`), run once to warm up,
then `steps` steps give every copy's median time. A convolution's copy is then asked for
every cuDNN algorithm (the runtime's Kernel::find: cuDNN's cudnnFind*AlgorithmEx on the
kernel's own descriptors and tensors, `repeats` times, each algorithm's median kept), with a
workspace of at most `max_workspace_bytes` (and half the device's free memory). A batch's
plan runs under the math mode of its signatures (OpSignature.math_mode: a tf32 graph's float32
convolutions and GEMMs carry "tf32", and the plan's graph is then marked tf32, so the executor
runs them on TF32 tensor cores); one holding both TF32 and float32-math convolutions or GEMMs
is measured as two plans, so that each entry is measured in the math its key names.

    profiler = GpuProfiler(load_target("gpu"), work_dir)
    run = profile_gpu(graph_signatures(graph, target.gpus[0]).values(), target, profiler)

Nothing here runs without a GPU: loading the executor is where a machine without one stops
(`planner profile` refuses such a target before, in one line).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from codegen.backends import RUNTIMES
from codegen.build import build
from codegen.load import load
from codegen.profiling import median_stats, signatures_graph
from codegen.render import render
from codegen.tvm_kernels import BLOCKS
from planner.costs.gpu_profile import GpuMeasurement, launch_blocks, signature_bytes
from planner.costs.model import MissingCostWarning
from planner.costs.records import ConvAlgoSample, LaunchSample
from planner.costs.signature import OpSignature
from planner.frontend.passes.precision import compute_type
from planner.ops import REGISTRY, get_op
from planner.plan import Plan, digest
from planner.target.backends import traits
from planner.target.records import Target

# Ops whose CUDA kernel launches a generated kernel with the plan's `block` (pointwise.cu:
# every op with a pointwise formula, and BiasAdd through Add's kernel).
GENERATED = frozenset({n for n, op in REGISTRY.items() if op.pointwise is not None}
                      | {"BiasAdd"})
DEFAULT_MAX_WORKSPACE = 4 << 30


def kind(sig: OpSignature) -> str:
    """What profiling measures for the signature: "algorithms", "launches" or "alone".

    >>> kind(OpSignature(op="Relu", shapes=((4,),), dtypes=("float32",)))
    'launches'
    """
    if get_op(sig.op).convolution:
        return "algorithms"
    return "launches" if sig.op in GENERATED else "alone"


def profile_plan(batch: Sequence[OpSignature], target: Target) -> Plan:
    """The plan measuring a batch (module docstring): run k's copies are `s{k}_copy{j}`, a
    generated kernel's copy j with BLOCKS[j] threads per block."""
    from planner.pipeline import plan as make_plan

    if _math_clash(batch):
        raise ValueError("a profiling batch holds TF32 and float32-math convolutions or GEMMs: "
                         "measure them as two batches")
    runs = [(sig, len(BLOCKS) if kind(sig) == "launches" else 1) for sig in batch]
    graph = signatures_graph(runs)
    if any(sig.math_mode == "tf32" for sig in batch):
        graph = graph.model_copy(update={"math": "tf32"})
    blocks = {f"s{k}_copy{j}": BLOCKS[j] for k, (sig, n) in enumerate(runs)
              if kind(sig) == "launches" for j in range(n)}
    with warnings.catch_warnings():
        # Nothing is measured yet: the plan's times are the analytical model's, and unused.
        warnings.simplefilter("ignore", MissingCostWarning)
        plan = make_plan(graph, target)
    return plan.model_copy(update={"ops": tuple(
        op.model_copy(update={"block": blocks[op.name]}) if op.name in blocks else op
        for op in plan.ops)})


def _math_clash(batch: Sequence[OpSignature]) -> bool:
    """Whether one plan cannot measure the batch: it has TF32 signatures and float32 ones
    whose kernels a tf32 plan would run in TF32."""
    return (any(s.math_mode == "tf32" for s in batch)
            and any(s.math_mode is None and compute_type(s.op, s.dtypes, "tf32") == "tf32"
                    for s in batch))


class GpuProfiler:
    """measure(batch) -> {signature key: GpuMeasurement or why not}, on GPU `device` of this
    machine (module docstring). Plans of `target` are built under `work_dir`; each stage of a
    batch (build, timing, each convolution's find) is a line on `progress` (None: silent)."""

    def __init__(self, target: Target, work_dir: str | Path, steps: int = 5, repeats: int = 3,
                 max_workspace_bytes: int = DEFAULT_MAX_WORKSPACE, device: int = 0,
                 progress: TextIO | None = None) -> None:
        if traits(target).timed_on_host:
            raise ValueError(f"target {target.name!r} has no GPU to measure on")
        self.target, self.dir = target, Path(work_dir)
        self.steps, self.repeats, self.device = max(1, steps), max(1, repeats), device
        self.max_workspace_bytes = max_workspace_bytes
        self.progress = progress

    def bytes_of(self, sig: OpSignature) -> int:
        """The bytes the signature's inputs and copies hold in a profiling plan (the
        driver's batches)."""
        return signature_bytes(sig, len(BLOCKS) if kind(sig) == "launches" else 1)

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.write(f"  {text}\n")
            self.progress.flush()

    def __call__(self, batch: Sequence[OpSignature]) -> dict[str, GpuMeasurement | str]:
        runnable = set(RUNTIMES[self.target.backend].registered)
        out: dict[str, GpuMeasurement | str] = {
            s.key: f"the CUDA runtime has no kernel for {s.op}" for s in batch
            if s.op not in runnable}
        batch = [s for s in batch if s.op in runnable]
        if not batch:
            return out
        if _math_clash(batch):
            for part in ([s for s in batch if s.math_mode == "tf32"],
                         [s for s in batch if s.math_mode != "tf32"]):
                out.update(self(part))
            return out
        plan = profile_plan(batch, self.target)
        folder = self.dir / f"profile_{digest('|'.join(s.key for s in batch))[:12]}"
        self._say(f"building the profiling executor: {len(plan.ops)} op(s) for "
                  f"{len(batch)} signature(s)")
        module = load(build(render(plan, folder)).dir)
        ex = module.Executor(op_timing=True, device=self.device)
        from planner.graph.interpret import random_feeds

        feeds = random_feeds(plan.graph, seed=0)
        self._say(f"timing every op: {self.steps} step(s) after a warm-up")
        ex.step(feeds)  # warm-up: cuDNN's and the kernels' first-launch costs
        seconds = {row["name"]: row["seconds"]
                   for row in median_stats(ex, feeds, self.steps)["ops"]}
        free, _ = module._rt.device_memory(self.device)
        workspace = min(self.max_workspace_bytes, free // 2)
        convs = [k for k, s in enumerate(batch) if kind(s) == "algorithms"]
        for k, sig in enumerate(batch):
            if k in convs:
                self._say(f"cuDNN find {convs.index(k) + 1}/{len(convs)}: {sig.op} "
                          f"{' '.join('x'.join(map(str, s)) for s in sig.shapes)}")
            try:
                out[sig.key] = self._measured(ex, sig, k, seconds, workspace)
            except Exception as e:  # noqa: BLE001 - the others of the batch still count
                out[sig.key] = f"{type(e).__name__}: {e}"
        return out

    def _measured(self, ex, sig: OpSignature, k: int, seconds: dict[str, float],
                  workspace: int) -> GpuMeasurement | str:
        what = kind(sig)
        if what == "launches":
            return GpuMeasurement(launches=tuple(
                LaunchSample(threads_per_block=b, blocks=launch_blocks(sig, b),
                             seconds=seconds[f"s{k}_copy{j}"]) for j, b in enumerate(BLOCKS)))
        if what == "alone":
            return GpuMeasurement(seconds=seconds[f"s{k}_copy0"])
        return GpuMeasurement(algorithms=median_algorithms(
            [ex.find(f"s{k}_copy0", workspace) for _ in range(self.repeats)]))


def median_algorithms(finds: list[list[dict]]) -> tuple[ConvAlgoSample, ...]:
    """Per algorithm family that every find run reported, its median seconds and its
    (largest) workspace; a family some run could not measure is left out.

    >>> run = lambda t: [{"algorithm": "FFT", "seconds": t, "workspace_bytes": 64}]
    >>> median_algorithms([run(3e-3), run(1e-3), run(2e-3)])
    (ConvAlgoSample(algorithm='FFT', seconds=0.002, workspace_bytes=64),)
    """
    families = set.intersection(*({r["algorithm"] for r in f} for f in finds)) if finds \
        else set()
    out = []
    for family in sorted(families):
        rows = [r for f in finds for r in f if r["algorithm"] == family]
        out.append(ConvAlgoSample(algorithm=family,
                                  seconds=statistics.median(r["seconds"] for r in rows),
                                  workspace_bytes=max(r["workspace_bytes"] for r in rows)))
    return tuple(out)
