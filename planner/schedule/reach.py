"""Reachability in a DAG whose vertices are numbered in a topological order (every edge
u -> w has u < w), as bit sets: what the co-running stream scheduler reduces its events by and
what memory planning's happens-before order answers queries from."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def descendants(succ: Sequence[Iterable[int]]) -> list[int]:
    """Per vertex, the vertices it reaches (bit w set: a path u -> ... -> w exists).

    >>> [bin(r) for r in descendants([[1, 2], [2], []])]
    ['0b110', '0b100', '0b0']
    """
    reach = [0] * len(succ)
    for u in range(len(succ) - 1, -1, -1):
        r = 0
        for w in succ[u]:
            r |= reach[w] | 1 << w
        reach[u] = r
    return reach


def transitive_reduction(n: int, edges: Iterable[tuple[int, int]],
                         keep: Iterable[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """`edges` (u < w) without those another path implies, but for the ones in `keep`.

    >>> transitive_reduction(3, [(0, 1), (1, 2), (0, 2)])
    [(0, 1), (1, 2)]
    >>> transitive_reduction(3, [(0, 1), (1, 2), (0, 2)], keep=[(0, 2)])
    [(0, 1), (0, 2), (1, 2)]
    """
    succ: list[set[int]] = [set() for _ in range(n)]
    for u, w in edges:
        succ[u].add(w)
    reach = descendants(succ)
    kept = set(keep)
    out = []
    for u in range(n):
        # What u reaches through a path of two or more edges.
        longer = 0
        for w in succ[u]:
            longer |= reach[w]
        out.extend((u, w) for w in succ[u] if (u, w) in kept or not longer >> w & 1)
    return sorted(out)
