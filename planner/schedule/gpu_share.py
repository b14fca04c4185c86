"""Co-running kernels share the GPU: its SMs, by their grids, and its memory bandwidth.

A kernel alone fills a share of the SMs, its occupancy (0, 1]: its resident blocks over what
the SMs hold. Measured launch configurations give it directly (blocks x threads per block over
SMs x 2048 threads); otherwise it follows from the op's parallel work the way the kernels tile
it:

    GEMM-like (convolutions, MatMul: >= GEMM_INTENSITY FLOPs per output element)
        cuBLAS/cuDNN tiles of 128 x 64 outputs, two resident per SM; a long reduction is
        split over K in chunks of SPLIT_K, so units = max(outputs, FLOPs / (2 SPLIT_K))
    element-wise, reductions, copies
        ELEMENTS_PER_THREAD elements per thread over the larger of its inputs and outputs,
        2048 threads per SM

The hardware's block scheduler dispatches the blocks of the kernel launched first before a
later one's, so SMs go to running kernels in the order they started: each gets
min(occupancy, SMs left), and progresses at that share of its occupancy. A kernel that fills
the GPU (occupancy 1) leaves nothing to one started after it, which waits: co-running it
gains nothing. Bandwidth is shared as on the CPU side (planner.schedule.contention, kappa =
1): while the running kernels ask for D > B bytes/s in all, each is slowed by
1 + mu (D / B - 1), mu = min(1, its demand alone / B) its memory-boundness.

    kernels   a (occ 0.5)  b (occ 0.5)  c (occ 1)
    a + b     both at full pace (0.5 + 0.5 <= 1): the step is max(a, b), not a + b
    c then a  a gets no SMs until c ends: a + c, as on one stream

Copies on the copy streams use the copy engines and the host link, not SMs: occupancy 0.

One host thread issues the whole step in plan order (templates/cuda/runtime/executor.cpp):
a kernel launch call, and per cross-stream dependency an event wait, and per op waited on an
event record. On one stream the kernels' own launch cost (planner.costs.analytical) keeps
the host ahead; on several, small kernels can run faster than the host issues them, so an op
starts no earlier than the host has issued the ops before it (`issue_times`).

Example:
    >>> r = simulate_streams([1.0, 1.0, 1.0], [[], [], [1]], [0.5, 0.5, 0.5], [0.0] * 3, 1.0)
    >>> r.start, r.end
    ([0.0, 0.0, 1.0], [1.0, 1.0, 2.0])
    >>> simulate_streams([1.0, 1.0], [[], []], [1.0, 0.5], [0.0] * 2, 1.0).end
    [1.0, 2.0]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Threads one SM holds (every architecture since Maxwell but Turing's 1024; an estimate).
THREADS_PER_SM = 2048
# Element-wise kernels handle this many elements per thread (vectorized loads).
ELEMENTS_PER_THREAD = 4
# GEMM-like kernels: two 128 x 64 output tiles resident per SM.
TILE_OUTPUTS_PER_SM = 2 * 128 * 64
# An op doing at least this many FLOPs per output element is tiled like a GEMM.
GEMM_INTENSITY = 64
# Reduction depth per block of a split-K GEMM (weight gradients: small outputs, long K).
SPLIT_K = 512
# Shares and times closer than this are equal (floating-point slack of the event loop).
EPSILON = 1e-12
# Host seconds of one launch call (cuDNN and cuBLAS calls included) and of one event call
# (cudaEventRecord or cudaStreamWaitEvent): published microbenchmarks put them at 2-5 us and
# about 1 us.
HOST_LAUNCH_SECONDS = 3e-6
HOST_EVENT_SECONDS = 1e-6


def issue_times(streams: Sequence[int], edges: Iterable[tuple[int, int]]) -> list[float]:
    """When the host has issued each op's launch, ops in plan order on `streams` with
    happens-before `edges` (u, w): the launches before it, its own waits for ops on other
    streams, and a record after each op another stream waits for.

    >>> issue_times([0, 1, 0], [(0, 2), (1, 2)])   # op 2 waits for op 1 on stream 1
    [0.0, 3e-06, 8e-06]
    """
    waits = [0] * len(streams)
    recorded = [False] * len(streams)
    for u, w in edges:
        if streams[u] != streams[w]:
            waits[w] += 1
            recorded[u] = True
    out, t = [], 0.0
    for k in range(len(streams)):
        t += HOST_EVENT_SECONDS * waits[k]
        out.append(t)
        t += HOST_LAUNCH_SECONDS + (HOST_EVENT_SECONDS if recorded[k] else 0.0)
    return out


def occupancy(flops: float, outputs: int, inputs: int, sm_count: int,
              launch: tuple[int, int] | None = None) -> float:
    """The share of the GPU's SMs one kernel fills alone (module docstring): from a measured
    launch (threads per block, blocks) when given, else from its FLOPs and element counts.

    >>> occupancy(0, 1 << 30, 1 << 30, 132)                  # a large element-wise op fills it
    1.0
    >>> round(occupancy(2 * 20 * 200 * 800, 20 * 800, 200 * 800, 132), 4)  # an LSTM gate GEMM
    0.0074
    >>> occupancy(0, 0, 0, 132, launch=(256, 132 * 4))       # four 256-thread blocks per SM
    0.5
    """
    if launch is not None and launch[0] > 0 and launch[1] > 0:
        share = launch[0] * launch[1] / (sm_count * THREADS_PER_SM)
    elif outputs > 0 and flops >= GEMM_INTENSITY * outputs:
        share = max(outputs, flops / (2 * SPLIT_K)) / (sm_count * TILE_OUTPUTS_PER_SM)
    else:
        share = max(outputs, inputs) / (sm_count * THREADS_PER_SM * ELEMENTS_PER_THREAD)
    # At least one block of 256 threads on one SM.
    return min(1.0, max(share, 256 / (sm_count * THREADS_PER_SM)))


@dataclass(frozen=True)
class StreamRun:
    """Simulated start and end of every op (start: when it first gets SMs)."""

    start: list[float]
    end: list[float]

    @property
    def step(self) -> float:
        return max(self.end, default=0.0)


def simulate_streams(seconds: Sequence[float], preds: Sequence[Sequence[int]],
                     occ: Sequence[float], demand: Sequence[float], bandwidth: float,
                     issue: Sequence[float] | None = None) -> StreamRun:
    """When each op runs on the GPU: it is issued when its predecessors (its stream's previous
    op and the ops it waits for) end and, with `issue`, not before the host issued it; it
    gets SMs in issue order and shares the bandwidth (module docstring). `occ` 0 is a copy
    (no SMs); `demand` is bytes/s alone. Ops are numbered in a topological order."""
    n = len(seconds)
    waiting = [len(set(p)) for p in preds]
    after = _successors(preds)
    left = [float(s) for s in seconds]
    start: list[float | None] = [None] * n
    end = [0.0] * n
    mu = [min(1.0, d / bandwidth) if bandwidth > 0 else 0.0 for d in demand]
    running: list[int] = []  # in issue order
    now = 0.0
    # Ops whose predecessors ended but the host has not issued yet: (issue time, op).
    held: list[tuple[float, int]] = []

    def release(batch: Iterable[int]) -> None:
        for j in sorted(batch):
            if issue is not None and issue[j] > now + EPSILON:
                heapq.heappush(held, (issue[j], j))
                continue
            running.append(j)

    release(j for j in range(n) if waiting[j] == 0)
    done = 0
    while running or held:
        if not running:
            now = max(now, held[0][0])
        while held and held[0][0] <= now + EPSILON:
            running.append(heapq.heappop(held)[1])
        pace = _paces(running, occ, demand, mu, bandwidth)
        moving = [j for j in running if pace[j] > 0]
        for j in moving:
            if start[j] is None:
                start[j] = now
        dt = min(left[j] / pace[j] for j in moving)
        if held and held[0][0] - now < dt:
            # The host issues an op first: advance to it, nobody finishes.
            _advance(left, moving, pace, held[0][0] - now)
            now = held[0][0]
            continue
        now += dt
        finished = [j for j in moving if left[j] / pace[j] <= dt * (1 + 1e-9) + EPSILON]
        _advance(left, moving, pace, dt)
        ready: list[int] = []
        for j in finished:
            running.remove(j)
            end[j] = now
            done += 1
            for k in after[j]:
                waiting[k] -= 1
                if waiting[k] == 0:
                    ready.append(k)
        release(ready)
    if done != n:
        raise ValueError("the ops' waits form a cycle")
    return StreamRun(start=[s if s is not None else 0.0 for s in start], end=end)


def _successors(preds: Sequence[Sequence[int]]) -> list[list[int]]:
    """Per op, the ops that wait for it (each once)."""
    after: list[list[int]] = [[] for _ in preds]
    for j, ps in enumerate(preds):
        for p in set(ps):
            after[p].append(j)
    return after


def _advance(left: list[float], moving: list[int], pace: dict[int, float], dt: float) -> None:
    """Each moving op's seconds left (alone) after `dt` at its pace."""
    for j in moving:
        left[j] = max(0.0, left[j] - dt * pace[j])


def _paces(running: list[int], occ: Sequence[float], demand: Sequence[float],
           mu: Sequence[float], bandwidth: float) -> dict[int, float]:
    """Per running op (issue order), the fraction of its alone speed it runs at now: SMs go
    in issue order, and the ops that ask more bandwidth than there is slow down by their
    share of the excess; 0 for an op that got no SMs (a copy, occ 0, always runs)."""
    free = 1.0
    pace: dict[int, float] = {}
    for j in running:
        if occ[j] <= 0:
            pace[j] = 1.0
            continue
        got = min(occ[j], max(free, 0.0))
        free -= got
        pace[j] = got / occ[j]
    asked = sum(demand[j] * pace[j] for j in running)
    over = max(0.0, asked / bandwidth - 1.0) if bandwidth > 0 else 0.0
    for j in running:
        if pace[j] > EPSILON:
            pace[j] /= 1.0 + mu[j] * over
        else:
            pace[j] = 0.0
    return pace


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """The time covered by the union of half-open intervals (overlaps counted once).

    >>> busy_seconds([(0, 2), (1, 3), (5, 6)])
    4.0
    """
    total, lo, hi = 0.0, -math.inf, -math.inf
    for a, b in sorted(intervals):
        if a >= hi:
            if hi > lo:
                total += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return total + (hi - lo if hi > lo else 0.0)
