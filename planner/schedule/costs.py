"""Per-op time curves: each node's predicted seconds at every thread count, computed once.

The schedulers ask for t(k) for k = 1..cores many times per op; the cost model answers per
signature, and big graphs repeat signatures (ResNet-1001 has 10,000 ops but a few hundred
signatures), so curves are computed once per signature. At each k the faster affinity is kept.

    node  conv1   t = [0.150, 0.076, ..., 0.0052]   affinity = [compact, ..., spread]
                       k=1    k=2          k=68

Example:
    >>> from planner.costs import CostModel
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> c = op_costs(g, CostModel(preset("knl-7250")))
    >>> len(c.times), len(c.times[0]), c.best_threads(0) >= 1
    (6, 68, True)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np

from planner.costs import CostModel, MissingCostWarning, OpSignature, graph_signatures
from planner.ir.graph import Graph
from planner.target.records import AFFINITIES, Affinity

Seconds = float
T = TypeVar("T")
C = TypeVar("C")


@dataclass(frozen=True)
class OpCosts:
    """Time curves of a graph's nodes, by node index (graph order).

    times[i][k - 1]: seconds of node i on k threads (the faster affinity);
    affinity[i][k - 1]: that affinity; keys[i]: the node's signature key;
    analytical: signature keys the cost table lacked (the analytical model answered).
    """

    times: tuple[np.ndarray, ...]
    affinity: tuple[tuple[Affinity, ...], ...]
    keys: tuple[str, ...]
    analytical: tuple[str, ...]

    @property
    def cores(self) -> int:
        return len(self.times[0]) if self.times else 0

    def time(self, i: int, k: int) -> Seconds:
        return float(self.times[i][k - 1])

    def best_threads(self, i: int, limit: int | None = None) -> int:
        """Fewest threads reaching node i's shortest time with at most `limit` threads."""
        if limit is None:  # the same count, from the curves' cached prefixes
            return self.best_prefix[i][-1]
        t = self.times[i][: limit or self.cores]
        return int(np.argmin(t)) + 1

    def fastest(self, i: int) -> Seconds:
        return self.fastest_seconds[i]

    def per_curve(self, f: Callable[[np.ndarray], T]) -> list[T]:
        """f of every node's curve, called once per curve that nodes share (op_costs gives
        alike nodes one array)."""
        return _once_per_curve(self.times, f)

    @cached_property
    def time_lists(self) -> tuple[list[float], ...]:
        """times as Python lists (the list schedulers index them many times)."""
        return tuple(self.per_curve(lambda t: np.asarray(t, dtype=np.float64).tolist()))

    @cached_property
    def best_prefix(self) -> tuple[list[int], ...]:
        """best_prefix[i][m - 1] = best_threads(i, limit=m), for every m."""

        def prefix(t: list[float]) -> list[int]:
            out, best = [], 0
            for j, x in enumerate(t):
                if x < t[best]:
                    best = j
                out.append(best + 1)
            return out

        return tuple(_once_per_curve(self.time_lists, prefix))

    @cached_property
    def matrix(self) -> np.ndarray:
        """times as one (nodes x cores) array."""
        return np.vstack(self.times) if self.times else np.zeros((0, 0))

    @cached_property
    def fastest_seconds(self) -> list[float]:
        """fastest(i) for every node."""
        return _once_per_curve(self.time_lists, min)

    def min_area(self, i: int) -> Seconds:
        """min over k of k * t(k): the least core-seconds node i can take."""
        t = self.times[i]
        return float((t * np.arange(1, len(t) + 1)).min())


def _once_per_curve(curves: Sequence[C], f: Callable[[C], T]) -> list[T]:
    # Nodes alike share one curve object: f once per object.
    memo: dict[int, T] = {}
    out = []
    for t in curves:
        if id(t) not in memo:
            memo[id(t)] = f(t)
        out.append(memo[id(t)])
    return out


def op_costs(graph: Graph, model: CostModel) -> OpCosts:
    """Time curves of every node of `graph` under `model` (see the module docstring)."""
    cores = model.max_threads
    signatures = graph_signatures(graph)
    # The first signature of each key (alike nodes share one object, graph_signatures).
    first: dict[str, OpSignature] = {}
    for sig in signatures.values():
        first.setdefault(sig.key, sig)
    curves: dict[str, tuple[np.ndarray, tuple[Affinity, ...], bool]] = {}
    modelled = []
    for key, sig in first.items():
        entry = model.table.entry(sig) if model.table is not None else None
        if entry is None or not entry.cpu:
            modelled.append(key)
        else:
            curves[key] = _measured_curve(model, sig, cores)
    # The analytical model cannot tell affinities apart: one roofline per thread count. The
    # signatures it prices are priced together (CostModel.analytical_curves).
    compact = ("compact",) * cores
    for key, t in zip(modelled, model.analytical_curves([first[k] for k in modelled]),
                      strict=True):
        curves[key] = t, compact, True
    times, affinity, keys = [], [], []
    for node in graph.nodes:
        key = signatures[node.name].key
        t, a, _ = curves[key]
        times.append(t)
        affinity.append(a)
        keys.append(key)
    missing = tuple(sorted(k for k, (_, _, analytical) in curves.items() if analytical))
    return OpCosts(times=tuple(times), affinity=tuple(affinity), keys=tuple(keys),
                   analytical=missing)


def _measured_curve(model: CostModel, sig: OpSignature, cores: int
                    ) -> tuple[np.ndarray, tuple[Affinity, ...], bool]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingCostWarning)
        per = {a: np.array([model.time(sig, k, a).seconds for k in range(1, cores + 1)])
               for a in AFFINITIES}
    # Ties go to compact (the first affinity), as CostModel.best does.
    pick = np.where(per["spread"] < per["compact"], 1, 0)
    t = np.minimum(per["compact"], per["spread"])
    return t, tuple(AFFINITIES[p] for p in pick), False
