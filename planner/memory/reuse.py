"""Ordering edges that memory reuse needs: buffers sharing bytes must be ordered by the executor.

Offsets are chosen from predicted times: two buffers may share bytes when one's lifetime ends
before the other's begins. Predicted times are not enforced, happens-before is: so for every
pair that shares bytes, each access of the earlier buffer must happen-before the later one's
write. Where the plan's edges do not already imply it, an edge (access -> write) is added; it
holds in the predicted times by construction, so the schedule does not change.

Pairs are found with a painter's sweep: buffers in order of their first write paint their byte
range; the previous painter of each part of the range is the buffer that used those bytes last.
Ordering each buffer after the previous painters orders every sharing pair, by transitivity:

    bytes   [ a ][    b    ]          c is painted over parts of a and b, so a -> c and b -> c;
            [      c       ]          d over part of c, so c -> d (and a -> d follows)
            [ d ]

Example:
    >>> from planner.memory.liveness import Buffer
    >>> from planner.memory.order import HappensBefore
    >>> a = Buffer("a", "a", 8, 0.0, 2.0, 0, 1, 0, (1,), "activation")
    >>> b = Buffer("b", "b", 8, 2.0, 4.0, 2, 3, 2, (3,), "activation")
    >>> hb = HappensBefore(4, [(0, 1), (2, 3)])
    >>> reuse_edges([a, b], [0, 0], hb)
    [(1, 2)]
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from planner.memory.liveness import Buffer
from planner.memory.order import HappensBefore, OpIndex


def sharing_pairs(buffers: Sequence[Buffer], offsets: Sequence[int]) -> list[tuple[int, int]]:
    """(earlier, later) buffer indices that share bytes, enough that ordering each pair orders
    every two buffers sharing bytes (by transitivity). One address space per placement."""
    pairs: set[tuple[int, int]] = set()
    for placement in {b.placement for b in buffers}:
        chosen = [i for i, b in enumerate(buffers)
                  if b.placement == placement and not b.alias_of and b.bytes > 0]
        chosen.sort(key=lambda i: (buffers[i].start, buffers[i].end, i))
        # Disjoint pieces of the address space, sorted: [lo[k], hi[k]) last painted by who[k].
        lo: list[int] = []
        hi: list[int] = []
        who: list[int] = []
        for i in chosen:
            a, z = offsets[i], offsets[i] + buffers[i].bytes
            k0 = max(0, bisect_right(lo, a) - 1)
            k1 = bisect_left(lo, z)
            new_lo, new_hi, new_who = [], [], []
            for k in range(k0, k1):
                if hi[k] <= a or lo[k] >= z:
                    new_lo.append(lo[k])
                    new_hi.append(hi[k])
                    new_who.append(who[k])
                    continue
                pairs.add((who[k], i))
                if lo[k] < a:
                    new_lo.append(lo[k])
                    new_hi.append(a)
                    new_who.append(who[k])
                if hi[k] > z:
                    new_lo.append(z)
                    new_hi.append(hi[k])
                    new_who.append(who[k])
            # The pieces kept are in address order, none starting at a: i's goes between.
            at = bisect_left(new_lo, a)
            new_lo.insert(at, a)
            new_hi.insert(at, z)
            new_who.insert(at, i)
            lo[k0:k1] = new_lo
            hi[k0:k1] = new_hi
            who[k0:k1] = new_who
    return sorted(pairs)


def reuse_edges(buffers: Sequence[Buffer], offsets: Sequence[int],
                hb: HappensBefore) -> list[tuple[OpIndex, OpIndex]]:
    """Edges (access, write) to add so that every pair of buffers sharing bytes is ordered by
    happens-before. `hb` is updated with them. Raises ValueError if a sharing pair overlaps in
    time (the offsets are wrong) or its earlier buffer is read after the step."""
    edges: list[tuple[OpIndex, OpIndex]] = []
    for p, q in sharing_pairs(buffers, offsets):
        early, late = buffers[p], buffers[q]
        if early.end > late.start or late.writer < 0:
            raise ValueError(f"buffers {early.name!r} and {late.name!r} share bytes but are "
                             f"live at the same time")
        accessors = early.accessors
        # An access that happens-before another access is ordered through that one.
        last = [u for u in accessors if not any(hb.before(u, v) for v in accessors if v != u)]
        for u in last:
            if u != late.writer and not hb.before(u, late.writer):
                edges.append((u, late.writer))
                hb.add(u, late.writer)
    return sorted(set(edges))
