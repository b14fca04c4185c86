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
    skyline-*          bottom-up: the lowest stretch of time (by the highest block placed over
                       it) takes the unplaced block, by a priority (lifetime, area, size x
                       sqrt(lifetime), sqrt(size) x lifetime, the last also with a rule against
                       slivers), whose lifetime lies within it; none fits: it rises to its
                       lower neighbour. Short scratch areas go where their op's time has room.
    skyline-*-tight    the same, but a block that would leave a sliver no other block fits in
                       comes last if that sliver's waste raises the bound (the most, over the
                       columns, of height + the unplaced bytes live there): waste is free in
                       columns with room and costly near the peak. The first four priorities;
                       three of them also backwards in time
    perturbed-size     a seeded multi-start around greedy by size (noisy size, area, size
                       class and start orders; best and first fit), as many tries as a fixed
                       work budget allows

The result is checked against LOAD, the peak of live bytes (a lower bound on any arena):
fragmentation = arena / LOAD - 1. Since a later heuristic (or try) wins only with a strictly
smaller arena, each one stops as soon as its arena reaches the best so far (a skyline one as
soon as its bound does), and none runs once an arena equals LOAD: the same offsets as running
them all, in a fraction of the time.

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

import heapq
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


def distinct(times: Sequence[float] | np.ndarray) -> np.ndarray:
    """The distinct values, ascending: np.unique's result for the planner's times (floats,
    no NaN), by a sort and one comparison, without the masked-array module np.unique imports
    (10 ms or more of every command's start-up).

    >>> distinct([2.0, 0.5, 2.0, 1.0])
    array([0.5, 1. , 2. ])
    """
    values = np.sort(np.asarray(times, dtype=float))
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def _place(blocks: Sequence[Block], order: Sequence[int], alignment: int, best_fit: bool,
           limit: Bytes | None = None) -> tuple[list[Offset], Bytes] | None:
    """Place blocks in `order`, each in a gap among the already placed blocks it overlaps in
    time: the smallest that holds it (best fit) or the lowest (first fit), else on top.
    None as soon as the arena reaches `limit` (the caller has one at least as small).

    The placed blocks are kept sorted by offset (ties: placement order) in flat arrays, so a
    placement is a few vectorized passes over them and no sort: a training graph's
    activations live from the forward to the backward pass, so each block meets hundreds of
    placed ones (thousands on ResNet-1001), and per-block sorting was most of the time.
    """
    n = len(blocks)
    starts = np.array([b.start for b in blocks], dtype=float)
    ends = np.array([b.end for b in blocks], dtype=float)
    sizes = [aligned(b.size, alignment) for b in blocks]
    offsets = [0] * n
    # Placed blocks by offset: lifetimes [first, last) and byte ranges [lo, hi).
    first = np.empty(n, dtype=float)
    last = np.empty(n, dtype=float)
    lo = np.empty(n, dtype=np.int64)
    hi = np.empty(n, dtype=np.int64)
    k = 0
    arena = 0
    for i in order:
        size = sizes[i]
        start, end = starts[i], ends[i]
        offset = 0
        if k:
            # Indices, then two gathers: boolean-mask indexing each column is 3x slower.
            live = ((first[:k] < end) & (start < last[:k])).nonzero()[0]
            if len(live):
                tops = np.maximum.accumulate(hi.take(live))
                # The gap below each live block: from the highest top under it (0 at first).
                gaps = lo.take(live)
                gaps[1:] -= tops[:-1]
                fits = (gaps >= size).nonzero()[0]
                if len(fits):
                    pick = int(fits[gaps[fits].argmin()] if best_fit else fits[0])
                    offset = int(tops[pick - 1]) if pick else 0
                else:
                    offset = int(tops[-1])
        if start < end:  # an empty lifetime conflicts with nothing
            at = int(lo[:k].searchsorted(offset, side="right"))
            for column, value in ((first, start), (last, end), (lo, offset),
                                  (hi, offset + size)):
                column[at + 1:k + 1] = column[at:k]
                column[at] = value
            k += 1
        offsets[i] = offset
        arena = max(arena, offset + size)
        if limit is not None and arena >= limit:
            return None
    return offsets, arena


def breadths(blocks: Sequence[Block]) -> np.ndarray:
    """Per block, the most bytes live at any time of its lifetime (its own included)."""
    if not blocks:
        return np.zeros(0, dtype=np.int64)
    times = distinct([b.start for b in blocks] + [b.end for b in blocks])
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


Placed = tuple[list[Offset], Bytes]


def best_fit_size(blocks: Sequence[Block], alignment: int,
                  limit: Bytes | None = None) -> Placed | None:
    # Among equal sizes, the longest-lived first: short ones then fill the gaps around them.
    order = sorted(range(len(blocks)),
                   key=lambda i: (-blocks[i].size, blocks[i].start - blocks[i].end, i))
    return _place(blocks, order, alignment, True, limit)


def best_fit_size_start(blocks: Sequence[Block], alignment: int,
                        limit: Bytes | None = None) -> Placed | None:
    order = sorted(range(len(blocks)), key=lambda i: (-blocks[i].size, blocks[i].start, i))
    return _place(blocks, order, alignment, True, limit)


def best_fit_breadth(blocks: Sequence[Block], alignment: int,
                     limit: Bytes | None = None) -> Placed | None:
    width = breadths(blocks)
    order = sorted(range(len(blocks)),
                   key=lambda i: (-int(width[i]), -blocks[i].size, blocks[i].start, i))
    return _place(blocks, order, alignment, True, limit)


def first_fit_size(blocks: Sequence[Block], alignment: int,
                   limit: Bytes | None = None) -> Placed | None:
    order = sorted(range(len(blocks)),
                   key=lambda i: (-blocks[i].size, blocks[i].start - blocks[i].end, i))
    return _place(blocks, order, alignment, False, limit)


# Work the perturbed search may spend, in blocks x orders and in block pairs x orders (a
# placement scans the blocks placed before it); small problems get the most tries. Above a
# few hundred blocks the skyline heuristics win and the pairs bound the tries.
SEARCH_WORK = 40_000
SEARCH_PAIRS = 16_000_000
SEARCH_TRIES = 256


def perturbed_size(blocks: Sequence[Block], alignment: int,
                   limit: Bytes | None = None) -> Placed | None:
    """A seeded multi-start around greedy by size: orders by size scaled by random noise (up
    to 2x), by size x lifetime with noise, by coarse size classes in random order, and by
    first write with jitter, each placed by best and by first fit; the best arena wins (the
    first on ties). A try stops as soon as it cannot beat the best so far (or `limit`), and
    the search stops once a try reaches LOAD; neither changes which try wins."""
    n = len(blocks)
    tries = min(SEARCH_TRIES, SEARCH_WORK // max(n, 1), SEARCH_PAIRS // max(n * n, 1), 2 * n)
    best: Placed | None = None
    rng = np.random.default_rng(n)
    sizes = np.array([b.size for b in blocks], dtype=float)
    spans = np.array([b.end - b.start for b in blocks], dtype=float)
    starts = np.array([b.start for b in blocks], dtype=float)
    classes = np.round(np.log2(np.maximum(sizes, 1)))
    span = float(spans.max()) if n else 1.0
    floor = load(blocks, alignment)
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
        order = np.lexsort((np.arange(n), key)).tolist()
        found = _place(blocks, order, alignment, bool(k % 2),
                       limit if best is None else best[1])
        if found is not None:
            best = found
            if best[1] <= floor:
                break
    if best is None and limit is None:  # no tries (no blocks)
        return best_fit_size(blocks, alignment)
    return best


def _skyline(blocks: Sequence[Block], alignment: int, key: np.ndarray, rule: str = "",
             limit: Bytes | None = None) -> Placed | None:
    """Skyline placement (bottom-up, the blocks' times fixed): the time axis is cut into
    segments, each with the height of the highest block placed over it. The lowest segment
    (the earliest on ties) takes the unplaced block of largest `key` whose lifetime lies
    within it, at the segment's height; when none does, the segment rises to its lower
    neighbour (the bytes it leaves are the waste). Every placed block rests on what is below
    it, so nothing is left to fill afterwards; short scratch areas go where their op's time
    has room instead of splitting long lifetimes.

    The unplaced blocks live in a column will sit above its height, so the arena cannot end
    below the bound: the most, over the columns, of height + those blocks' bytes (LOAD at
    first; only rises raise it). None as soon as the bound or the arena reaches `limit`.

    `rule` ("", "fill", "tight"): which block a segment takes first (_pick)."""
    sizes = [aligned(b.size, alignment) for b in blocks]
    s_col, e_col, columns = _columns(blocks)
    offsets = [0] * len(blocks)
    order = _start_order(s_col, e_col)  # empty lifetimes stay at 0
    o_start, o_end, o_key = s_col[order], e_col[order], key[order]
    size_of = np.array(sizes, dtype=np.int64)
    o_size = size_of[order]
    ptr = np.searchsorted(o_start, np.arange(columns + 2)).tolist()  # first at column >= c
    order_at, start_at, end_at = order.tolist(), o_start.tolist(), o_end.tolist()
    # End columns of the unplaced blocks; a placed one's is past every segment's end, so one
    # comparison finds a segment's candidates (this scan is the loop's most frequent step).
    open_end = o_end.copy()
    # The unplaced blocks' bytes per column: `bound` (docstring) stops a run that cannot win.
    pending = _live_bytes(o_start, o_end, o_size, columns)
    bound = int(pending.max(initial=0))
    segs = _Segments(columns)
    arena = int(size_of[s_col >= e_col].max(initial=0))
    if limit is not None and max(arena, bound) >= limit:
        return None
    left = len(order)
    while left:
        h, a = segs.lowest()
        b = segs.end[a]
        pick = _pick(a, b, h, ptr[a], ptr[b], open_end, o_key, o_size, o_start, o_end, rule,
                     pending, bound, segs)
        if pick >= 0:
            i = order_at[pick]
            open_end[pick] = columns + 1
            left -= 1
            offsets[i] = h
            top = h + sizes[i]
            arena = max(arena, top)
            if limit is not None and arena >= limit:
                return None
            s, e = start_at[pick], end_at[pick]
            pending[s:e] -= sizes[i]
            segs.split(a, b, s, e, h, top)
            continue
        # Nothing fits: rise to the lower neighbour (the bytes left are the waste).
        rise = segs.rise_height(a, b)
        bound = max(bound, rise + int(pending[a:b].max()))
        if limit is not None and bound >= limit:
            return None
        segs.rise(a, b, rise)
    return offsets, arena


def _columns(blocks: Sequence[Block]) -> tuple[np.ndarray, np.ndarray, int]:
    """Each block's start and end column on the blocks' distinct times, and how many columns
    (spans between consecutive times) there are."""
    times = distinct([b.start for b in blocks] + [b.end for b in blocks])
    return (np.searchsorted(times, [b.start for b in blocks]),
            np.searchsorted(times, [b.end for b in blocks]), len(times) - 1)


def _start_order(s_col: np.ndarray, e_col: np.ndarray) -> np.ndarray:
    """The blocks of a non-empty lifetime by start column (then index)."""
    by_start = np.lexsort((np.arange(len(s_col)), s_col))
    return by_start[s_col[by_start] < e_col[by_start]]


def _live_bytes(starts: np.ndarray, ends: np.ndarray, sizes: np.ndarray,
                columns: int) -> np.ndarray:
    """Per column, the bytes of the blocks live there (start column <= c < end column)."""
    live = np.zeros(columns + 1, dtype=np.int64)
    np.add.at(live, starts, sizes)
    np.subtract.at(live, ends, sizes)
    return np.cumsum(live)[:-1]


class _Segments:
    """The skyline's segments: they partition [0, columns), each keyed by its first column,
    with its end, height and the segment before it; a heap of (height, first column) finds
    the lowest (the earliest on ties), stale entries skipped."""

    def __init__(self, columns: int) -> None:
        self.columns = columns
        self.end = {0: columns}
        self.prev: dict[int, int | None] = {0: None}
        self.height = {0: 0}
        self.heap = [(0, 0)]

    def lowest(self) -> tuple[int, int]:
        """(height, first column) of the lowest segment."""
        while True:
            h, a = heapq.heappop(self.heap)
            if self.height.get(a) == h:
                return h, a
            # a stale entry: the segment rose or merged since

    def split(self, a: int, b: int, s: int, e: int, h: int, top: int) -> None:
        """Segment [a, b) at height h with a block over columns [s, e) up to `top`: the block's
        columns at `top`, the rest of the segment either side of it at h."""
        columns, end, height, prev = self.columns, self.end, self.height, self.prev
        pieces = [(a, s, h)] if s > a else []
        pieces.append((s, e, top))
        if e < b:
            pieces.append((e, b, h))
        after = b if b < columns else None
        before = prev[a]
        for x, y, z in pieces:
            end[x], height[x], prev[x] = y, z, before
            before = x
            heapq.heappush(self.heap, (z, x))
        if after is not None:
            prev[after] = before

    def rise_height(self, a: int, b: int) -> int:
        """The height segment [a, b) rises to: its lower neighbour's."""
        before = self.prev[a]
        after = b if b < self.columns else None
        if before is None:
            return self.height[after]
        if after is None:
            return self.height[before]
        return min(self.height[before], self.height[after])

    def rise(self, a: int, b: int, rise: int) -> None:
        """Segment [a, b) risen to `rise`, merged with its neighbours as high (one or both)."""
        end, height, prev = self.end, self.height, self.prev
        before = prev[a]
        after = b if b < self.columns else None
        height[a] = rise
        start = a
        if before is not None and height[before] == rise:
            end[before] = end[a]
            del end[a], height[a], prev[a]
            start = before
        if after is not None and height[after] == rise:
            end[start] = end[after]
            nxt = end[after]
            del end[after], height[after], prev[after]
            if nxt < self.columns:
                prev[nxt] = start
        elif after is not None:
            prev[after] = start
        heapq.heappush(self.heap, (rise, start))


def _pick(a: int, b: int, h: int, lo: int, hi: int, open_end: np.ndarray, o_key: np.ndarray,
          o_size: np.ndarray, o_start: np.ndarray, o_end: np.ndarray, rule: str,
          pending: np.ndarray, bound: int, segs: _Segments) -> int:
    """The unplaced block (its position in start order) segment [a, b) at height h takes: of
    those starting in it (positions lo..hi) and ending within it, the largest key; -1 for
    none.

    A block may leave a sliver of the segment that no unplaced block fits in (it will rise,
    wasting bytes). `rule` "fill": a block that leaves none comes first. `rule` "tight": the
    waste counts only where it raises the bound; a block whose slivers raise it least comes
    first (then by `key`). Slivers in slack columns cost nothing, so the greedy keeps its
    freedom there and spends its care on the columns near the peak, where the scratch areas of
    co-running ops otherwise leave holes between long-lived activations (ResNet-50 and
    Inception-v3 training on a co-running CPU schedule: 1.029 and 1.036 x LOAD by the other
    heuristics, 1.015 and 1.020 with this rule)."""
    if lo >= hi:
        return -1
    cand = (open_end[lo:hi] <= b).nonzero()[0]  # from lo
    if len(cand) == 1:
        return lo + int(cand[0])
    if not len(cand):
        return -1
    cand += lo
    k = o_key[cand]
    if rule and (rule == "fill" or h + int(o_size[cand].max()) + int(pending[a:b].max())
                 > bound):
        # (Tight: else no sliver can raise the bound, the columns have slack.)
        starts, ends = o_start[cand], o_end[cand]
        # A sliver left of (right of) the block takes another block iff one ends (starts)
        # within it.
        first_end, last_start = int(ends.min()), int(starts.max())
        left_ok = (starts == a) | (starts >= first_end)
        right_ok = (ends == b) | (ends <= last_start)
        if rule == "fill":
            tidy = left_ok & right_ok
            k = np.where(tidy, k, k - np.inf) if tidy.any() else k
        elif not (left_ok & right_ok).all():
            k = np.where(_sliver_cost(a, b, h, starts, ends, o_size[cand], left_ok, right_ok,
                                      first_end, last_start, segs.height, segs.prev,
                                      segs.columns, pending, bound), -np.inf, k)
    return int(cand[k.argmax()])


def _sliver_cost(a: int, b: int, h: Bytes, starts: np.ndarray, ends: np.ndarray,
                 sizes: np.ndarray, left_ok: np.ndarray, right_ok: np.ndarray, first_end: int,
                 last_start: int, height: dict[int, int], prev: dict[int, int | None],
                 columns: int, pending: np.ndarray, bound: Bytes) -> np.ndarray:
    """Per candidate of segment [a, b) at height h: True where it is not among those whose
    slivers raise `bound` least (`first_end`, `last_start`: the candidates' least end and
    greatest start). A sliver nothing fits in rises at least to the lower of its
    two sides (the block's top and the neighbouring segment), and the bound there becomes
    that height + the unplaced bytes live in its columns."""
    tops = h + sizes
    raised = np.zeros(len(starts), dtype=np.int64)
    seg = pending[a:b]
    # The running maxima cover only the columns a sliver can span (one nothing fits in lies
    # left of the first end, or right of the last start): about half a long segment, and the
    # other candidates' values are discarded.
    if not left_ok.all():
        reach = first_end - a
        most = np.maximum.accumulate(seg[:reach])  # most[j]: max over columns a .. a + j
        side = height[prev[a]] if prev[a] is not None else None
        rise = tops if side is None else np.minimum(tops, side)
        at = np.minimum(np.maximum(starts - a - 1, 0), reach - 1)  # (np.clip: 3x the time)
        raised = np.where(left_ok, raised, np.maximum(rise + most[at] - bound, 0))
    if not right_ok.all():
        reach = last_start - a + 1
        # most[j]: max over columns a + reach + j .. b - 1
        most = np.maximum.accumulate(seg[reach:][::-1])[::-1]
        side = height[b] if b < columns else None
        rise = tops if side is None else np.minimum(tops, side)
        at = np.minimum(np.maximum(ends - a - reach, 0), b - a - 1 - reach)
        raised = np.maximum(raised, np.where(right_ok, 0, np.maximum(rise + most[at] - bound,
                                                                     0)))
    return raised > raised.min()


def load(blocks: Sequence[Block], alignment: int = 1) -> Bytes:
    """LOAD: the most bytes (sizes aligned) live at any one time, a lower bound on any arena."""
    if not blocks:
        return 0
    times = distinct([b.start for b in blocks] + [b.end for b in blocks])
    delta = np.zeros(len(times) + 1, dtype=np.int64)
    sizes = [aligned(b.size, alignment) for b in blocks]
    np.add.at(delta, np.searchsorted(times, [b.start for b in blocks]), sizes)
    np.subtract.at(delta, np.searchsorted(times, [b.end for b in blocks]), sizes)
    return int(np.cumsum(delta).max())


def first_fit_start(blocks: Sequence[Block], alignment: int,
                    limit: Bytes | None = None) -> Placed | None:
    order = sorted(range(len(blocks)), key=lambda i: (blocks[i].start, -blocks[i].size, i))
    return _place(blocks, order, alignment, False, limit)


def _skyline_keys(blocks: Sequence[Block], alignment: int) -> dict[str, np.ndarray]:
    """Priorities of the skyline heuristics: lifetimes in columns (the distinct start and end
    times a lifetime spans) and seconds, sizes aligned."""
    sizes = np.array([aligned(b.size, alignment) for b in blocks], dtype=float)
    starts = np.array([b.start for b in blocks], dtype=float)
    ends = np.array([b.end for b in blocks], dtype=float)
    times = distinct(np.concatenate([starts, ends]))
    columns = (np.searchsorted(times, ends) - np.searchsorted(times, starts)).astype(float)
    seconds = np.maximum(ends - starts, 0.0)
    return {"lifetime": columns * (sizes.max(initial=0.0) + 1.0) + sizes,
            "area": sizes * columns, "tall": sizes * np.sqrt(seconds),
            "wide": np.sqrt(sizes) * seconds}


def _skyline_heuristic(kind: str, rule: str = "",
                       reverse: bool = False) -> Callable[..., Placed | None]:
    """A skyline heuristic by priority `kind`; `reverse`: on the time axis run backwards (a
    layout is as valid mirrored in time; the segments' ties then go to the latest)."""
    def heuristic(blocks: Sequence[Block], alignment: int,
                  limit: Bytes | None = None) -> Placed | None:
        if reverse:
            blocks = [Block(b.size, -b.end, -b.start) for b in blocks]
        return _skyline(blocks, alignment, _skyline_keys(blocks, alignment)[kind], rule, limit)
    heuristic.__name__ = "_".join(["skyline", kind] + [rule] * bool(rule)
                                  + ["reversed"] * reverse)
    return heuristic


# Above LARGE blocks `allocate` skips the heuristics that vary another one's tie-breaks;
# above HUGE it runs only the first heuristic asked for (greedy by size by default).
LARGE = 5000
HUGE = 20000
REDUNDANT = frozenset({"best-fit-size-start", "first-fit-size", "skyline-area", "skyline-tall",
                       "skyline-wide-fill", "skyline-lifetime-tight", "skyline-tall-tight",
                       "skyline-wide-tight"} | {f"skyline-{kind}-tight-reversed"
                                                for kind in ("lifetime", "tall", "wide")})

# The heuristics a CPU plan's layout runs first. Its co-running ops' scratch areas leave the
# holes near the peak that the tight skylines avoid, so these two give a small arena early and
# the rest stop sooner: Inception-v3 b16 on knl-7250, allocate 0.40 -> 0.33 s; the zoo's 48
# CPU plans (knl-7250, xeon-8180), 3.07 -> 3.0 s in all. GPU plans keep the named order: their
# greedy heuristics often reach LOAD at once, which ends the search before any skyline runs.
CPU_FIRST = ("skyline-lifetime-tight", "skyline-tall-tight-reversed")

# A heuristic: (blocks, alignment, limit) -> (offsets, arena), or None when it stops early
# because its arena would reach `limit` (None: no limit).
Heuristic = Callable[[Sequence[Block], int, Bytes | None], Placed | None]
HEURISTICS: dict[str, Heuristic] = {
    "best-fit-size": best_fit_size,
    "best-fit-size-start": best_fit_size_start,
    "best-fit-breadth": best_fit_breadth,
    "first-fit-size": first_fit_size,
    "first-fit-start": first_fit_start,
    "skyline-lifetime": _skyline_heuristic("lifetime"),
    "skyline-area": _skyline_heuristic("area"),
    "skyline-tall": _skyline_heuristic("tall"),
    "skyline-wide": _skyline_heuristic("wide"),
    "skyline-wide-fill": _skyline_heuristic("wide", "fill"),
    "skyline-lifetime-tight": _skyline_heuristic("lifetime", "tight"),
    "skyline-area-tight": _skyline_heuristic("area", "tight"),
    "skyline-tall-tight": _skyline_heuristic("tall", "tight"),
    "skyline-wide-tight": _skyline_heuristic("wide", "tight"),
    "skyline-lifetime-tight-reversed": _skyline_heuristic("lifetime", "tight", reverse=True),
    "skyline-tall-tight-reversed": _skyline_heuristic("tall", "tight", reverse=True),
    "skyline-wide-tight-reversed": _skyline_heuristic("wide", "tight", reverse=True),
    "perturbed-size": perturbed_size,
}


def allocate(blocks: Sequence[Block], heuristics: Sequence[str] = tuple(HEURISTICS),
             alignment: int = 1, first: Sequence[str] = (), limit: Bytes | None = None
             ) -> Allocation | None:
    """Offsets for `blocks` from each named heuristic; the smallest arena wins (ties: the
    first named). Raises ValueError for an unknown heuristic name. With `limit`: None when no
    heuristic's arena is at most `limit` (each stops as soon as it exceeds it), else the same
    allocation as without (a budget search only asks whether a state fits).

    Each heuristic after the first gets the best arena so far as its limit (one named later
    than the best so far wins only with a strictly smaller arena, so one that reaches it stops
    early; one named earlier stops only above it), and none runs once an arena equals LOAD:
    the result is the same as running them all, in any order. `first`: those of `heuristics`
    to run before the others, for speed alone: the sooner a small arena is known, the sooner
    the others stop (CPU_FIRST); the first named heuristic still runs before them as far as
    LOAD (if it reaches LOAD, it wins)."""
    unknown = [h for h in heuristics if h not in HEURISTICS]
    if unknown or not heuristics:
        raise ValueError(f"unknown allocation heuristic(s) {unknown}; known: "
                         f"{sorted(HEURISTICS)}")
    if len(blocks) > HUGE:
        heuristics = list(heuristics[:1])
    elif len(blocks) > LARGE:
        # Variants of the same greedy rarely differ on big problems; keep one of each kind.
        heuristics = [h for h in heuristics if h not in REDUNDANT] or list(heuristics)
    floor = load(blocks, alignment)
    rank = {name: r for r, name in enumerate(heuristics)}
    early = [h for h in first if h in rank]
    if early and early[0] != heuristics[0] and (limit is None or floor <= limit):
        # The first named heuristic at LOAD wins whatever the others find, so it is tried
        # first, stopping as soon as it exceeds LOAD. It reaches LOAD in 43 of the zoo's 72
        # CPU layouts (knl-7250, xeon-8180; Inception-v3 b16 on knl-7250: allocate 0.033 ->
        # 0.015 s), and where it does not it stops early (2% of those layouts' time).
        found = HEURISTICS[heuristics[0]](blocks, alignment, floor + 1)
        if found is not None:
            return Allocation(tuple(found[0]), found[1], heuristics[0])
    best: Allocation | None = None
    for name in early + [h for h in heuristics if h not in early]:
        if best is not None and best.arena <= floor and rank[name] > rank[best.heuristic]:
            continue  # nothing beats LOAD; only one named earlier may tie it
        stop = None if limit is None else limit + 1
        if best is not None:
            stop = best.arena + (rank[name] < rank[best.heuristic])
        found = HEURISTICS[name](blocks, alignment, stop)
        if found is not None and (best is None or (found[1], rank[name])
                                  < (best.arena, rank[best.heuristic])):
            best = Allocation(tuple(found[0]), found[1], name)
    assert best is not None or limit is not None
    return best
