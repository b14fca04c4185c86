"""The GPU profiling driver: every op signature of a graph measured on this machine's GPU.

What each signature gets in the cost table (planner.costs.records), by what its CUDA kernel lets
a plan choose:

    convolution (Conv2D, its two gradients, ConvTranspose2D)   gpu_algorithms: every cuDNN
        algorithm that runs, by the plan's family name, with its seconds and workspace bytes
    generated kernel (element-wise, broadcast, optimizer updates)   gpu_launches: per threads
        per block, the blocks it launches (ceil(n / threads)) and its seconds
    anything else (cuBLAS GEMMs, pooling, norms, losses)        gpu_seconds: its time alone

The kernels come from elsewhere (codegen.gpu_profiling, which planner/cli/main.py passes in): the
driver hands `measure` a batch of signatures at a time (one executor built and loaded per
batch, so a few compiles whatever the graph) and gets a GpuMeasurement per signature back, or
an error message for one that failed. Batches hold signatures until their tensors would pass
`batch_bytes`. Signatures the starting table already has are skipped and the table is
checkpointed after every batch, so an interrupted run resumes where it stopped. Entries,
samples and provenance are sorted as the records keep them: the JSON is canonical.

Example (a fake measurer: every algorithm 1 ms, launches n / threads microseconds):
    >>> from planner.target import preset
    >>> conv = OpSignature(op="Conv2D", shapes=((1, 1, 4, 4), (1, 1, 3, 3)),
    ...                    dtypes=("float32", "float32"), attrs={"strides": [1, 1]})
    >>> relu = OpSignature(op="Relu", shapes=((4096,),), dtypes=("float32",))
    >>> def measure(batch):
    ...     return {s.key: GpuMeasurement(algorithms=(ConvAlgoSample(
    ...         algorithm="IMPLICIT_GEMM", seconds=1e-3, workspace_bytes=0),)) if s == conv
    ...         else GpuMeasurement(launches=tuple(LaunchSample(
    ...             threads_per_block=b, blocks=launch_blocks(s, b), seconds=4096 / b * 1e-6)
    ...             for b in (128, 256))) for s in batch}
    >>> run = profile_gpu([conv, relu, relu], preset("h100-80gb"), measure, progress=None,
    ...                   date="2025-01-01")
    >>> [(e.signature.op, len(e.gpu_algorithms), [s.blocks for s in e.gpu_launches])
    ...  for e in run.table.entries], run.measured
    ([('Conv2D', 1, []), ('Relu', 0, [32, 16])], 2)
"""

from __future__ import annotations

import datetime
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from planner import __version__
from planner.costs.profile import ProfileRun, Progress
from planner.costs.records import (
    ConvAlgoSample,
    CostEntry,
    CostTable,
    LaunchSample,
    Provenance,
    merge,
)
from planner.costs.signature import OpSignature, unique_signatures
from planner.target.records import Target


@dataclass(frozen=True)
class GpuMeasurement:
    """What was measured for one signature (module docstring): its algorithms, its launch
    configurations, or its time alone."""

    algorithms: tuple[ConvAlgoSample, ...] = ()
    launches: tuple[LaunchSample, ...] = ()
    seconds: float | None = None

    def entry(self, sig: OpSignature) -> CostEntry:
        return CostEntry(signature=sig, gpu_algorithms=self.algorithms,
                         gpu_launches=self.launches, gpu_seconds=self.seconds)


# measure(batch) -> per signature key, its GpuMeasurement or why it could not be measured.
GpuMeasure = Callable[[Sequence[OpSignature]], dict[str, "GpuMeasurement | str"]]

# Tensors of one batch: a quarter of an 80 GB GPU leaves room for cuDNN's find workspace.
DEFAULT_BATCH_BYTES = 20 * 10**9


def launch_blocks(sig: OpSignature, threads_per_block: int) -> int:
    """Blocks a generated kernel launches for the signature: one thread per element of its
    (first) output, at least one block.

    >>> launch_blocks(OpSignature(op="Relu", shapes=((1000,),), dtypes=("float32",)), 256)
    4
    """
    from planner.ops import get_op
    from planner.ops.base import TensorType

    op = get_op(sig.op)
    ins = [TensorType(tuple(s), d) for s, d in zip(sig.shapes, sig.dtypes, strict=True)]
    out = op.infer(ins, op.normalize_attrs(dict(sig.attrs)))[0]
    return max(1, math.ceil(math.prod(out.shape) / threads_per_block))


def signature_bytes(sig: OpSignature, copies: int = 1) -> int:
    """Bytes of the signature's inputs and of `copies` runs' outputs (what a batch holds)."""
    from planner.dtypes import num_bytes
    from planner.ops import get_op
    from planner.ops.base import TensorType

    op = get_op(sig.op)
    ins = [TensorType(tuple(s), d) for s, d in zip(sig.shapes, sig.dtypes, strict=True)]
    outs = op.infer(ins, op.normalize_attrs(dict(sig.attrs)))
    return (sum(num_bytes(t.shape, t.dtype) for t in ins)
            + copies * sum(num_bytes(t.shape, t.dtype) for t in outs))


def batches(signatures: Sequence[OpSignature], batch_bytes: int,
            bytes_of: Callable[[OpSignature], int] = signature_bytes
            ) -> list[list[OpSignature]]:
    """Consecutive signatures grouped while their bytes stay within `batch_bytes` (a signature
    larger than that alone in its batch).

    >>> sigs = [OpSignature(op="Relu", shapes=((n,),), dtypes=("float32",)) for n in (4, 4, 8)]
    >>> [[s.shapes[0][0] for s in b] for b in batches(sigs, 64)]
    [[4, 4], [8]]
    """
    out: list[list[OpSignature]] = []
    held = 0
    for sig in signatures:
        need = bytes_of(sig)
        if out and held + need <= batch_bytes:
            out[-1].append(sig)
            held += need
        else:
            out.append([sig])
            held = need
    return out


def profile_gpu(signatures: Sequence[OpSignature], target: Target, measure: GpuMeasure,
                table: CostTable | None = None, progress: TextIO | None = sys.stderr,
                checkpoint: Callable[[CostTable], None] | None = None,
                batch_bytes: int = DEFAULT_BATCH_BYTES,
                bytes_of: Callable[[OpSignature], int] = signature_bytes,
                source: str = "cuDNN find, launch configurations, ops alone",
                date: str | None = None) -> ProfileRun:
    """Measure every distinct signature not yet in `table` on `target`'s GPU (module
    docstring). A signature `measure` reports as failed is listed in `failures` and the run
    goes on; Ctrl-C keeps the batches finished before it (complete=False)."""
    if not target.gpus:
        raise ValueError(f"target {target.name!r} has no GPU to profile on")
    table = CostTable(target=target.name) if table is None else table
    if table.target != target.name:
        raise ValueError(f"cost table is for {table.target!r}, not target {target.name!r}")
    distinct = unique_signatures(signatures)
    todo = [s for s in distinct if s not in table]
    stamp = date or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    provenance = Provenance(target=target.name, tool=f"planner {__version__}", date=stamp,
                            source=source)
    bar = Progress(progress, len(todo))
    measured, failures, complete = 0, [], True
    try:
        for batch in batches(todo, batch_bytes, bytes_of):
            bar.show(measured + len(failures),
                     f"{len(batch)} signature(s): {', '.join(sorted({s.op for s in batch}))}")
            try:
                results = measure(batch)
            except Exception as e:  # noqa: BLE001 - one broken batch must not lose the rest
                results = {s.key: f"{type(e).__name__}: {e}" for s in batch}
            entries = []
            for sig in batch:
                got = results.get(sig.key, "not measured")
                if isinstance(got, str):
                    failures.append((sig.key, got))
                else:
                    entries.append(got.entry(sig))
            if entries:
                table = merge(table, CostTable(target=target.name, entries=tuple(entries),
                                               provenance=(provenance,)))
                measured += len(entries)
                if checkpoint is not None:
                    checkpoint(table)
    except KeyboardInterrupt:
        complete = False
    bar.done(measured, len(failures), complete)
    return ProfileRun(table=table, complete=complete, measured=measured,
                      skipped=len(distinct) - len(todo), calls=measured,
                      failures=tuple(failures))
