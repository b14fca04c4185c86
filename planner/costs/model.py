"""The cost model: an op's time at any thread count and affinity, from measurements if it can.

Measured signatures are interpolated piecewise-linearly between their samples (seed 002,
Section III-C): a thread count that was measured is returned as is, one between two samples
lies on the line between them, one past the last sample continues the line from the fastest
sample through the last (flat if the last is the fastest), one below the first assumes perfect
scaling down to it. `interpolation="inverse"` draws the lines in 1 / threads instead (more
accurate; see `interpolate`). A signature the table lacks falls back to the analytical model
(`planner.costs.analytical`) with a warning, never an exception. Every prediction says where
it came from.

    seconds
      |*                         measured samples (hill climbing, interval 4): *
      | \\
      |  *                       interpolated between them: the straight segments
      |   \\___*____*___*--*
      |                     \\..  extrapolated past the last sample
      +--1---5---9---13--17--21-> threads

Example:
    >>> from planner.costs.records import CostEntry, CostTable, CpuSample
    >>> from planner.target import preset
    >>> sig = OpSignature(op="Relu", shapes=((1024,),), dtypes=("float32",))
    >>> table = CostTable(target="knl-7250", entries=(CostEntry(signature=sig, cpu=(
    ...     CpuSample(threads=1, affinity="compact", seconds=8.0),
    ...     CpuSample(threads=5, affinity="compact", seconds=4.0))),))
    >>> model = CostModel(preset("knl-7250"), table)
    >>> p = model.time(sig, 2, "compact")
    >>> p.seconds, p.source
    (7.0, 'interpolated')
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field

from planner.costs.analytical import (
    ScalingCurve,
    cpu_time,
    cpu_times_of,
    curve_for,
    gpu_time,
    op_work,
)
from planner.costs.records import CostTable
from planner.costs.signature import OpSignature
from planner.ir.graph import Record
from planner.target.records import AFFINITIES, Affinity, Target

Source = Literal["measured", "interpolated", "extrapolated", "analytical"]
Interpolation = Literal["linear", "inverse"]


class Prediction(Record):
    """Predicted seconds of one run, with where the number came from."""

    seconds: float = Field(ge=0)
    source: Source
    threads: int = Field(ge=1)
    affinity: Affinity
    note: str = ""


class GpuPrediction(Record):
    """Predicted seconds of one run on a GPU, with the algorithm or launch configuration."""

    seconds: float = Field(ge=0)
    source: Literal["measured", "analytical"]
    algorithm: str = ""
    workspace_bytes: int = 0
    threads_per_block: int = 0
    blocks: int = 0
    note: str = ""


class MissingCostWarning(UserWarning):
    """A signature is not in the cost table; the analytical model answered instead."""


def interpolate(points: Sequence[tuple[int, float]], threads: int,
                space: Interpolation = "linear") -> tuple[float, Source]:
    """Time at `threads` from (threads, seconds) samples, ascending and unique in threads.

    Between two samples: a straight line in `threads` (space="linear", the seed's model), or in
    1 / threads (space="inverse": exact for Amdahl's t = a + b / k, so far more accurate on the
    steep part of the curve at few threads). Past the last sample: the line from the fastest
    sample through the last one, flat if the last is the fastest. Below the first sample:
    perfect scaling down to it.

    Example:
        >>> interpolate([(1, 8.0), (5, 4.0), (9, 5.0)], 3)
        (6.0, 'interpolated')
        >>> interpolate([(1, 8.0), (5, 4.0), (9, 5.0)], 11)
        (5.5, 'extrapolated')
        >>> interpolate([(1, 8.0), (4, 2.0)], 2, space="inverse")
        (4.0, 'interpolated')
    """
    if not points:
        raise ValueError("no samples to interpolate")
    ks = [k for k, _ in points]
    if ks != sorted(set(ks)):
        raise ValueError(f"sample thread counts must be ascending and unique, got {ks}")
    if space not in ("linear", "inverse"):
        raise ValueError(f"interpolation space must be 'linear' or 'inverse', got {space!r}")
    for k, t in points:
        if k == threads:
            return t, "measured"
    (k0, t0), (kn, tn) = points[0], points[-1]
    if threads < k0:
        return t0 * k0 / threads, "extrapolated"
    if threads > kn:
        # Never predict a speed-up nobody measured; the fastest-to-last line is a wider, less
        # noisy baseline than the last segment alone.
        kf, tf = min(points, key=lambda p: (p[1], -p[0]))
        slope = (tn - tf) / (kn - kf) if kn > kf else 0.0
        return tn + max(slope, 0.0) * (threads - kn), "extrapolated"
    x = (lambda k: k) if space == "linear" else (lambda k: 1.0 / k)
    for (ka, ta), (kb, tb) in zip(points, points[1:], strict=False):
        if ka < threads < kb:
            return ta + (tb - ta) * (x(threads) - x(ka)) / (x(kb) - x(ka)), "interpolated"
    raise AssertionError("unreachable: threads lies within the samples")


@dataclass(frozen=True)
class CostModel:
    """Predicts op times on `target` from `table` (optional) and per-op scaling curves.

    interpolation: "linear" in thread count between samples (seed 002's model, the default) or
    "inverse" (linear in 1 / threads); see `interpolate`.
    """

    target: Target
    table: CostTable | None = None
    # Per-op-type curves that override the cost classes' (a model calibrated to a machine).
    curves: dict[str, ScalingCurve] = field(default_factory=dict)
    interpolation: Interpolation = "linear"
    # Analytical CPU curves by signature key, priced once per model: the schedule, its
    # evaluation's and the variants read the same ones (planner.pipeline shares the model).
    _curves: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False,
                                           compare=False)

    def __post_init__(self) -> None:
        if self.table is not None and self.table.target != self.target.name:
            raise ValueError(f"cost table was measured on {self.table.target!r}, "
                             f"not on target {self.target.name!r}")

    @property
    def max_threads(self) -> int:
        return self.target.cores

    def analytical_curve(self, signature: OpSignature) -> np.ndarray:
        """The analytical model's seconds on 1..max_threads threads (one roofline per count:
        it cannot tell affinities apart), computed once per signature key. Read it; never
        change it (every caller shares the array)."""
        return self.analytical_curves([signature])[0]

    def analytical_curves(self, signatures: Sequence[OpSignature]) -> list[np.ndarray]:
        """`analytical_curve` of each signature; those not priced yet are priced together
        (one array expression for all, analytical.cpu_times_of: the same floats)."""
        new: dict[str, OpSignature] = {}
        for signature in signatures:
            if signature.key not in self._curves:
                new.setdefault(signature.key, signature)
        if new:
            rows = cpu_times_of([op_work(s) for s in new.values()],
                                [curve_for(s.op, self.curves) for s in new.values()],
                                self.max_threads, self.target)
            self._curves.update(zip(new, rows, strict=True))
        return [self._curves[s.key] for s in signatures]

    def time(self, signature: OpSignature, threads: int,
             affinity: Affinity = "compact") -> Prediction:
        """Seconds of one run with `threads` threads (1..cores) placed with `affinity`.

        Warns MissingCostWarning when the table has no CPU samples for the signature.
        """
        prediction = self._predict(signature, threads, affinity)
        if prediction.source == "analytical":
            _warn_missing(signature, self.target.name, prediction.note)
        return prediction

    def best(self, signature: OpSignature, max_threads: int | None = None,
             affinities: Iterable[Affinity] = AFFINITIES) -> Prediction:
        """The fastest (threads, affinity) up to max_threads (Strategy 1); ties go to fewer
        threads, then to compact."""
        limit = max_threads or self.max_threads
        options = [self._predict(signature, k, a) for a in affinities for k in range(1, limit + 1)]
        best = min(options, key=lambda p: (p.seconds, p.threads, p.affinity))
        if best.source == "analytical":
            _warn_missing(signature, self.target.name, best.note)
        return best

    def _predict(self, signature: OpSignature, threads: int, affinity: Affinity) -> Prediction:
        if affinity not in AFFINITIES:
            raise ValueError(f"affinity must be one of {list(AFFINITIES)}, got {affinity!r}")
        if not 1 <= threads <= self.max_threads:
            raise ValueError(f"{signature.key}: threads must be in 1..{self.max_threads} on "
                             f"target {self.target.name!r}, got {threads}")
        entry = self.table.entry(signature) if self.table is not None else None
        if entry is not None and entry.cpu:
            note = ""
            points = entry.cpu_points(affinity)
            if not points:
                other = next(a for a in AFFINITIES if a != affinity)
                points, note = entry.cpu_points(other), f"no {affinity} samples: {other} used"
            seconds, source = interpolate(points, threads, self.interpolation)
            seconds *= self.table.team_factor(threads, self.max_threads)
            return Prediction(seconds=seconds, source=source, threads=threads,
                              affinity=affinity, note=note)
        work = op_work(signature)
        seconds = cpu_time(work, threads, self.target, curve_for(signature.op, self.curves))
        missing = "not in the cost table" if entry is None else "no CPU samples in the cost table"
        note = "; ".join(n for n in (missing, work.note) if n)
        return Prediction(seconds=seconds, source="analytical", threads=threads,
                          affinity=affinity, note=note)

    def gpu_time(self, signature: OpSignature, workspace_limit: int | None = None,
                 gpu: int = 0) -> GpuPrediction:
        """Seconds on GPU `gpu`: the fastest measured algorithm whose workspace fits
        `workspace_limit` (any, if None), else the fastest launch configuration, else the
        op's measured time alone (`gpu_seconds`), else the analytical model (with a
        MissingCostWarning)."""
        if not 0 <= gpu < len(self.target.gpus):
            raise ValueError(f"target {self.target.name!r} has {len(self.target.gpus)} GPU(s); "
                             f"no GPU {gpu}")
        entry = self.table.entry(signature) if self.table is not None else None
        note = ""
        if entry is not None and entry.gpu_algorithms:
            fits = [a for a in entry.gpu_algorithms
                    if workspace_limit is None or a.workspace_bytes <= workspace_limit]
            if fits:
                a = min(fits, key=lambda a: (a.seconds, a.workspace_bytes, a.algorithm))
                return GpuPrediction(seconds=a.seconds, source="measured", algorithm=a.algorithm,
                                     workspace_bytes=a.workspace_bytes)
            note = f"no measured algorithm fits {workspace_limit} workspace bytes"
        if entry is not None and entry.gpu_launches and not note:
            s = min(entry.gpu_launches, key=lambda s: (s.seconds, s.threads_per_block, s.blocks))
            return GpuPrediction(seconds=s.seconds, source="measured",
                                 threads_per_block=s.threads_per_block, blocks=s.blocks)
        if entry is not None and entry.gpu_seconds is not None and not note:
            return GpuPrediction(seconds=entry.gpu_seconds, source="measured")
        work = op_work(signature)
        note = "; ".join(n for n in (note or "not in the cost table", work.note) if n)
        _warn_missing(signature, self.target.name, note)
        seconds = gpu_time(work, self.target.gpus[gpu], curve_for(signature.op, self.curves))
        return GpuPrediction(seconds=seconds, source="analytical", note=note)


def _warn_missing(signature: OpSignature, target: str, note: str) -> None:
    # One message per signature: Python's default filter then shows each once per call site.
    warnings.warn(MissingCostWarning(f"{signature.key} on {target!r}: {note}; "
                                     "using the analytical model"), stacklevel=3)

