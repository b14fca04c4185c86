"""An exact MILP for recomputation, in the style of Checkmate (Jain et al., MLSys 2020), as a
cross-check of the greedy on small graphs.

Checkmate chooses, per stage of a fixed order, what to recompute and what to keep, to minimise
recompute time under a memory limit at every stage. Here the stages are the stream's keys, the
choices are the segments of planner.memory.stash (recompute segment G or keep it), and memory
is the same exact live-bytes profile the greedy uses, so the two answer the same question:

    minimise    sum_G  seconds_G x_G
    subject to  base[k] + sum_G delta_G[k] x_G + sum_s bytes_s z[s, k]  <=  budget - persistent
                                                                       for every key k
                z[s, k] >= x_G  for every segment G that reads source s at a key >= k,
                                where k lies past s's own last use
                x_G, z[s, k] in {0, 1}

delta_G is the change segment G makes to the profile on its own (members freed after their last
forward read, recomputed copies alive in backward); z[s, k] says that source s must stay live at
key k because some chosen recompute reads it later (a union, hence its own variable). HiGHS
solves it within a time limit; `status` says whether the optimum was proven.

Example:
    >>> from planner.costs import CostModel
    >>> from planner.target import preset
    >>> from planner.schedule.streams import compute_steps
    >>> from planner.memory.stash import analyze
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("alexnet", batch=16, image=63, width=0.125, classes=4),
    ...                         Optimizer(kind="sgd"))
    >>> stash = analyze(compute_steps(g, CostModel(preset("k40c-12gb"))))
    >>> free = State(stash, 1.0, offload=False).load()
    >>> exact = recompute_milp(stash, free - 1)
    >>> greedy = greedy_recompute(stash, free - 1)
    >>> exact.status, exact.seconds <= greedy.seconds
    ('optimal', True)
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np

from planner.memory.budget.search import Move, State, cheapest_stop, source_reads
from planner.memory.stash import Stash


@dataclass(frozen=True)
class RecomputeChoice:
    """Segments recomputed, their total seconds, and the resulting LOAD (None: the budget
    cannot be met by recomputation). `status`: optimal, time limit, infeasible, greedy."""

    segments: tuple[int, ...]
    seconds: float
    load: int | None
    status: str


def greedy_recompute(stash: Stash, budget: int) -> RecomputeChoice:
    """The greedy of planner.memory.budget.search with offload off, stopped as it stops there but on
    LOAD (the MILP's constraint) rather than the laid-out arena."""
    state = State(stash, 1.0, offload=False)
    while (stop := cheapest_stop(state, budget, lambda s: True)) is None:
        move = state.best_move()
        if move is None:
            return RecomputeChoice(tuple(sorted(state.active)), _seconds(stash, state.active),
                                   None, "infeasible")
        state.apply(move)
    return RecomputeChoice(tuple(sorted(stop.active)), _seconds(stash, stop.active),
                           stop.load(), "greedy")


def _seconds(stash: Stash, segments) -> float:
    return float(sum(stash.segments[g].seconds for g in segments))


def profile_with(stash: Stash, segments) -> State:
    """The State with exactly these segments recomputed."""
    state = State(stash, 1.0, offload=False)
    for g in sorted(segments):
        state.apply(Move("recompute", segment=int(g), cost=0.0, saving=1))
    return state


def recompute_milp(stash: Stash, budget: int, time_limit: float = 10.0) -> RecomputeChoice:
    """The cheapest set of segments whose recomputation brings LOAD within `budget`."""
    base = State(stash, 1.0, offload=False)
    keys = stash.keys
    limit = budget - stash.persistent_bytes
    segments = stash.segments
    deltas, reads = [], []
    for g in segments:
        alone = base.clone()
        # The segment's own effect, without the sources it keeps alive (modelled by z).
        alone.apply(Move("recompute", segment=g.id, cost=0.0, saving=1))
        delta = alone.profile - base.profile
        # The sources the recompute keeps live longer: z's, so taken out of its own delta.
        longer = {src: span for src, keys in source_reads(stash, g).items()
                  if (span := base.kept_longer(src, max(keys))) is not None}
        for src, (first, last) in longer.items():
            delta[first:last + 1] -= stash.uses[src].bytes
        deltas.append(delta)
        reads.append(longer)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
    inf = highspy.kHighsInf
    n = len(segments)
    for g in segments:
        h.addVar(0.0, 1.0)
        h.changeColCost(g.id, g.seconds * 1e6)  # microseconds: well above the tolerances
    z: dict[tuple[str, int], int] = {}
    for gid, r in enumerate(reads):
        for src, (first, last) in r.items():
            for k in range(first, last + 1):
                if (src, k) not in z:
                    z[(src, k)] = h.getNumCol()
                    h.addVar(0.0, 1.0)
                col = z[(src, k)]
                h.addRow(0.0, inf, 2, np.array([col, gid], dtype=np.int32),
                         np.array([1.0, -1.0]))
    h.changeColsIntegrality(h.getNumCol(), np.arange(h.getNumCol(), dtype=np.int32),
                            np.full(h.getNumCol(), highspy.HighsVarType.kInteger))
    by_key: dict[int, list[tuple[int, float]]] = {}
    for (src, k), col in z.items():
        by_key.setdefault(k, []).append((col, float(stash.uses[src].bytes)))
    for k in range(keys):
        cols = [(gid, float(deltas[gid][k])) for gid in range(n) if deltas[gid][k]]
        cols += by_key.get(k, [])
        rhs = float(limit - base.profile[k])
        if not cols:
            if rhs < 0:
                return RecomputeChoice((), 0.0, None, "infeasible")
            continue
        idx = np.array([c for c, _ in cols], dtype=np.int32)
        val = np.array([v for _, v in cols])
        h.addRow(-inf, rhs, len(cols), idx, val)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return RecomputeChoice((), 0.0, None, "infeasible")
    solution = h.getSolution().col_value
    if not len(solution):
        return RecomputeChoice((), 0.0, None, "time limit")
    chosen = tuple(g for g in range(n) if solution[g] > 0.5)
    load = profile_with(stash, chosen).load()
    label = "optimal" if status == highspy.HighsModelStatus.kOptimal else "time limit"
    return RecomputeChoice(chosen, _seconds(stash, chosen), load, label)
