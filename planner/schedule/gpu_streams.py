"""Co-running streams: independent kernels that do not fill the GPU alone run side by side.

Seed 002, Section VII (Table VII: two instances of Inception-v3's Conv2D, BiasAdd, MaxPool,
Conv2DBackpropFilter/Input co-run on a P100 up to 1.9x faster than one after the other) and
the systems that followed it: Nimble (ahead-of-time stream assignment with the fewest
synchronizations), IOS (inter-operator parallelism of Inception-like branches), Opara
(operator parallelism by occupancy and launch order). Here, ahead of time, on the cost
model's occupancies (planner.schedule.gpu_share):

    list scheduling  steps in the one-stream order (a topological order that keeps memory
                     planning's updates early); each goes to the compute stream where it can
                     start soonest in a table of the SMs in use: it starts once its inputs are
                     ready, its stream is free and the kernels running then leave it room
                     (their occupancies and its own sum to <= 1); ties go to the stream of its
                     latest input (no event), then the lowest stream
    filling ops      an op that fills the GPU (occupancy 1) runs alone: it waits for every
                     stream (join edges from each stream's last op) and the ops after it on
                     other streams wait for it, so no kernel is issued beside it
    edges            data and in-place dependencies, each stream's order and the joins,
                     transitively reduced: an event only where a dependency crosses streams
                     and no other path implies it
    guard            the plan keeps several streams only when the simulated step (SMs and
                     bandwidth shared, gpu_share.simulate_streams) is at least `min_gain`
                     shorter than one stream's, as the CPU side keeps co-running; and again
                     after memory planning (planner.pipeline), whose conv algorithms and
                     reuse edges change the step

The table uses each op's fastest time (its fastest algorithm: what a plan without a budget
runs); the simulation, like the one-stream schedule, the least-workspace one.

    one stream   |a||b||c||d|----------------------e----------------------|
    four         |a|                                                         a..d: small
                 |b|                                                         branches, e
                 |c|                                                         fills the GPU
                 |d|----------------------e----------------------|

Example:
    >>> p = assign_streams([1.0] * 3, [(), (), (0, 1)], [0.5, 0.5, 0.5], 4)
    >>> p.stream, p.start, p.joins
    ((0, 1, 1), (0.0, 0.0, 1.0), ())
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from planner.schedule.gpu_share import EPSILON

# An op at or above this occupancy fills the GPU: it runs alone.
FILLS = 1.0 - 1e-9


@dataclass(frozen=True)
class StreamAssignment:
    """Per step (in the given order): its compute stream (0 = `compute`), its start in the
    scheduler's table; the join edges (step, step) around ops that fill the GPU; the steps in
    execution order (table start, then given order)."""

    stream: tuple[int, ...]
    start: tuple[float, ...]
    joins: tuple[tuple[int, int], ...]
    order: tuple[int, ...]

    @property
    def streams(self) -> int:
        return len(set(self.stream))


class _Table:
    """The SMs in use over time: placed intervals (end, start, occupancy), sorted by end."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, float]] = []

    def earliest(self, t: float, seconds: float, occ: float) -> float:
        """The earliest start >= t where `occ` fits beside the placed kernels for `seconds`."""
        while True:
            live = self.spans[bisect.bisect_right(self.spans, (t, float("inf"), 0.0)):]
            hi = t + max(seconds, EPSILON)
            over = [s for s in live if s[1] < hi]
            if not over:
                return t
            # The peak of the SMs in use over [t, hi): at t and at every start inside.
            points = sorted({t, *(s[1] for s in over if s[1] > t)})
            clash = None
            for p in points:
                used = sum(o for e, s, o in over if s <= p < e)
                if used + occ > 1.0 + EPSILON:
                    clash = p
                    break
            if clash is None:
                return t
            # Retry after the first kernel running at the clash ends.
            t = min(e for e, s, _ in over if s <= clash < e)

    def place(self, start: float, seconds: float, occ: float) -> None:
        bisect.insort(self.spans, (start + seconds, start, occ))


def assign_streams(seconds: Sequence[float], preds: Sequence[Sequence[int]],
                   occ: Sequence[float], streams: int) -> StreamAssignment:
    """Each step's compute stream by list scheduling on the SMs' table (module docstring).
    `preds`: per step, the earlier steps it depends on (steps in a topological order)."""
    n = len(seconds)
    free = [0.0] * streams
    last: list[int] = [-1] * streams
    stream, start, end = [0] * n, [0.0] * n, [0.0] * n
    joins: set[tuple[int, int]] = set()
    table = _Table()
    horizon = 0.0  # the latest end placed so far
    filler = -1    # the last op that fills the GPU
    for j in range(n):
        ready = max((end[p] for p in preds[j]), default=0.0)
        fills = occ[j] >= FILLS
        # Prefer the streams of its inputs, latest first: an input there needs no event.
        near = [stream[p] for p in sorted(preds[j], key=lambda p: (-end[p], -p))]
        rank = {s: k for k, s in enumerate(dict.fromkeys(near))}
        best: tuple[float, int, int] | None = None
        for s in range(streams):
            if last[s] < 0 and s > 0 and last[s - 1] < 0:
                break  # streams are opened in order: one unused one is enough
            t = max(ready, free[s], horizon if fills else 0.0)
            if filler >= 0 and stream[filler] != s:
                t = max(t, end[filler])
            t = table.earliest(t, float(seconds[j]), min(occ[j], 1.0))
            key = (t, rank.get(s, len(rank)), s)
            if best is None or key < best:
                best = key
        assert best is not None
        t, _, s = best
        stream[j], start[j], end[j] = s, t, t + float(seconds[j])
        if fills:
            joins.update((last[r], j) for r in range(streams) if r != s and last[r] >= 0)
            filler = j
        elif filler >= 0 and stream[filler] != s and last[s] != filler:
            joins.add((filler, j))
        table.place(t, float(seconds[j]), min(occ[j], 1.0))
        free[s], last[s] = end[j], j
        horizon = max(horizon, end[j])
    order = tuple(sorted(range(n), key=lambda j: (start[j], j)))
    return StreamAssignment(stream=tuple(stream), start=tuple(start),
                            joins=tuple(sorted(joins)), order=order)
