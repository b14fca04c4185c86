"""Co-running ops share the memory system: a roofline share of the bandwidth per running op.

An op alone on its k cores runs `seconds` and moves `bytes` (its roofline traffic,
planner.costs.analytical): it asks for d = bytes / seconds of bandwidth, out of the most it
could get alone, c = min(B, k x per-core bandwidth). Its memory-boundness is mu = min(1, d / c):
1 for a streaming op, near 0 for a GEMM that lives in its caches. While the ops running
together ask for D > B in all, each progresses at

    pace = 1 / (1 + kappa x mu x (D / B - 1))

of its pace alone: a purely memory-bound op gets its share B d / D of the bandwidth (its time
stretches by D / B), a compute-bound one is not slowed. `kappa` calibrates the model on the
machine: the stretch of co-running ops measured inside the step (`fit_kappa`), which also
carries what the roofline leaves out (last-level cache shared by the co-running ops' working
sets, prefetchers fighting). kappa = 0 is the contention-free simulator.

    ops    a (mu 1, d = B)   b (mu 1, d = B)   c (mu 0)
    alone  |==== 1 s ====|   |== 0.5 s ==|      |== 1 s ==|
    a + b  D = 2B: both at pace 1/2 until b ends at 1 s, then a alone: a ends at 1.5 s
    a + c  D = B: nobody slowed

Example:
    >>> from planner.schedule.placement import Placement
    >>> ps = [Placement((0,), (0,), "compact", 1.0, 0.0),
    ...       Placement((1,), (1,), "compact", 0.5, 0.0)]
    >>> bw = Contention(node_bytes=(1e9, 5e8), memory=1e9, per_core=1e9, kappa=1.0)
    >>> simulate_contended(ps, ((), ()), 2, bw).ends
    (1.5, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.costs.analytical import op_work
from planner.costs.signature import graph_signatures
from planner.graph.ir import Graph
from planner.schedule.placement import Placement
from planner.schedule.simulate import EPSILON, SimResult, sim_result, unblocking
from planner.target.records import CPU


@dataclass(frozen=True)
class Contention:
    """What the contended simulator needs: each node's bytes moved (graph order), the
    machine's bandwidth (bytes/s: all cores, one core) and the calibration kappa."""

    node_bytes: tuple[float, ...]
    memory: float
    per_core: float
    kappa: float

    @classmethod
    def of(cls, graph: Graph, cpu: CPU, kappa: float) -> Contention:
        """For `graph`'s nodes (their roofline bytes) on `cpu`'s bandwidths."""
        sigs = graph_signatures(graph)
        return cls(node_bytes=tuple(float(op_work(sigs[n.name]).bytes) for n in graph.nodes),
                   memory=cpu.memory_bandwidth, per_core=cpu.core_bandwidth, kappa=kappa)

    def demands(self, placements: Sequence[Placement]) -> tuple[list[float], list[float]]:
        """Per placement: bandwidth asked for alone (bytes/s) and memory-boundness mu."""
        demand, mu = [], []
        for p in placements:
            moved = sum(self.node_bytes[v] for v in p.nodes)
            d = moved / p.seconds if p.seconds > 0 else 0.0
            ceiling = min(self.memory, len(p.cores) * self.per_core)
            demand.append(d)
            mu.append(min(1.0, d / ceiling) if ceiling > 0 else 0.0)
        return demand, mu


def simulate_contended(placements: Sequence[Placement], preds: Sequence[Sequence[int]],
                       cores: int, contention: Contention) -> SimResult:
    """`simulate` with bandwidth sharing (module docstring); no placement may use SMT."""
    if any(p.smt for p in placements):
        raise ValueError("the contended simulator does not model SMT placements")
    n = len(placements)
    blocked, unblocks = unblocking(placements, preds)
    demand, mu = contention.demands(placements)
    kappa, bandwidth = contention.kappa, contention.memory
    left = [p.seconds for p in placements]
    starts, ends = [0.0] * n, [0.0] * n
    busy = [0.0] * cores
    counts: list[int] = []
    running: list[int] = []
    now, done = 0.0, 0

    def start(batch: list[int]) -> None:
        for j in sorted(batch):
            starts[j] = now
            running.append(j)
            counts.append(len(running))

    start([i for i in range(n) if blocked[i] == 0])
    while running:
        over = kappa * max(0.0, sum(demand[j] for j in running) / bandwidth - 1.0)
        pace = {j: 1.0 / (1.0 + mu[j] * over) for j in running}
        dt = min(left[j] / pace[j] for j in running)
        now += dt
        limit = dt * (1.0 + EPSILON) + EPSILON * max(abs(now), 1.0)
        finished = [j for j in running if left[j] / pace[j] <= limit]
        for j in running:
            left[j] = max(0.0, left[j] - dt * pace[j])
        newly: list[int] = []
        for j in sorted(finished):
            running.remove(j)
            ends[j] = now
            for c in placements[j].cores:
                busy[c] += now - starts[j]
            done += 1
            counts.append(len(running))
            for k in unblocks[j]:
                blocked[k] -= 1
                if blocked[k] == 0:
                    newly.append(k)
        start(newly)
    return sim_result(starts, ends, busy, counts, cores, blocked, done == n)


def fit_kappa(alone: Sequence[float], measured: Sequence[float], starts: Sequence[float],
              ends: Sequence[float], demand: Sequence[float], mu: Sequence[float],
              bandwidth: float) -> float:
    """kappa from a measured co-running step: per op, its time alone and co-running, and the
    planned run's intervals, bandwidth demands and memory-boundness. With kappa = 1 an op's
    modelled stretch - 1 is about mu x (the mean over its run of max(0, D / B - 1)); kappa is
    the least-squares slope of the measured stretch - 1 on it (>= 0).

    >>> fit_kappa([1, 1], [1.5, 1.5], [0, 0], [1, 1], [1.0, 1.0], [1.0, 1.0], 1.0)
    0.5
    """
    points = sorted({*starts, *ends})
    at = {t: k for k, t in enumerate(points)}
    # D over each elementary interval [points[k], points[k + 1]) by a difference array, then
    # the running integral of max(0, D / B - 1) so that each op reads its own in O(1).
    delta = [0.0] * (len(points) + 1)
    for i in range(len(alone)):
        if ends[i] > starts[i]:
            delta[at[starts[i]]] += demand[i]
            delta[at[ends[i]]] -= demand[i]
    integral, total, acc = [0.0], 0.0, 0.0
    for k in range(len(points) - 1):
        total += delta[k]
        acc += (points[k + 1] - points[k]) * max(0.0, total / bandwidth - 1.0)
        integral.append(acc)
    num = den = 0.0
    for i in range(len(alone)):
        span = ends[i] - starts[i]
        if span <= 0 or alone[i] <= 0 or mu[i] <= 0:
            continue
        x = mu[i] * (integral[at[ends[i]]] - integral[at[starts[i]]]) / span
        y = measured[i] / alone[i] - 1.0
        num += x * y
        den += x * x
    return max(0.0, num / den) if den > 0 else 0.0
