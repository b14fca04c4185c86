"""Offset heuristics: no two blocks live at once overlap; arena >= LOAD; best one wins."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.memory.arena import HEURISTICS, Block, aligned, allocate, breadths


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
