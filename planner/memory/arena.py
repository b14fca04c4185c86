"""Arena offsets: place buffers in one block of bytes so that buffers live at the same time
never overlap. Several greedy heuristics run; the smallest arena wins.

    best-fit-size      largest buffer first, each into the smallest gap that holds it among
                       the buffers it is live with (TFLite's "greedy by size")
    best-fit-size-start  the same, equal sizes by first write
    best-fit-breadth   buffers live at the busiest times first (largest breadth, then size),
                       each into the smallest fitting gap (TFLite's "greedy by breadth")
    first-fit-size     largest first, each at the lowest offset that holds it
    first-fit-start    in order of first write, each at the lowest fitting offset: what a
                       dynamic allocator would do
    perturbed-size     a seeded multi-start around greedy by size (noisy size, area, size
                       class and start orders; best and first fit), as many tries as a fixed
                       work budget allows

The result is checked against LOAD, the peak of live bytes (a lower bound on any arena):
fragmentation = arena / LOAD - 1.

    offset
      ^   |  c  |           |     d      |
      |   |-----|  b        |------------|
      |   |  a              |  e         |
      +---+-----------------+------------+--> time
    a and b overlap in time so they stack; d reuses c's bytes after c's last read

Every buffer is a half-open interval in time, [start, end), and in bytes, [offset, offset +
size); sizes are rounded up to `alignment`.

Example:
    >>> blocks = [Block(8, 0.0, 2.0), Block(8, 1.0, 3.0), Block(16, 2.0, 4.0)]
    >>> a = allocate(blocks)
    >>> a.arena, a.offsets
    (24, (0, 16, 0))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Bytes = int
Offset = int  # bytes from the arena's start


@dataclass(frozen=True)
class Block:
    """What the allocator sees of a buffer: its size and its lifetime [start, end)."""

    size: Bytes
    start: float
    end: float


@dataclass(frozen=True)
class Allocation:
    """Offsets per block (in the input order), the arena size and the heuristic that won."""

    offsets: tuple[Offset, ...]
    arena: Bytes
    heuristic: str


def aligned(size: Bytes, alignment: int) -> Bytes:
    return -(-size // alignment) * alignment


class _TimeIndex:
    """Placed blocks by lifetime, so that a query scans only blocks that may overlap it: short
    ones in fixed time buckets, long ones (spanning many buckets) in one list."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        n = len(starts)
        self.count = max(1, min(4096, n // 8))
        self.lo = float(starts.min()) if n else 0.0
        span = (float(ends.max()) - self.lo) if n else 1.0
        self.width = span / self.count if span > 0 else 1.0
        self.buckets: list[list[int]] = [[] for _ in range(self.count)]
        self.sizes = np.zeros(self.count, dtype=np.int64)
        self.long: list[int] = []
        self.limit = max(1, self.count // 16)

    def _range(self, start: float, end: float) -> tuple[int, int]:
        b0 = int((start - self.lo) / self.width)
        b1 = int((end - self.lo) / self.width)
        return max(0, min(b0, self.count - 1)), max(0, min(b1, self.count - 1))

    def add(self, i: int, start: float, end: float) -> None:
        b0, b1 = self._range(start, end)
        if b1 - b0 >= self.limit:
            self.long.append(i)
            return
        for b in range(b0, b1 + 1):
            self.buckets[b].append(i)
        self.sizes[b0:b1 + 1] += 1

    def candidates(self, start: float, end: float, placed: int) -> np.ndarray | None:
        """Ids of placed blocks that may overlap [start, end) (some twice), or None when
        that is no fewer than half of all `placed` (scan them all instead)."""
        b0, b1 = self._range(start, end)
        count = len(self.long) + int(self.sizes[b0:b1 + 1].sum())
        if 2 * count >= placed:
            return None
        ids = list(self.long)
        for b in range(b0, b1 + 1):
            ids.extend(self.buckets[b])
        return np.array(ids, dtype=np.int64)


def _place(blocks: Sequence[Block], order: Sequence[int], alignment: int,
           best_fit: bool) -> tuple[list[Offset], Bytes]:
    """Place blocks in `order`, each in a gap among the already placed blocks it overlaps in
    time: the smallest that holds it (best fit) or the lowest (first fit), else on top."""
    n = len(blocks)
    starts = np.array([b.start for b in blocks], dtype=float)
    ends = np.array([b.end for b in blocks], dtype=float)
    sizes = np.array([aligned(b.size, alignment) for b in blocks], dtype=np.int64)
    offsets = np.zeros(n, dtype=np.int64)
    index = _TimeIndex(starts, ends)
    placed = np.zeros(n, dtype=np.int64)  # ids in placement order
    k = 0
    arena = 0
    for i in order:
        size = int(sizes[i])
        offset = 0
        near = index.candidates(starts[i], ends[i], k)
        if near is None:
            near = placed[:k]
        # Duplicates in `near` are harmless: a repeated block leaves no gap of its own.
        live = near[(starts[near] < ends[i]) & (starts[i] < ends[near])]
        if len(live):
            offs = offsets[live]
            by_offset = np.argsort(offs, kind="stable")
            offs = offs[by_offset]
            tops = np.maximum.accumulate(offs + sizes[live][by_offset])
            below = np.concatenate(([0], tops[:-1]))
            gaps = offs - below
            fits = np.nonzero(gaps >= size)[0]
            if len(fits):
                pick = fits[np.argmin(gaps[fits])] if best_fit else fits[0]
                offset = int(below[pick])
            else:
                offset = int(tops[-1])
        if starts[i] < ends[i]:  # an empty lifetime conflicts with nothing
            index.add(int(i), starts[i], ends[i])
            placed[k] = i
            k += 1
        offsets[i] = offset
        arena = max(arena, offset + size)
    return [int(o) for o in offsets], arena


def breadths(blocks: Sequence[Block]) -> np.ndarray:
    """Per block, the most bytes live at any time of its lifetime (its own included)."""
    if not blocks:
        return np.zeros(0, dtype=np.int64)
    times = np.unique(np.array([b.start for b in blocks] + [b.end for b in blocks]))
    first = np.searchsorted(times, [b.start for b in blocks])
    last = np.searchsorted(times, [b.end for b in blocks])
    delta = np.zeros(len(times) + 1, dtype=np.int64)
    np.add.at(delta, first, [b.size for b in blocks])
    np.subtract.at(delta, last, [b.size for b in blocks])
    live = np.cumsum(delta)[:-1]
    out = np.zeros(len(blocks), dtype=np.int64)
    for i, (a, z) in enumerate(zip(first, last, strict=True)):
        out[i] = live[a:z].max() if z > a else blocks[i].size
    return out


def best_fit_size(blocks: Sequence[Block], alignment: int) -> tuple[list[Offset], Bytes]:
    # Among equal sizes, the longest-lived first: short ones then fill the gaps around them.
    order = sorted(range(len(blocks)),
                   key=lambda i: (-blocks[i].size, blocks[i].start - blocks[i].end, i))
    return _place(blocks, order, alignment, best_fit=True)


def best_fit_size_start(blocks: Sequence[Block], alignment: int) -> tuple[list[Offset], Bytes]:
    order = sorted(range(len(blocks)), key=lambda i: (-blocks[i].size, blocks[i].start, i))
    return _place(blocks, order, alignment, best_fit=True)


def best_fit_breadth(blocks: Sequence[Block], alignment: int) -> tuple[list[Offset], Bytes]:
    width = breadths(blocks)
    order = sorted(range(len(blocks)),
                   key=lambda i: (-int(width[i]), -blocks[i].size, blocks[i].start, i))
    return _place(blocks, order, alignment, best_fit=True)


def first_fit_size(blocks: Sequence[Block], alignment: int) -> tuple[list[Offset], Bytes]:
    order = sorted(range(len(blocks)),
                   key=lambda i: (-blocks[i].size, blocks[i].start - blocks[i].end, i))
    return _place(blocks, order, alignment, best_fit=False)


# Work (blocks x orders) the perturbed search may spend; small problems get the most tries.
SEARCH_WORK = 40_000
SEARCH_TRIES = 256


def perturbed_size(blocks: Sequence[Block], alignment: int) -> tuple[list[Offset], Bytes]:
    """A seeded multi-start around greedy by size: orders by size scaled by random noise (up
    to 2x), by size x lifetime with noise, by coarse size classes in random order, and by
    first write with jitter, each placed by best and by first fit; the best arena wins."""
    n = len(blocks)
    tries = min(SEARCH_TRIES, SEARCH_WORK // max(n, 1), 2 * n)
    best: tuple[list[Offset], Bytes] | None = None
    rng = np.random.default_rng(n)
    sizes = np.array([b.size for b in blocks], dtype=float)
    spans = np.array([b.end - b.start for b in blocks], dtype=float)
    starts = np.array([b.start for b in blocks], dtype=float)
    classes = np.round(np.log2(np.maximum(sizes, 1)))
    span = float(spans.max()) if n else 1.0
    for k in range(tries):
        noise = rng.random(n)
        kind = (k // 2) % 4
        if kind == 0:
            key = -sizes * (1.0 + noise)
        elif kind == 1:
            key = -sizes * spans * (1.0 + noise)
        elif kind == 2:
            key = -classes - 0.999 * noise  # classes in order, random within a class
        else:
            key = starts + 0.01 * span * noise
        order = [int(i) for i in np.lexsort((np.arange(n), key))]
        found = _place(blocks, order, alignment, best_fit=bool(k % 2))
        if best is None or found[1] < best[1]:
            best = found
    return best if best is not None else best_fit_size(blocks, alignment)


def first_fit_start(blocks: Sequence[Block], alignment: int) -> tuple[list[Offset], Bytes]:
    order = sorted(range(len(blocks)), key=lambda i: (blocks[i].start, -blocks[i].size, i))
    return _place(blocks, order, alignment, best_fit=False)


# Above LARGE blocks `allocate` skips the heuristics that vary another one's tie-breaks;
# above HUGE it runs only the first heuristic asked for (greedy by size by default).
LARGE = 5000
HUGE = 20000
REDUNDANT = frozenset({"best-fit-size-start", "first-fit-size"})

Heuristic = Callable[[Sequence[Block], int], tuple[list[Offset], Bytes]]
HEURISTICS: dict[str, Heuristic] = {
    "best-fit-size": best_fit_size,
    "best-fit-size-start": best_fit_size_start,
    "best-fit-breadth": best_fit_breadth,
    "first-fit-size": first_fit_size,
    "first-fit-start": first_fit_start,
    "perturbed-size": perturbed_size,
}


def allocate(blocks: Sequence[Block], heuristics: Sequence[str] = tuple(HEURISTICS),
             alignment: int = 1) -> Allocation:
    """Offsets for `blocks` from each named heuristic; the smallest arena wins (ties: the
    first named). Raises ValueError for an unknown heuristic name."""
    unknown = [h for h in heuristics if h not in HEURISTICS]
    if unknown or not heuristics:
        raise ValueError(f"unknown allocation heuristic(s) {unknown}; known: "
                         f"{sorted(HEURISTICS)}")
    if len(blocks) > HUGE:
        heuristics = list(heuristics[:1])
    elif len(blocks) > LARGE:
        # Variants of the same greedy rarely differ on big problems; keep one of each kind.
        heuristics = [h for h in heuristics if h not in REDUNDANT] or list(heuristics)
    best: Allocation | None = None
    for name in heuristics:
        offsets, arena = HEURISTICS[name](blocks, alignment)
        if best is None or arena < best.arena:
            best = Allocation(tuple(offsets), arena, name)
    assert best is not None
    return best
