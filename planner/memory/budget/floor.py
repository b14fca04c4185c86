"""A lower bound on the arena of a budget state, from its live-bytes profile alone: what the
budget search checks before it materializes and lays out a state (the slow part).

The state's profile (planner.memory.budget.search) counts the tensors and the recomputed copies.
The materialized step holds more, at keys that never move when decisions change:

    kernels      the buffers a backend's kernels need besides the tensors (ExtraBuffers:
                 the CPU kernels' scratch areas, the CUDA kernels' own scratch), one per
                 graph node always, one per recompute op while its segment is recomputed
    statistics   the outputs a recompute writes only because its node has them (BatchNorm's
                 running statistics, `T@scratch<i>`), live while it runs
    padding      every buffer's size rounded up to the alignment, as the layout places it

    floor(state) = persistent + max over keys of (profile + kernels + statistics + padding)

Every one of these buffers is live at its key in the materialized step and no two live ones
share a byte, so the floor is at most the laid-out arena: a state whose floor exceeds the
budget cannot fit, and the search skips its layout without changing what it decides. On a
CPU plan the scratch areas are a large share of the peak (Inception-v3 at its smallest
budget: 171 KB of 961 KB) and small tensors round up by much (their 64-byte alignment: 2% at
the test's sizes, the whole gap between LOAD and the arena there), so the tensors' LOAD
alone let hundreds of states through to a layout that could not fit: planning
Inception-v3 at its midpoint budget laid out 93 states, now 1.

Example:
    >>> from planner.costs import CostModel
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.memory.budget.search import State
    >>> from planner.memory.budget.solver import lay
    >>> from planner.memory.gpu import kernel_scratch
    >>> from planner.memory.options import MemoryOptions
    >>> from planner.memory.stash import analyze
    >>> from planner.schedule.streams import compute_steps
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("alexnet", batch=4, image=63, classes=4),
    ...                         Optimizer(kind="sgd"))
    >>> steps = compute_steps(g, CostModel(preset("k40c-12gb")))
    >>> state = State(analyze(steps), 12.6e9)
    >>> state.apply(state.best_move())
    >>> floor = ArenaFloor(state.stash, kernel_scratch(steps), alignment=256)
    >>> arena = lay(state, MemoryOptions(alignment=256), kernel_scratch(steps)).arena
    >>> state.load() <= floor(state) <= arena
    True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from planner.memory.arena import aligned
from planner.memory.budget.materialize import Material, OpSpec, node_specs, recompute_specs
from planner.memory.budget.search import State
from planner.memory.liveness import PERSISTENT_ROLES, Buffer
from planner.memory.stash import Stash


class ArenaFloor:
    """floor(state): a lower bound on the arena of `state` laid out with `extra`'s buffers,
    every size rounded up to `alignment` as the layout rounds it (module docstring). Built
    once per search; a call is one pass over the keys and the tensors' spans."""

    def __init__(self, stash: Stash, extra: Callable[[Material], list[Buffer]] | None = None,
                 alignment: int = 1) -> None:
        self.alignment = alignment
        graph = stash.steps.graph
        self.persistent = sum(aligned(t.nbytes, alignment) for t in graph.tensors
                              if t.role in PERSISTENT_ROLES and t.updates is None)
        # The bytes the layout adds to each tensor, live where the tensor is.
        self.padding = {t: aligned(u.bytes, alignment) - u.bytes for t, u in stash.uses.items()
                        if aligned(u.bytes, alignment) != u.bytes}
        self.base = self._kernels(stash, node_specs(stash), extra)
        self.segment = []
        for seg in stash.segments:
            keys = self._kernels(stash, recompute_specs(stash, seg), extra)
            for op in seg.ops:
                node = stash.steps.nodes[op.step]
                for t, o in zip(op.outputs, node.outputs, strict=True):
                    if not t:
                        keys[op.key] += aligned(graph.tensor(o).nbytes, alignment)
            for c in seg.copies:  # counted in the profile; their padding is not
                keys[c.first:c.last + 1] += aligned(c.bytes, alignment) - c.bytes
            at = np.nonzero(keys)[0]
            self.segment.append((at, keys[at]))

    def _kernels(self, stash: Stash, ops: list[OpSpec], extra) -> np.ndarray:
        """Bytes per key of the kernels' buffers of `ops`."""
        keys = np.zeros(stash.keys, dtype=np.int64)
        if extra is None:
            return keys
        for b in extra(Material(ops=ops, buffers=[], edges=[], deps=[], keys=stash.keys)):
            if b.placement == "device":
                keys[int(np.ceil(b.start)):int(np.ceil(b.end))] += aligned(b.bytes,
                                                                           self.alignment)
        return keys

    def __call__(self, state: State) -> int:
        delta = np.zeros(len(state.profile) + 1, dtype=np.int64)
        for t, pad in self.padding.items():
            for a, z in state.spans[t]:
                delta[a] += pad
                delta[z + 1] -= pad
        return int((self._unpadded(state) + np.cumsum(delta[:-1])).max(initial=0)) \
            + self.persistent

    def above(self, state: State, budget: int) -> bool:
        """floor(state) > budget, the padding (a pass over the tensors) counted only where
        the rest does not exceed the budget already."""
        if int(self._unpadded(state).max(initial=0)) + self.persistent > budget:
            return True
        return self(state) > budget

    def _unpadded(self, state: State) -> np.ndarray:
        live = state.profile + self.base
        for sid in state.active:
            at, nbytes = self.segment[sid]
            live[at] += nbytes
        return live
