"""Offset heuristics: no two blocks live at once overlap; arena >= LOAD; best one wins."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.memory.arena import (
    CPU_FIRST,
    HEURISTICS,
    Block,
    _place,
    aligned,
    allocate,
    breadths,
    load,
)


@st.composite
def block_lists(draw) -> list[Block]:
    n = draw(st.integers(1, 25))
    out = []
    for _ in range(n):
        start = draw(st.integers(0, 20))
        out.append(Block(draw(st.integers(1, 100)), float(start),
                         float(start + draw(st.integers(1, 10)))))
    return out


def peak(blocks: list[Block], alignment: int = 1) -> int:
    times = sorted({b.start for b in blocks})
    return max(sum(aligned(b.size, alignment) for b in blocks if b.start <= t < b.end)
               for t in times)


def overlaps(a: Block, b: Block, oa: int, ob: int, alignment: int) -> bool:
    in_time = a.start < b.end and b.start < a.end
    in_bytes = oa < ob + aligned(b.size, alignment) and ob < oa + aligned(a.size, alignment)
    return in_time and in_bytes


@settings(max_examples=60, deadline=None)
@given(block_lists(), st.sampled_from([1, 8]))
def test_every_heuristic_is_sound(blocks, alignment):
    load = peak(blocks, alignment)
    for name, heuristic in HEURISTICS.items():
        offsets, arena = heuristic(blocks, alignment)
        assert arena >= load, name
        assert all(o % alignment == 0 for o in offsets)
        assert max(o + aligned(b.size, alignment)
                   for o, b in zip(offsets, blocks, strict=True)) == arena
        for i in range(len(blocks)):
            for j in range(i + 1, len(blocks)):
                assert not overlaps(blocks[i], blocks[j], offsets[i], offsets[j], alignment), \
                    (name, i, j)


@settings(max_examples=15, deadline=None)
@given(block_lists())
def test_allocate_keeps_the_smallest(blocks):
    best = allocate(blocks)
    assert best.arena == min(h(blocks, 1)[1] for h in HEURISTICS.values())


@settings(max_examples=40, deadline=None)
@given(block_lists(), st.sampled_from([1, 8]), st.integers(-20, 20))
def test_a_limit_changes_only_whether_an_allocation_is_returned(blocks, alignment, slack):
    """allocate(limit=L): None when the arena exceeds L, else the allocation without it (the
    budget search's fits check)."""
    full = allocate(blocks, alignment=alignment)
    limit = max(full.arena + slack, 1)
    got = allocate(blocks, alignment=alignment, first=CPU_FIRST, limit=limit)
    assert got == (full if full.arena <= limit else None)


def test_reuse_after_last_read():
    # b starts exactly when a ends: half-open lifetimes share bytes.
    a = allocate([Block(10, 0.0, 1.0), Block(10, 1.0, 2.0)])
    assert a.arena == 10 and a.offsets == (0, 0)


def test_breadth_is_the_busiest_time_of_a_lifetime():
    blocks = [Block(4, 0.0, 3.0), Block(2, 1.0, 2.0), Block(1, 2.0, 4.0)]
    assert list(breadths(blocks)) == [6, 6, 5]


def test_unknown_heuristic():
    with pytest.raises(ValueError, match="unknown allocation heuristic"):
        allocate([Block(1, 0.0, 1.0)], heuristics=("magic",))


def reference_place(blocks: list[Block], order: list[int], alignment: int,
                    best_fit: bool) -> tuple[list[int], int]:
    """The placement rule the obvious way: each block into the smallest (best fit) or lowest
    (first fit) gap among the placed blocks live with it, else on top of them."""
    offsets: dict[int, int] = {}
    for i in order:
        size = aligned(blocks[i].size, alignment)
        live = sorted((offsets[j], offsets[j] + aligned(blocks[j].size, alignment))
                      for j in offsets
                      if blocks[j].start < blocks[j].end
                      and blocks[j].start < blocks[i].end and blocks[i].start < blocks[j].end)
        gaps, top = [], 0
        for lo, hi in live:
            if lo - top >= size:
                gaps.append((lo - top, top))
            top = max(top, hi)
        if gaps:
            offsets[i] = min(gaps)[1] if best_fit else gaps[0][1]
        else:
            offsets[i] = top
    out = [offsets[i] for i in range(len(blocks))]
    return out, max((o + aligned(b.size, alignment) for o, b in zip(out, blocks, strict=True)),
                    default=0)


@settings(max_examples=80, deadline=None)
@given(block_lists(), st.sampled_from([1, 8]), st.booleans(), st.randoms(use_true_random=False))
def test_place_matches_the_reference(blocks, alignment, best_fit, rnd):
    order = list(range(len(blocks)))
    rnd.shuffle(order)
    assert _place(blocks, order, alignment, best_fit) == \
        reference_place(blocks, order, alignment, best_fit)


@settings(max_examples=40, deadline=None)
@given(block_lists(), st.sampled_from([1, 8]))
def test_pruned_search_picks_what_running_every_heuristic_picks(blocks, alignment):
    # allocate stops heuristics early (limits, LOAD); the winner must be the first named of
    # those with the smallest arena when each runs to the end.
    full = [(h(blocks, alignment), name) for name, h in HEURISTICS.items()]
    smallest = min(arena for (_, arena), _ in full)
    (offsets, arena), name = next(f for f in full if f[0][1] == smallest)
    best = allocate(blocks, alignment=alignment)
    assert (best.offsets, best.arena, best.heuristic) == (tuple(offsets), arena, name)
    assert load(blocks, alignment) == peak(blocks, alignment) <= arena
    # Heuristics tried first (for speed) change nothing: ties still go to the first named,
    # also when one tried early reaches LOAD.
    names = list(HEURISTICS)
    for first in (CPU_FIRST, names[::-1], [name], names[-3:]):
        again = allocate(blocks, alignment=alignment, first=first)
        assert (again.offsets, again.arena, again.heuristic) == (tuple(offsets), arena, name)


def test_skyline_fills_around_short_scratch():
    # Long activations and a short scratch area: the skyline reaches LOAD (every placed
    # block rests on what is below it), skips empty lifetimes and honours the limit.
    blocks = [Block(40, 0.0, 1.0), Block(60, 0.0, 4.0), Block(30, 1.0, 4.0),
              Block(10, 2.0, 3.0), Block(40, 0.0, 0.0)]
    for name in (h for h in HEURISTICS if h.startswith("skyline-")):
        offsets, arena = HEURISTICS[name](blocks, 1)
        assert arena == load(blocks) == 100, name
        assert offsets[4] == 0  # an empty lifetime conflicts with nothing
        assert HEURISTICS[name](blocks, 1, 100) is None  # stops once it reaches the limit
        assert HEURISTICS[name](blocks, 1) == (offsets, arena)


@settings(max_examples=40, deadline=None)
@given(block_lists(), st.sampled_from([1, 8]), st.integers(1, 400))
def test_a_skyline_stops_only_when_it_cannot_beat_the_limit(blocks, alignment, limit):
    # The skyline heuristics stop once their bound (height + unplaced bytes, per column)
    # reaches the limit: only when the full run's arena would too.
    for name in (h for h in HEURISTICS if h.startswith("skyline-")):
        full = HEURISTICS[name](blocks, alignment)
        stopped = HEURISTICS[name](blocks, alignment, limit)
        assert stopped == (None if full[1] >= limit else full), name


def test_tight_skyline_keeps_slivers_out_of_the_peak():
    # Every block spans two columns, so by lifetime the largest come first: 8 at the start and
    # 6 at the end leave the column between them a sliver nothing fits in; it rises, and the
    # 5 and the 4 stack above (15 bytes). The tight rule sees that the sliver's waste would
    # raise the bound, places the 5 first and reaches LOAD.
    blocks = [Block(6, 4.0, 6.0), Block(8, 1.0, 3.0), Block(5, 3.0, 5.0), Block(4, 2.0, 4.0)]
    assert load(blocks) == 12
    assert HEURISTICS["skyline-lifetime"](blocks, 1) == ([0, 0, 6, 11], 15)
    assert HEURISTICS["skyline-lifetime-tight"](blocks, 1) == ([5, 0, 0, 8], 12)
    assert allocate(blocks).arena == 12
