"""Happens-before: which ops of a plan the executor orders, as a reachability query.

The plan's `happens_before` edges and each op's `deps` are the orders the executor enforces.
`u` happens-before `w` when a path of such edges leads from u to w (u ends before w starts, on
every run, whatever the op times). Memory reuse may only rely on that order.

Queries are answered through a chain cover: ops split into chains whose consecutive ops are
joined by an edge (one chain per stream of a GPU plan, roughly one per lane of a CPU plan), and
for every op the earliest position reachable in each chain. Then

    before(u, w)  <=>  earliest[u][chain(w)] <= position(w)

which is exact for any DAG and costs ops x chains integers, not ops^2 bits.

    chain 0:  a ──► b ──► c ──► d          earliest[a] = [1, 1]: a reaches b (pos 1 in
                     ╲                      chain 0) and f (pos 1 in chain 1)
    chain 1:  e ──► f ──► g

Example:
    >>> hb = HappensBefore(4, [(0, 1), (1, 2), (0, 3)])
    >>> hb.before(0, 2), hb.before(3, 2), hb.before(2, 2)
    (True, False, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

# An op index: its position in the plan's execution order.
OpIndex = int

# Larger than any chain position: "this chain is not reachable".
_NEVER = np.iinfo(np.int64).max


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
        self.chain = np.zeros(n, dtype=np.int64)
        self.position = np.zeros(n, dtype=np.int64)
        tails: list[int] = []  # chain -> its current last op
        preds: list[list[int]] = [[] for _ in range(n)]
        for u, ws in enumerate(succ):
            for w in ws:
                preds[w].append(u)
        for v in range(n):
            # Extend a chain whose tail is a direct predecessor; else start a new chain.
            chosen = -1
            for u in sorted(preds[v], reverse=True):
                c = int(self.chain[u])
                if tails[c] == u:
                    chosen = c
                    break
            if chosen < 0:
                chosen = len(tails)
                tails.append(v)
                self.position[v] = 0
            else:
                self.position[v] = self.position[tails[chosen]] + 1
                tails[chosen] = v
            self.chain[v] = chosen
        self.chains = len(tails)
        earliest = np.full((n, max(self.chains, 1)), _NEVER, dtype=np.int64)
        for u in range(n - 1, -1, -1):
            row = earliest[u]
            for w in succ[u]:
                np.minimum(row, earliest[w], out=row)
                c = self.chain[w]
                if self.position[w] < row[c]:
                    row[c] = self.position[w]
        self.earliest = earliest
        self.n = n

    def before(self, u: OpIndex, w: OpIndex) -> bool:
        """Whether op u happens-before op w (False for u == w)."""
        return bool(self.earliest[u, self.chain[w]] <= self.position[w])

    def add(self, u: OpIndex, w: OpIndex) -> None:
        """Record a new edge u -> w for later queries from u itself (ancestors of u are not
        updated, so a query may miss the new order and ask for a redundant edge, never the
        reverse)."""
        c = self.chain[w]
        self.earliest[u, c] = min(self.earliest[u, c], self.position[w])


def plan_edges(names: Sequence[str], happens_before: Iterable[tuple[str, str]],
               deps: Iterable[tuple[str, Sequence[str]]]) -> list[tuple[OpIndex, OpIndex]]:
    """Edges (before, after) as op indices, from named happens-before edges and op deps."""
    index = {name: i for i, name in enumerate(names)}
    edges = [(index[a], index[b]) for a, b in happens_before]
    edges += [(index[d], index[op]) for op, ds in deps for d in ds]
    return edges
