"""Happens-before: which ops of a plan the executor orders, as a reachability query.

The schedule's happens-before edges are orders the executor enforces (with its lanes, which
memory planning does not rely on; an op's `deps` order nothing: planner.plan).
`u` happens-before `w` when a path of such edges leads from u to w (u ends before w starts, on
every run, whatever the op times). Memory reuse may only rely on that order.

Queries are answered from every op's set of descendants, a bit set (a Python int: bit w set
when u reaches w), built once in reverse order, each op's set the union of its successors'
and the successors themselves. ResNet-1001's 10,713 ops take 14 MB and a few hundredths of a
second. Ops are also split into chains whose consecutive ops are joined by an edge (one chain
per stream of a GPU plan, roughly one per lane of a CPU plan): within a chain, what an op
reaches is a suffix, which is what `add` extends.

    chain 0:  a ──► b ──► c ──► d          a reaches b, c, d (chain 0) and f, g (chain 1)
                     ╲
    chain 1:  e ──► f ──► g

Example:
    >>> hb = HappensBefore(4, [(0, 1), (1, 2), (0, 3)])
    >>> hb.before(0, 2), hb.before(3, 2), hb.before(2, 2)
    (True, False, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from planner.schedule.reach import descendants

# An op index: its position in the plan's execution order.
OpIndex = int


class HappensBefore:
    """Reachability over `n` ops numbered in a topological order, from direct edges (u, w).

    Raises ValueError when an edge goes against the numbering (w <= u).
    """

    def __init__(self, n: int, edges: Iterable[tuple[OpIndex, OpIndex]]) -> None:
        succ: list[list[int]] = [[] for _ in range(n)]
        for u, w in set(edges):
            if not 0 <= u < w < n:
                raise ValueError(f"happens-before edge {u} -> {w} does not follow the "
                                 f"execution order of {n} ops")
            succ[u].append(w)
        chain = [0] * n
        position = [0] * n
        tails: list[int] = []  # chain -> its current last op
        preds: list[list[int]] = [[] for _ in range(n)]
        for u, ws in enumerate(succ):
            for w in ws:
                preds[w].append(u)
        for v in range(n):
            # Extend a chain whose tail is a direct predecessor; else start a new chain.
            chosen = -1
            for u in sorted(preds[v], reverse=True):
                if tails[chain[u]] == u:
                    chosen = chain[u]
                    break
            if chosen < 0:
                chosen = len(tails)
                tails.append(v)
            else:
                position[v] = position[tails[chosen]] + 1
                tails[chosen] = v
            chain[v] = chosen
        self.chain = np.array(chain, dtype=np.int64)
        self.position = np.array(position, dtype=np.int64)
        self.chains = len(tails)
        self._chain = chain
        # Per chain, its ops as a bit set (ops of a chain ascend with their positions).
        self._members = [0] * self.chains
        for v, c in enumerate(chain):
            self._members[c] |= 1 << v
        self._reach = descendants(succ)
        self.n = n

    def before(self, u: OpIndex, w: OpIndex) -> bool:
        """Whether op u happens-before op w (False for u == w)."""
        return bool(self._reach[u] >> w & 1)

    def add(self, u: OpIndex, w: OpIndex) -> None:
        """Record a new edge u -> w for later queries from u itself: u then reaches w and the
        ops after w in w's chain (ancestors of u are not updated, so a query may miss the new
        order and ask for a redundant edge, never the reverse)."""
        self._reach[u] |= self._members[self._chain[w]] >> w << w


def plan_edges(names: Sequence[str], happens_before: Iterable[tuple[str, str]]
               ) -> list[tuple[OpIndex, OpIndex]]:
    """Edges (before, after) as op indices, from named happens-before edges (never from an
    op's deps: the executor does not wait on those)."""
    index = {name: i for i, name in enumerate(names)}
    return [(index[a], index[b]) for a, b in happens_before]
