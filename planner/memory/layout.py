"""Layout: buffers -> offsets in the device arena (and the pinned host pool), plus the ordering
edges their reuse needs.

    persistent   params, state, optimizer state: live for the whole step, so they conflict with
                 everything; stacked at the bottom of the arena, largest first
    the rest     placed above them by the allocation heuristics (planner.memory.arena)
    aliases      an in-place update takes the offset of the buffer it updates
    buckets      an in-place all-reduce's gradients lie side by side, in order, each at the
                 previous one's end rounded up to the alignment: one block to the heuristics,
                 live from its first gradient's write to its last use; a sharded bucket's
                 block (a reduce-scatter's gradients, a sharded update's parameters, which
                 are stacked with the persistent ones) is padded to its ranks' shards
    host         offloaded copies, in their own pool, by the same heuristics

    arena  [ persistent ... | transient buffers, reused over time ...              ]
           0                P                                                  arena

Example:
    >>> from planner.memory.liveness import Buffer
    >>> from planner.memory.order import HappensBefore
    >>> bufs = [Buffer("w", "w", 100, -1.0, 9.0, -1, 2, -1, (0,), "persistent"),
    ...         Buffer("a", "a", 8, 0.0, 2.0, 0, 1, 0, (1,), "activation"),
    ...         Buffer("b", "b", 8, 1.0, 3.0, 1, 1, 1, (), "activation")]
    >>> lay = lay_out(bufs, HappensBefore(2, [(0, 1)]), alignment=4)
    >>> lay.offsets, lay.arena
    ((0, 100, 108), 116)
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.memory.arena import HEURISTICS as ALL_HEURISTICS
from planner.memory.arena import Block, aligned, allocate
from planner.memory.liveness import Buffer
from planner.memory.order import HappensBefore, OpIndex
from planner.memory.reuse import reuse_edges

Bytes = int


@dataclass(frozen=True)
class Layout:
    """Offsets per buffer (input order), the device arena and host pool sizes, the heuristic
    that placed the transient buffers, and the ordering edges reuse needs."""

    offsets: tuple[int, ...]
    arena: Bytes
    host: Bytes
    heuristic: str
    edges: tuple[tuple[OpIndex, OpIndex], ...]


def whole_step(b: Buffer, before: float, after: float) -> bool:
    return b.start <= before and b.end >= after


def lay_out(buffers: Sequence[Buffer], hb: HappensBefore, alignment: int = 64,
            heuristics: Sequence[str] = tuple(ALL_HEURISTICS), first: Sequence[str] = (),
            limit: Bytes | None = None) -> Layout | None:
    """Offsets for every buffer (see the module docstring). `hb` gains the reuse edges.
    `first`: heuristics to try first, for speed only (arena.allocate). `limit`: None when
    the arena would exceed it (found early), else the same layout."""
    placed = place(buffers, alignment, heuristics, first, limit)
    if placed is None:
        return None
    offsets, arena, host, heuristic = placed
    edges = reuse_edges(buffers, offsets, hb)
    return Layout(tuple(offsets), arena, host, heuristic, tuple(edges))


def place(buffers: Sequence[Buffer], alignment: int = 64,
          heuristics: Sequence[str] = tuple(ALL_HEURISTICS), first: Sequence[str] = (),
          limit: Bytes | None = None) -> tuple[list[int], Bytes, Bytes, str] | None:
    """(offsets, device arena bytes, host pool bytes, winning heuristic), without edges.
    With `limit`: None when the device arena would exceed it, else the same result (the
    heuristics stop early: a budget search laying out states that do not fit)."""
    offsets = [0] * len(buffers)
    index = {b.name: i for i, b in enumerate(buffers)}
    before = min((b.start for b in buffers), default=0.0)
    after = max((b.end for b in buffers), default=0.0)
    arena, host, heuristic = 0, 0, ""
    for placement in ("device", "host"):
        own = [i for i, b in enumerate(buffers) if b.placement == placement and not b.alias_of]
        # One unit per bucket (its members, in order, side by side within it), one per other
        # buffer.
        always = _units(buffers, [i for i in own if whole_step(buffers[i], before, after)])
        spans = {id(m): _unit_bytes(buffers, m, alignment) for m in always}
        always.sort(key=lambda m: (-spans[id(m)], buffers[m[0]].name))
        top = 0
        for m in always:
            _stack(buffers, m, top, alignment, offsets)
            top += aligned(spans[id(m)], alignment)
        members = _units(buffers, [i for i in own if not whole_step(buffers[i], before, after)])
        blocks = [_unit_block(buffers, m, alignment) for m in members]
        # The host pool is plentiful: its first heuristic is enough.
        ask = heuristics if placement == "device" else heuristics[:1]
        cap = None if limit is None or placement == "host" else limit - top
        if cap is not None and cap < 0:
            return None
        placed = allocate(blocks, ask, alignment, first, cap) if blocks else None
        if cap is not None and blocks and placed is None:
            return None
        if placed is not None:
            for m, off in zip(members, placed.offsets, strict=True):
                _stack(buffers, m, top + off, alignment, offsets)
            top += placed.arena
        if placement == "device":
            arena, heuristic = top, placed.heuristic if placed else ""
        else:
            host = top
    for i, b in enumerate(buffers):
        if b.alias_of:
            offsets[i] = offsets[index[b.alias_of]]
    return offsets, arena, host, heuristic


def _units(buffers: Sequence[Buffer], indices: Sequence[int]) -> list[list[int]]:
    # The buffers at `indices` grouped by bucket (members in bucket order), one per other.
    units: list[list[int]] = []
    bucket: dict[str, list[int]] = {}
    for i in indices:
        name = buffers[i].bucket
        if not name:
            units.append([i])
        elif name in bucket:
            bucket[name].append(i)
        else:
            units.append(bucket.setdefault(name, [i]))
    for m in bucket.values():
        m.sort(key=lambda i: buffers[i].bucket_at)
    return units


def _unit_bytes(buffers: Sequence[Buffer], m: Sequence[int], alignment: int) -> Bytes:
    # A bucket: every member but the last rounded up (as _stack lays them out), or its
    # padded size when split into shards.
    span = sum(aligned(buffers[i].bytes, alignment) for i in m[:-1]) + buffers[m[-1]].bytes
    return max(span, buffers[m[0]].bucket_bytes)


def _unit_block(buffers: Sequence[Buffer], m: Sequence[int], alignment: int) -> Block:
    # What the heuristics place of a unit: most are one buffer (a few thousand per plan).
    if len(m) == 1:
        b = buffers[m[0]]
        return Block(max(b.bytes, b.bucket_bytes), b.start, b.end)
    return Block(_unit_bytes(buffers, m, alignment), min(buffers[i].start for i in m),
                 max(buffers[i].end for i in m))


def _stack(buffers: Sequence[Buffer], m: Sequence[int], at: int, alignment: int,
           offsets: list[int]) -> None:
    for i in m:
        offsets[i] = at
        at += aligned(buffers[i].bytes, alignment)


class FreeBytes:
    """Free device byte ranges at any time, for many queries over one layout. Buffers live
    for the whole step (stacked at the bottom by `place`) form a floor below every gap."""

    def __init__(self, buffers: Sequence[Buffer], offsets: Sequence[int],
                 alignment: int = 1) -> None:
        keep = [i for i, b in enumerate(buffers) if b.placement == "device" and not b.alias_of]
        before = min((buffers[i].start for i in keep), default=0.0)
        after = max((buffers[i].end for i in keep), default=0.0)
        always = [i for i in keep if whole_step(buffers[i], before, after)]
        self.floor = max((offsets[i] + aligned(buffers[i].bytes, alignment) for i in always),
                         default=0)
        if any(offsets[i] >= self.floor for i in always) or \
                sum(aligned(buffers[i].bytes, alignment) for i in always) != self.floor:
            self.floor, always = 0, []  # not stacked from 0: treat them like any other
        floor_set = set(always)
        keep = [i for i in keep if i not in floor_set]
        self.start = np.array([buffers[i].start for i in keep], dtype=float)
        self.end = np.array([buffers[i].end for i in keep], dtype=float)
        self.lo = np.array([offsets[i] for i in keep], dtype=np.int64)
        self.hi = self.lo + np.array([aligned(buffers[i].bytes, alignment) for i in keep],
                                     dtype=np.int64)

    def sweep(self, times: Sequence[float]):
        """`at(t)` for ascending times, keeping the live set as time advances (fast when few
        buffers are live at once)."""
        by_start = np.argsort(self.start, kind="stable")
        live: set[int] = set()
        ending: list[tuple[float, int]] = []
        k = 0
        for t in times:
            while k < len(by_start) and self.start[by_start[k]] <= t:
                i = int(by_start[k])
                live.add(i)
                heapq.heappush(ending, (float(self.end[i]), i))
                k += 1
            while ending and ending[0][0] <= t:
                live.discard(heapq.heappop(ending)[1])
            yield self._gaps(np.fromiter(live, dtype=np.int64, count=len(live)))

    def at(self, time: float) -> tuple[np.ndarray, np.ndarray, int]:
        """(gap starts, gap ends, top) at `time`: free ranges [lo, hi) between live buffers,
        and the first byte above them all."""
        return self._gaps(np.nonzero((self.start <= time) & (time < self.end))[0])

    def _gaps(self, live: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        order = np.argsort(self.lo[live], kind="stable")
        lo, hi = self.lo[live][order], self.hi[live][order]
        if not len(lo):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), self.floor
        tops = np.maximum.accumulate(np.maximum(hi, self.floor))
        below = np.concatenate(([self.floor], tops[:-1]))
        open_ = lo > below
        return below[open_], lo[open_], int(tops[-1])
