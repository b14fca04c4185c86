"""Layout: buffers -> offsets in the device arena (and the pinned host pool), plus the ordering
edges their reuse needs.

    persistent   params, state, optimizer state: live for the whole step, so they conflict with
                 everything; stacked at the bottom of the arena, largest first
    the rest     placed above them by the allocation heuristics (planner.memory.arena)
    aliases      an in-place update takes the offset of the buffer it updates
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

from collections.abc import Sequence
from dataclasses import dataclass

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
            heuristics: Sequence[str] = tuple(ALL_HEURISTICS)) -> Layout:
    """Offsets for every buffer (see the module docstring). `hb` gains the reuse edges."""
    offsets, arena, host, heuristic = place(buffers, alignment, heuristics)
    edges = reuse_edges(buffers, offsets, hb)
    return Layout(tuple(offsets), arena, host, heuristic, tuple(edges))


def place(buffers: Sequence[Buffer], alignment: int = 64,
          heuristics: Sequence[str] = tuple(ALL_HEURISTICS)) -> tuple[list[int], Bytes, Bytes,
                                                                       str]:
    """(offsets, device arena bytes, host pool bytes, winning heuristic), without edges."""
    offsets = [0] * len(buffers)
    index = {b.name: i for i, b in enumerate(buffers)}
    before = min((b.start for b in buffers), default=0.0)
    after = max((b.end for b in buffers), default=0.0)
    arena, host, heuristic = 0, 0, ""
    for placement in ("device", "host"):
        own = [i for i, b in enumerate(buffers) if b.placement == placement and not b.alias_of]
        always = sorted((i for i in own if whole_step(buffers[i], before, after)),
                        key=lambda i: (-buffers[i].bytes, buffers[i].name))
        top = 0
        for i in always:
            offsets[i] = top
            top += aligned(buffers[i].bytes, alignment)
        rest = [i for i in own if not whole_step(buffers[i], before, after)]
        blocks = [Block(buffers[i].bytes, buffers[i].start, buffers[i].end) for i in rest]
        placed = allocate(blocks, heuristics, alignment) if blocks else None
        if placed is not None:
            for i, off in zip(rest, placed.offsets, strict=True):
                offsets[i] = top + off
            top += placed.arena
        if placement == "device":
            arena, heuristic = top, placed.heuristic if placed else ""
        else:
            host = top
    for i, b in enumerate(buffers):
        if b.alias_of:
            offsets[i] = offsets[index[b.alias_of]]
    return offsets, arena, host, heuristic


def free_at(buffers: Sequence[Buffer], offsets: Sequence[int], time: float,
            alignment: int = 1) -> tuple[list[tuple[int, int]], int]:
    """Free device byte ranges [lo, hi) between the buffers live at `time`, and the top of
    them (the first byte above every live buffer)."""
    live = sorted((offsets[i], offsets[i] + aligned(b.bytes, alignment))
                  for i, b in enumerate(buffers)
                  if b.placement == "device" and not b.alias_of and b.start <= time < b.end)
    gaps, top = [], 0
    for lo, hi in live:
        if lo > top:
            gaps.append((top, lo))
        top = max(top, hi)
    return gaps, top
