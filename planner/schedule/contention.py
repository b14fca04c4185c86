"""Co-running ops share the machine: a roofline share of the memory bandwidth per running op,
and a slowdown for sharing the rest (caches, clocks) with ops on the other cores.

An op alone on its k cores runs `seconds` and moves `bytes` (its roofline traffic,
planner.costs.analytical): it asks for d = bytes / seconds of bandwidth, out of the most it
could get alone, c = min(B, k x per-core bandwidth). Its memory-boundness is mu = min(1, d / c):
1 for a streaming op, near 0 for a GEMM that lives in its caches. While the ops running
together ask for D > B in all, and a share f of the cores it does not hold is busy, each
progresses at

    pace = 1 / (1 + kappa x mu x max(0, D / B - 1) + sigma x f)

of its pace alone: a purely memory-bound op gets its share B d / D of the bandwidth (its time
stretches by D / B), a compute-bound one is not slowed by the bandwidth. sigma is what every
op loses to busy neighbours whatever it moves: the last-level cache their working sets share,
a lower clock with more cores active, and on a virtual machine host hyper-threads that the
guest sees as separate cores. `kappa` and `sigma` calibrate the model on the machine: kappa
from the stretch of co-running ops measured inside the step (`fit_contention`), sigma from the
co-running step itself (`step_slowdown`: it also carries the lanes' hand-offs, which the
simulator has no term for). kappa = sigma = 0 is the contention-free simulator.

    ops    a (mu 1, d = B)   b (mu 1, d = B)   c (mu 0)
    alone  |==== 1 s ====|   |== 0.5 s ==|      |== 1 s ==|
    a + b  D = 2B: both at pace 1/2 until b ends at 1 s, then a alone: a ends at 1.5 s
    a + c  D = B: nobody slowed by the bandwidth (by sigma, both)

Example:
    >>> from planner.schedule.placement import Placement
    >>> ps = [Placement((0,), (0,), "compact", 1.0, 0.0),
    ...       Placement((1,), (1,), "compact", 0.5, 0.0)]
    >>> bw = Contention(node_bytes=(1e9, 5e8), memory=1e9, per_core=1e9, kappa=1.0)
    >>> simulate_contended(ps, ((), ()), 2, bw).ends
    (1.5, 1.0)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.costs.analytical import op_work
from planner.costs.signature import graph_signatures
from planner.ir.graph import Graph
from planner.schedule.placement import Placement
from planner.schedule.simulate import EPSILON, HandOffs, SimResult, sim_result, unblocking
from planner.target.records import CPU


@dataclass(frozen=True)
class Contention:
    """What the contended simulator needs: each node's bytes moved (graph order), the
    machine's bandwidth (bytes/s: all cores, one core) and the calibration kappa and sigma."""

    node_bytes: tuple[float, ...]
    memory: float
    per_core: float
    kappa: float
    sigma: float = 0.0

    @classmethod
    def of(cls, graph: Graph, cpu: CPU, kappa: float, sigma: float = 0.0) -> Contention:
        """For `graph`'s nodes (their roofline bytes) on `cpu`'s bandwidths."""
        sigs = graph_signatures(graph)
        return cls(node_bytes=tuple(float(op_work(sigs[n.name]).bytes) for n in graph.nodes),
                   memory=cpu.memory_bandwidth, per_core=cpu.core_bandwidth, kappa=kappa,
                   sigma=sigma)

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
                       cores: int, contention: Contention, handoff: float = 0.0) -> SimResult:
    """`simulate` with co-running ops sharing bandwidth and cores (module docstring), and
    `handoff` seconds on every wait across lanes (planner.schedule.simulate); no placement
    may use SMT. An op handed over waits, unblocked and not running, until its start."""
    if any(p.smt for p in placements):
        raise ValueError("the contended simulator does not model SMT placements")
    n = len(placements)
    blocked, unblocks = unblocking(placements, preds, cores)
    hand = HandOffs(placements, handoff)
    waiting: list[tuple[float, int]] = []  # (start, placement), handed over, not started
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
    width = [len(p.cores) for p in placements]
    sigma = contention.sigma
    while running or waiting:
        over = kappa * max(0.0, sum(demand[j] for j in running) / bandwidth - 1.0)
        busy_cores = sum(width[j] for j in running)
        pace = {j: 1.0 / (1.0 + mu[j] * over + sigma * neighbours(busy_cores, width[j], cores))
                for j in running}
        dt = min((left[j] / pace[j] for j in running), default=float("inf"))
        if waiting and waiting[0][0] < now + dt:  # a handed-over op starts first
            dt = waiting[0][0] - now
            for j in running:
                left[j] = max(0.0, left[j] - dt * pace[j])
            now = waiting[0][0]
            due = []
            while waiting and waiting[0][0] <= now:
                due.append(heapq.heappop(waiting)[1])
            start(due)
            continue
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
                hand.let_go(j, k, now)
                blocked[k] -= 1
                if blocked[k] == 0:
                    newly.append(k)
        later = [k for k in newly if hand.start(k, now) > now]
        for k in later:
            heapq.heappush(waiting, (hand.start(k, now), k))
        start([k for k in newly if k not in later] if later else newly)
    return sim_result(starts, ends, busy, counts, cores, blocked, done == n)


def neighbours(busy: int, own: int, cores: int) -> float:
    """The share of the cores an op does not hold that run other ops: `busy` cores in use in
    all, `own` of them its own."""
    return (busy - own) / (cores - own) if cores > own else 0.0


def fit_contention(alone: Sequence[float], measured: Sequence[float],
                   starts: Sequence[float], ends: Sequence[float], demand: Sequence[float],
                   mu: Sequence[float], bandwidth: float, width: Sequence[int], cores: int
                   ) -> tuple[float, float]:
    """(kappa, sigma) from a measured co-running step: per op, its time alone and co-running
    on `width` of the `cores`, and the planned run's intervals, bandwidth demands and
    memory-boundness. An op's modelled stretch - 1 is about kappa x mu x (the mean over its
    run of max(0, D / B - 1)) + sigma x (the mean share of the other cores busy); the pair is
    the non-negative least-squares fit of the measured stretches - 1 on those two means.

    >>> k, s = fit_contention([1, 1], [1.5, 1], [0, 0], [1, 1], [1.0, 1.0], [1.0, 0.0], 1.0,
    ...                       [1, 1], 2)
    >>> round(k, 6), round(s, 6)   # the streaming op slowed, the compute-bound one not
    (0.5, 0.0)
    >>> k, s = fit_contention([1, 1], [1.2, 1.2], [0, 0], [1, 1], [0.1, 0.1], [0.1, 0.1], 1.0,
    ...                       [1, 1], 2)
    >>> round(k, 6), round(s, 6)   # no bandwidth to share: the neighbours explain it
    (0.0, 0.2)
    """
    points = sorted({*starts, *ends})
    at = {t: k for k, t in enumerate(points)}
    # D and the cores in use over each elementary interval [points[k], points[k + 1]) by
    # difference arrays, then running integrals so that each op reads its own means in O(1).
    d_delta = [0.0] * (len(points) + 1)
    c_delta = [0] * (len(points) + 1)
    for i in range(len(alone)):
        if ends[i] > starts[i]:
            d_delta[at[starts[i]]] += demand[i]
            d_delta[at[ends[i]]] -= demand[i]
            c_delta[at[starts[i]]] += width[i]
            c_delta[at[ends[i]]] -= width[i]
    over, busy = [0.0], [0.0]
    d_total, c_total = 0.0, 0
    for k in range(len(points) - 1):
        d_total += d_delta[k]
        c_total += c_delta[k]
        dt = points[k + 1] - points[k]
        over.append(over[-1] + dt * max(0.0, d_total / bandwidth - 1.0))
        busy.append(busy[-1] + dt * c_total)
    rows: list[tuple[float, float, float]] = []
    for i in range(len(alone)):
        span = ends[i] - starts[i]
        if span <= 0 or alone[i] <= 0 or cores <= width[i]:
            continue
        a, b = at[starts[i]], at[ends[i]]
        x1 = mu[i] * (over[b] - over[a]) / span
        x2 = neighbours((busy[b] - busy[a]) / span, width[i], cores)
        rows.append((x1, x2, measured[i] / alone[i] - 1.0))
    return nonnegative_fit(rows)


def nonnegative_fit(rows: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """The (a, b) >= 0 minimising the sum of (a x1 + b x2 - y)^2 over rows (x1, x2, y): the
    unconstrained solution when it is non-negative, else the better one-variable fit.

    >>> nonnegative_fit([(1, 0, 2), (0, 1, 3), (1, 1, 5)])
    (2.0, 3.0)
    >>> nonnegative_fit([(1, 0, -1), (0, 1, 1)])
    (0.0, 1.0)
    """
    s11 = sum(x1 * x1 for x1, _, _ in rows)
    s22 = sum(x2 * x2 for _, x2, _ in rows)
    s12 = sum(x1 * x2 for x1, x2, _ in rows)
    s1y = sum(x1 * y for x1, _, y in rows)
    s2y = sum(x2 * y for _, x2, y in rows)
    det = s11 * s22 - s12 * s12
    if det > 1e-12 * max(s11 * s22, 1e-300):
        a, b = (s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det
        if a >= 0 and b >= 0:
            return a, b

    def loss(a: float, b: float) -> float:
        return sum((a * x1 + b * x2 - y) ** 2 for x1, x2, y in rows)

    only_a = (max(0.0, s1y / s11), 0.0) if s11 > 0 else (0.0, 0.0)
    only_b = (0.0, max(0.0, s2y / s22)) if s22 > 0 else (0.0, 0.0)
    return min((only_a, only_b), key=lambda ab: loss(*ab))


def step_slowdown(predict: Callable[[float], float], goal: float, most: float = 16.0,
                  rounds: int = 40) -> float:
    """The sigma >= 0 at which `predict(sigma)`, a co-running plan's simulated step (rising
    with sigma), meets `goal`, the step it measured (in the simulator's terms: scaled by the
    one-lane plan's predicted over measured step); by bisection. 0 where sigma 0 already
    predicts it as slow, `most` where even `most` predicts it faster.

    Why the step and not its ops alone: co-running lanes also wait for each other's hand-offs
    (a woken thread: 23-31 us each on the 2-core VM, 1.1-1.7 ms of LSTM's step) and the
    simulator has no term for those; fitted to the ops' stretches only, the figures priced
    LSTM's two-lane plans 12-20% faster than they ran. Fitted to the step, sigma charges
    co-running ops what co-running costs the step.

    >>> step_slowdown(lambda s: 10.0 * (1.0 + 0.5 * s), 12.0)   # a step 20% slower
    0.4
    >>> step_slowdown(lambda s: 10.0 * (1.0 + s), 9.0)          # faster than predicted
    0.0
    """
    if predict(0.0) >= goal:
        return 0.0
    if predict(most) <= goal:
        return most
    low, high = 0.0, most
    for _ in range(rounds):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if predict(mid) < goal else (low, mid)
    return round(0.5 * (low + high), 6)
