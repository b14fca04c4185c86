"""Lower bounds on any schedule's step time, and the critical path.

DESIGN.md's bound is the larger of two terms:

    critical path   the longest path with every op at its fastest time
    area            sum over ops of min_k (k x t(k)) / capacity

They pull apart: the critical path needs every op on it at its fastest (usually widest, least
efficient) thread count, the area term at its most efficient (usually one thread). No schedule
gets both, so the plan also reports a third term that charges both at once, the allotment bound
(the dual of the linear program of Skutella's and Jansen & Zhang's allotment relaxation):

    for any weights f >= 0 that are (1 - mu) x a mix of source-to-sink paths, 0 <= mu <= 1,
    step >= (1 - mu) x (some path's length) + mu x (work / capacity)
         >= sum over ops i of  min over durations x >= t_i,min of  f_i x + mu h_i(x) / capacity

where h_i is the convex minorant of op i's work k x t(k) as a function of its time t(k) (taking
longer never needs more work than the cheapest count that is at least that fast). Every (f, mu)
gives a valid bound; Frank-Wolfe steps towards the longest path (or the area term) under the
durations the inner minimum picks, and the largest value seen is reported. It lands within half
a percent of the linear program's optimum (solved with HiGHS for comparison) on the bench's
training graphs: ResNet-50 960 vs 963 ms, Inception-v3 273.4 vs 273.9, DCGAN 71.96 vs 71.97,
LSTM 26.27 vs 26.32 (its graph before batched weight gradients).

The allotment bound still lets work use cores whenever they are idle, even where precedence
forbids it: an LSTM's forward recurrence leaves a third of the cores idle, and the relaxation
counts them towards the backward pass's weight gradients, which cannot start before the loss.
The cut bound keeps the phases apart. Any node v splits the graph: its ancestors all finish before
v starts and its descendants all start after v ends, so their two time windows are disjoint, and

    step >= bound(ancestors of v) + fastest(v) + bound(descendants of v)

with each side's allotment bound computed on its own induced subgraph (other nodes are dropped,
which only lowers the bound). v is taken on the critical path, where a split costs nothing in path
length; every node of that path is scored cheaply (cut_bound) and the best gets the relaxations.
On the bench's training graphs (knl-7250) it raises LSTM's bound from 25.4 to 26.6 ms,
Inception-v3's from 273.5 to 276.6, DCGAN's from 72.0 to 73.7, ResNet-50's from 960 to 974.
The bound is the max of all four terms.

capacity is the number of physical cores, times 2 / SMT_SLOWDOWN (1.05) where the target has
hyper-threads: a thread whose core's other hardware thread is busy progresses at 1 / 1.9 of its
pace (simulate.py), so a core does at most 2 / 1.9 cores' worth of thread work per second, and the
bounds stay bounds for schedules that use Strategy 4. An op slowed by SMT only takes longer than
t(k), which the relaxation allows.

Example:
    >>> import numpy as np
    >>> from planner.schedule.costs import OpCosts
    >>> t = np.array([2.0, 1.2])  # 2 s on one thread, 1.2 s on two
    >>> c = OpCosts(times=(t, t, t), affinity=(("compact",) * 2,) * 3, keys=("a",) * 3,
    ...             analytical=())
    >>> b = lower_bound(c, ((), (0,), ()), capacity=2.0)  # 0 -> 1, and 2 on its own
    >>> b.critical_path, b.area, round(b.seconds, 6)  # the best schedule takes 3.2 s
    (2.4, 3.0, 3.2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from planner.graph.deps import successors
from planner.schedule.costs import OpCosts

# Frank-Wolfe steps of the allotment bound, at most; it stops early once PLATEAU_STEPS steps in
# a row gain less than PLATEAU_GAIN (relative), as on chain-like graphs whose critical path is
# the bound from the first step.
ITERATIONS = 200
PLATEAU_STEPS = 100
PLATEAU_GAIN = 1e-5


class Bound(NamedTuple):
    critical_path: float
    area: float
    seconds: float
    allotment: float = 0.0
    cut: float = 0.0
    # Per node, the relaxation's duration (mean of the Frank-Wolfe picks): a guide to how long
    # each op may take, which the optimized strategy turns into thread counts.
    durations: tuple[float, ...] = ()


def capacity(cores: int, smt_width: int, smt_slowdown: float) -> float:
    """Core-equivalents of work the machine can do per second (see the module docstring)."""
    gain = 2.0 / smt_slowdown if smt_width > 1 else 1.0
    return cores * max(1.0, gain)


def bottom_levels(times: Sequence[float], preds: Sequence[Sequence[int]]) -> list[float]:
    """Per node, the longest path from its start to the end of the graph (its time included).

    Nodes are in topological order (every predecessor index is smaller)."""
    level = list(times)
    for i in range(len(preds) - 1, -1, -1):
        for p in preds[i]:
            if level[p] < times[p] + level[i]:
                level[p] = times[p] + level[i]
    return level


def lower_bound(costs: OpCosts, preds: Sequence[Sequence[int]], capacity: float) -> Bound:
    """Critical path, area, allotment and cut bounds, and their max (seconds)."""
    fastest = costs.fastest_seconds
    cp = max(bottom_levels(fastest, preds), default=0.0)
    hulls = Hulls.of(costs)
    # Each hull ends at its curve's least work, min_area (the same floats, summed in order).
    area = sum(hulls.work[:, -1].tolist()) / capacity
    allot, durations = hulls.relax(preds, capacity)
    cut = cut_bound(hulls, preds, capacity, fastest, durations)
    return Bound(critical_path=cp, area=area, seconds=max(cp, area, allot, cut),
                 allotment=allot, cut=cut, durations=tuple(durations))


def work_hull(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (durations ascending, work descending) of the convex minorant of k x t(k)
    against t(k), from the fastest count to the least-work one.

    >>> work_hull(np.array([4.0, 2.0, 1.9]))
    (array([1.9, 2. , 4. ]), array([5.7, 4. , 4. ]))
    """
    work = times * np.arange(1, len(times) + 1)
    order = np.argsort(times, kind="stable")
    by_time = work[order]
    # The Pareto front: each count that takes less work than every count before it in order.
    front = np.empty(len(by_time), dtype=bool)
    front[:1] = True
    front[1:] = by_time[1:] < np.minimum.accumulate(by_time)[:-1]
    pareto = zip(times[order][front].tolist(), by_time[front].tolist(), strict=True)
    hull: list[tuple[float, float]] = []
    for x, w in pareto:
        while len(hull) >= 2:
            (x1, w1), (x2, w2) = hull[-2], hull[-1]
            if (w2 - w1) * (x - x1) >= (w - w1) * (x2 - x1):
                hull.pop()
            else:
                break
        hull.append((x, w))
    # The work stays at its minimum for longer durations: one more vertex at the slowest time.
    hull.append((float(times.max()), hull[-1][1]))
    return np.array([x for x, _ in hull]), np.array([w for _, w in hull])


def allotment_bound(costs: OpCosts, preds: Sequence[Sequence[int]], capacity: float,
                    iterations: int = ITERATIONS) -> float:
    """The largest dual value Frank-Wolfe finds (see the module docstring); 0 for no ops."""
    return Hulls.of(costs).relax(preds, capacity, iterations)[0]


@dataclass(frozen=True)
class Hulls:
    """Every node's work hull as two (nodes x vertices) matrices, short hulls padded with their
    last vertex: durations ascending, work (core-seconds) descending."""

    durations: np.ndarray
    work: np.ndarray

    @staticmethod
    def of(costs: OpCosts) -> Hulls:
        # Nodes of one signature share their curve, and signatures often share its values:
        # one hull per distinct curve, then one row of it per node.
        by_id: dict[int, int] = {}
        by_value: dict[tuple[str, bytes], int] = {}
        hulls: list[tuple[np.ndarray, np.ndarray]] = []
        rows = []
        for t in costs.times:
            if id(t) not in by_id:
                key = (t.dtype.str, t.tobytes())
                if key not in by_value:
                    by_value[key] = len(hulls)
                    hulls.append(work_hull(t))
                by_id[id(t)] = by_value[key]
            rows.append(by_id[id(t)])
        width = max((len(x) for x, _ in hulls), default=1)
        durations = np.empty((len(hulls), width))
        work = np.empty((len(hulls), width))
        for i, (x, w) in enumerate(hulls):
            durations[i, :len(x)], durations[i, len(x):] = x, x[-1]
            work[i, :len(w)], work[i, len(w):] = w, w[-1]
        durations, work = durations[rows], work[rows]
        return Hulls(durations, work)

    def subset(self, nodes: Sequence[int]) -> Hulls:
        return Hulls(self.durations[nodes], self.work[nodes])

    def work_at(self, i: int, duration: float) -> float:
        """Core-seconds of node i stretched to `duration` (on its hull)."""
        return float(np.interp(duration, self.durations[i], self.work[i]))

    def relax(self, preds: Sequence[Sequence[int]], capacity: float,
              iterations: int = ITERATIONS) -> tuple[float, list[float]]:
        """(allotment bound, per node the mean duration the inner minimum picked over the
        steps). The mean picks approximate the relaxation's own solution (the op's time in a
        schedule that balances path length against work)."""
        n = len(preds)
        if n == 0:
            return 0.0, []
        durations, work = self.durations, self.work / capacity
        bands = _bands(durations, work)
        # The steps keep their per-node vectors in band order, each band a slice of them:
        # node order[k] at position k, node v at position[v].
        order = np.concatenate([nodes for nodes, _, _, _ in bands])
        position = np.empty(n, dtype=np.intp)
        position[order] = np.arange(n)
        # Longest paths over the picks, the costliest part of a step: prepared once.
        growing = _strictly_growing(durations)
        longest = _Longest(_Walk.of(preds, growing, position.tolist()), growing, n)
        flow = np.zeros(n)
        flow[_longest_path(durations[order, 0].tolist(), longest.walk)] = 1.0
        mu = 0.0
        # (f = 0, mu = 1) is the area term; the first step, (critical path, mu = 0), the path.
        best = float(work.min(axis=1).sum())
        since = 0
        picks = _Picks(bands, n)
        picked = np.zeros(n)
        steps = 0
        for step in range(iterations):
            picks.pick(flow, mu)
            picked += picks.x
            steps += 1
            found = float(picks.value_at.take(position).sum())  # summed in node order
            if found > best * (1 + PLATEAU_GAIN):
                best, since = found, 0
            else:
                best, since = max(best, found), since + 1
                if since == PLATEAU_STEPS:
                    break
            if step + 1 == iterations:  # no flow after the last step
                break
            gamma = 2.0 / (step + 3.0)
            flow *= 1.0 - gamma
            mu *= 1.0 - gamma
            # Toward the path (flow) or the area term (mu), whichever the picks make longer.
            total_work = float(picks.work_at.take(position).sum())
            path = longest.path_over(picks.x, total_work)
            if path is not None and float(picks.x[path].sum()) >= total_work:
                flow[path] += gamma
            else:
                mu += gamma
        return best, (picked / steps).take(position).tolist()


class _Picks:
    """Per node, the hull vertex a Frank-Wolfe step picks (its duration `x`, its value and
    its work), as vectors in band order written in place at each step."""

    def __init__(self, bands: list[tuple[np.ndarray, ...]], n: int) -> None:
        self.bands = bands
        self.x, self.value_at, self.work_at = np.empty(n), np.empty(n), np.empty(n)
        # Per band, its slice of the vectors, and buffers its products are written into (the
        # same values as fresh arrays, without an allocation per step).
        self.slices = []
        start = 0
        for nodes, band_durations, band_work, _ in bands:
            band = slice(start, start + len(nodes))
            start = band.stop
            self.slices.append((band, np.empty_like(band_durations),
                                np.empty_like(band_durations)))
            if band_durations.shape[1] == 1:  # picked at every step
                self.x[band], self.work_at[band] = band_durations[:, 0], band_work[:, 0]

    def pick(self, flow: np.ndarray, mu: float) -> None:
        """Per node, the hull vertex minimising flow x duration + mu x work (the first, on
        ties), band by band: the same picks and sums as over the padded matrices."""
        x, value_at, work_at = self.x, self.value_at, self.work_at
        for (_, band_durations, band_work, row_starts), (band, value, scaled) in zip(
                self.bands, self.slices, strict=True):
            np.multiply(flow[band, None], band_durations, out=value)
            np.multiply(band_work, mu, out=scaled)
            value += scaled
            if band_durations.shape[1] == 1:  # its only vertex: x, work_at set in __init__
                value_at[band] = value[:, 0]
                continue
            # Flat positions of the picks: take() on them is cheaper than 2-D indexing.
            pick = value.argmin(axis=1)
            pick += row_starts
            band_durations.take(pick, out=x[band])
            value.take(pick, out=value_at[band])
            band_work.take(pick, out=work_at[band])


class _Longest:
    """The longest path over a step's picks. The picks often repeat the last step's (on
    ResNet-1001, 95% of the steps): so does their longest path, the step's costliest part,
    kept rather than searched again: the picks, the path's distances (_distances) and the
    path once traced."""

    def __init__(self, walk: _Walk, growing: bool, n: int) -> None:
        self.walk, self.growing = walk, growing
        self.last_x: np.ndarray = np.empty(0)
        self.dist, self.via, self.end = [0.0], [-1], 0
        self.path: np.ndarray | None = None
        # With positive durations (growing), the path's length summed along it (dist[end])
        # and as x[path].sum() differ by rounding only, less than this fraction of it.
        self.slack = n * 2.0**-50

    def path_over(self, x: np.ndarray, total_work: float) -> np.ndarray | None:
        """The longest path's nodes at durations x; None where it is surely shorter than
        `total_work` (no path needed)."""
        if not np.array_equal(x, self.last_x):
            self.last_x = x.copy()
            (self.dist, self.via, self.end), self.path = _distances(x.tolist(), self.walk), None
        if self.growing and self.dist[self.end] < total_work * (1.0 - self.slack):
            return None
        if self.path is None:  # an index array, once: a list would be converted at each use
            self.path = np.array(_trace(self.via, self.end))
        return self.path


# A band costs a few numpy calls per Frank-Wolfe step: as much time as this many matrix cells.
BAND_CELLS = 4096


def _bands(durations: np.ndarray, work: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """The nodes grouped by hull length, each group's matrices cut to its longest hull.

    A vertex whose work equals the previous vertex's never wins a first-minimum pick: it is no
    faster (durations ascend) and, with flow and mu >= 0, flow x duration + mu x work rounds to
    no less. That drops the hull's last vertex (the least work again at the slowest time) and
    the padding, so skipping them changes nothing but the time (ResNet-1001's hulls: a third
    of the width); a node whose fastest count is its least-work one keeps a single vertex.
    The bands minimise cells plus BAND_CELLS per band over cuts of the ascending lengths.

    Returns (node indices, durations, work, each row's first flat position) per band."""
    width = work.shape[1]
    changes = work[:, 1:] != work[:, :-1]
    # Per node, the columns up to its last change of work.
    last = np.where(changes.any(axis=1), width - 1 - np.argmax(changes[:, ::-1], axis=1), 0)
    lengths = last + 1
    sizes, counts = np.unique(lengths, return_counts=True)
    sizes, rows = sizes.tolist(), np.cumsum(counts).tolist()
    # cost[k]: the least cost of banding every node no longer than sizes[k - 1]; cut[k] where
    # its last band starts.
    cost, cut = [0.0], [0]
    for k in range(1, len(sizes) + 1):
        options = [cost[j] + BAND_CELLS + sizes[k - 1] * (rows[k - 1] - (rows[j - 1] if j else 0))
                   for j in range(k)]
        j = options.index(min(options))
        cost.append(options[j])
        cut.append(j)
    out = []
    k = len(sizes)
    while k:
        j = cut[k]
        low = sizes[j - 1] if j else 0
        nodes = np.flatnonzero((lengths > low) & (lengths <= sizes[k - 1]))
        w = sizes[k - 1]
        out.append((nodes, durations[nodes, :w], work[nodes, :w], np.arange(len(nodes)) * w))
        k = j
    return out[::-1]


def cut_bound(hulls: Hulls, preds: Sequence[Sequence[int]], capacity: float,
              fastest: Sequence[float], durations: Sequence[float]) -> float:
    """The cut bound at the most promising node of the critical path (module docstring).

    Every node v of the critical path is scored with the relaxation's `durations` standing in
    for each side's own relaxation: max(longest path, work / capacity) over its ancestors, plus
    v, plus the same over its descendants (one sweep along the path each way gives every
    node's sums). The best-scored v gets the real bound: the allotment relaxation of each side.
    """
    n = len(preds)
    path = longest_path(fastest, preds)
    if n < 3 or len(path) < 3:
        return 0.0
    succs = successors(preds)
    work = [hulls.work_at(i, x) / capacity for i, x in enumerate(durations)]
    top = top_levels(durations, preds)
    bottom = bottom_levels(durations, preds)
    before = _closure_sums(path, preds, work)
    after = _closure_sums(path[::-1], succs, work)[::-1]
    scores = [max(top[v], before[j]) + fastest[v]
              + max(bottom[v] - durations[v], after[j]) for j, v in enumerate(path)]
    v = path[int(np.argmax(scores))]
    sides = [sorted(_closure(v, preds)), sorted(_closure(v, succs))]
    return fastest[v] + sum(_induced_bound(hulls, preds, side, capacity) for side in sides)


def _induced_bound(hulls: Hulls, preds: Sequence[Sequence[int]], nodes: Sequence[int],
                   capacity: float) -> float:
    """The allotment bound of the subgraph induced by `nodes` (sorted, so still topological)."""
    if not nodes:
        return 0.0
    index = {v: k for k, v in enumerate(nodes)}
    sub_preds = [[index[p] for p in preds[v] if p in index] for v in nodes]
    return hulls.subset(nodes).relax(sub_preds, capacity)[0]


def _closure(v: int, edges: Sequence[Sequence[int]]) -> set[int]:
    """Nodes reachable from v along `edges` (v's ancestors for preds), v excluded."""
    seen: set[int] = set()
    stack = [v]
    while stack:
        for u in edges[stack.pop()]:
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


def _closure_sums(chain: Sequence[int], edges: Sequence[Sequence[int]],
                  weight: Sequence[float]) -> list[float]:
    """For each node of a chain (each reachable from the next along `edges`), the weight of
    the nodes reachable from it, v excluded: O(nodes + edges) for the whole chain."""
    seen = bytearray(len(edges))
    total = 0.0
    sums = []
    for v in chain:
        stack = [v]
        while stack:
            for u in edges[stack.pop()]:
                if not seen[u]:
                    seen[u] = 1
                    total += weight[u]
                    stack.append(u)
        sums.append(total)
    return sums


def top_levels(times: Sequence[float], preds: Sequence[Sequence[int]]) -> list[float]:
    """Per node, the longest path from the graph's start to the node's start."""
    top = [0.0] * len(preds)
    for i, ps in enumerate(preds):
        for p in ps:
            if top[i] < top[p] + times[p]:
                top[i] = top[p] + times[p]
    return top


def longest_path(times: Sequence[float], preds: Sequence[Sequence[int]]) -> list[int]:
    """Node indices of a longest path (node weights `times`), from its first node."""
    return _longest_path(times, _Walk.of(preds, growing=False))


class _Walk(NamedTuple):
    """A graph prepared for many longest paths (_distances), its nodes at given positions of
    the lists of times and distances (at each node's index where not said)."""

    # Per node in graph order, its position.
    at: Sequence[int]
    # Per node in graph order, its predecessors' positions; on a growing walk (below), an
    # only predecessor's as an int (four in five of a step graph's nodes once shortcuts go).
    preds: list[int | tuple[int, ...]]
    # Per position, the predecessor a longest path to it comes through where that is fixed:
    # the only one on a growing walk; else -1.
    via: list[int]
    # The positions a longest path may end at, in graph order, and a getter of their
    # distances from a list of every position's (None for one: itemgetter gives no tuple).
    ends: tuple[int, ...]
    end_distances: itemgetter | None

    @staticmethod
    def of(preds: Sequence[Sequence[int]], growing: bool,
           at: Sequence[int] | None = None) -> _Walk:
        """`growing`: every path's length grows strictly at each node (_strictly_growing).
        Then shortcut edges go (_without_shortcuts, up to SHORTCUT_NODES nodes), every
        node's path is longer than 0 (so
        an only predecessor is the way in), and paths end at sinks only: a node's successor
        ends strictly later."""
        n = len(preds)
        at = range(n) if at is None else at
        ends = range(n)
        if growing:
            if n <= SHORTCUT_NODES:
                preds = _without_shortcuts(preds)
            ends = sorted(set(ends).difference(p for ps in preds for p in ps))
        ends = tuple(at[v] for v in ends)
        walk = [at[ps[0]] if growing and len(ps) == 1 else tuple(at[p] for p in ps)
                for ps in preds]
        via = [-1] * n
        for v, ps in enumerate(walk):
            if ps.__class__ is int:
                via[at[v]] = ps
        return _Walk(at, walk, via, ends, itemgetter(*ends) if len(ends) > 1 else None)


def _longest_path(times: Sequence[float], walk: _Walk) -> list[int]:
    """longest_path, the first longest: per node the first predecessor ending strictly later
    than 0 and than every one before it, and the first node ending last."""
    return _trace(*_distances(times, walk)[1:])


def _distances(times: Sequence[float], walk: _Walk) -> tuple[list[float], list[int], int]:
    """Per node the longest path's length to its end and its predecessor on that path (-1:
    none), and the node where the first longest path ends."""
    dist = [0.0] * len(walk.preds)
    via = walk.via.copy()
    for i, ps in zip(walk.at, walk.preds, strict=True):
        if ps.__class__ is int:  # the loop below, where it would take ps (_Walk.of)
            dist[i] = dist[ps] + times[i]
            continue
        best, arg = 0.0, -1
        for p in ps:
            d = dist[p]
            if d > best:
                best, arg = d, p
        dist[i] = best + times[i]
        via[i] = arg
    if walk.end_distances is None:
        end = walk.ends[0] if walk.ends else -1
    else:
        last = walk.end_distances(dist)
        end = walk.ends[last.index(max(last))]  # the first longest, as max with a key picks
    return dist, via, end


def _trace(via: Sequence[int], end: int) -> list[int]:
    """The path to `end` along `via`, from its first node."""
    path = []
    while end >= 0:
        path.append(end)
        end = via[end]
    return path[::-1]


# _without_shortcuts holds a bit set of ancestors per node until its last successor: a training
# graph's forward nodes wait for the backward pass, up to nodes^2 / 16 bytes (25 MB at this
# size, ResNet-1001's 10,712 nodes 3.5 MB). Larger graphs walk every edge.
SHORTCUT_NODES = 20_000


def _without_shortcuts(preds: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """preds less each edge p -> v where p is also an ancestor of another predecessor of v:
    a longer way from p to v exists (a third of the step graphs' edges)."""
    last_use = [-1] * len(preds)  # per node, its last successor
    for v, ps in enumerate(preds):
        for p in ps:
            last_use[p] = v
    # Per node, its ancestors as a bit set, dropped after its last successor: the sets
    # held at once are the graph's width, not its length.
    ancestors: list[int] = []
    out = []
    for v, ps in enumerate(preds):
        covered = 0
        for q in ps:
            covered |= ancestors[q]
        out.append(tuple(p for p in ps if not covered >> p & 1))
        for p in ps:
            covered |= 1 << p
            if last_use[p] == v:
                ancestors[p] = 0
        ancestors.append(covered if last_use[v] > v else 0)
    return out


def _strictly_growing(durations: np.ndarray) -> bool:
    """Whether, whatever vertex of its hull each node takes, a path's length grows strictly at
    each node as it is summed: every duration is positive and at least 2^-40 of the longest
    conceivable path (every node at its slowest), above the rounding step of any path's
    length (2^-52 of it). Then a node's predecessor that is also an ancestor of another
    predecessor is strictly shorter than that one, so dropping its edge changes no longest
    path, tie-breaks included (_Walk.of)."""
    if durations.size == 0:
        return False
    shortest, total = float(durations.min()), float(durations.max(axis=1).sum())
    return bool(0.0 < shortest and np.isfinite(total) and shortest >= total * 2.0**-40)
