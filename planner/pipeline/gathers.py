"""ZeRO-3's memory under a memory budget, chosen by planning (the stage "gathers" of
planner.pipeline's STAGES): what SimpleFSDP and FSDP2 users tune by hand (the bucket size, how
far ahead of its reader each all-gather is issued, whether a bucket's gathered copy is kept
from forward to backward or freed and gathered again) chosen from the costs: under
--memory-budget, the decisions whose plan fits it at the fastest predicted step.

Without a budget planning keeps the default decisions (the rules of
planner.step.collectives.sharded_parameters; `gathers` left None) and does not search. It did:
it chose the smallest arena whose predicted step was within 2% of the default decisions', and
on the bench GPT (2 gloo ranks, bench/results/2026-11-29-zero3-chosen.md) that plan held 5%
less but stepped 1.4-1.9x slower where the model predicted +0-1%: the link model prices each
added or exposed collective in microseconds where on ranks sharing a loaded host it costs
milliseconds. Until collectives are priced as the step runs them, a step that trade may make
slower is one the user asks for, by naming the memory.

    for each bucket size (the default's, a half and a quarter of it; one given: that one)
        plan the step with the default decisions (GatherChoice())
        repeat: at the step's peak (the op where the most bytes are live), every gathered copy
                live there that the op does not read is a move:
                  read later       issue its all-gather behind the peak op (prefetch depth)
                  read before and  free it after forward, gather it again (keep: false)
                  after, kept
                plan the moves together, else each alone; keep the first that fits the
                budget at a faster step; until none does
    the fastest plan that fits, its decisions recorded in the options (DataParallelOptions.gathers)

Under a budget the memory planner fits a step by running it more serially
(planner.memory.cpu_budget), so a move that frees gathered bytes at the peak can make the
fitting step faster. The moves start from a bucket size's default decisions where they fit
the budget; where they do not, from the decisions the same moves reach on the plan without a
budget (every move at the peak at once, while the arena falls) once those fit it, the budget
search recomputing activations for the rest (planner.memory.cpu_budget); a budget none of
those meets is refused as memory planning refuses the default decisions. Each trial is
the plan's own stages (step graph, schedule, memory planning) on one cost model, so the choice
is a pure function of the graph, costs and options: the same inputs give the same decisions,
and re-planning a plan with its recorded options (planner explain, verify) makes the same plan
without searching.

Example:
    >>> import warnings
    >>> from planner.frontend.options import GraphOptions
    >>> from planner.frontend.prepare import prepare
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.memory.options import MemoryOptions
    >>> from planner.pipeline import PlanOptions, plan
    >>> from planner.schedule.parallel import DataParallelOptions
    >>> from planner.target import preset
    >>> g = prepare("zoo:mlp?batch=64&hidden=256,256&in_features=64&classes=8",
    ...             GraphOptions(optimizer=Optimizer(kind="adam")))
    >>> def zero3(budget=None):
    ...     with warnings.catch_warnings():
    ...         warnings.simplefilter("ignore")
    ...         return plan(g, preset("xeon-8180"), evaluation=False, options=PlanOptions(
    ...             memory=MemoryOptions(budget_bytes=budget),
    ...             data_parallel=DataParallelOptions(ranks=2, shard_parameters=True)))
    >>> default = zero3()
    >>> "gathers" in default.provenance.options["data_parallel"]  # as without ZeRO-3's search
    False
    >>> budget = default.summary.memory.arena_bytes * 95 // 100
    >>> chosen = zero3(budget)
    >>> chosen.summary.memory.arena_bytes <= budget
    True
    >>> chosen.provenance.options["data_parallel"]["gathers"]["default_arena_bytes"] <= budget
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import planner.pipeline.stages as stages
from planner.errors import InfeasibleBudget
from planner.memory.decision import MemoryDecision
from planner.pipeline.record import Planning
from planner.schedule.parallel import chosen_collectives
from planner.step.collectives import GatherChoice
from planner.step.collectives.sharded_parameters import gather_bucket, kept_buckets
from planner.target.backends import traits

# The bucket sizes tried, as divisors of the default's: smaller buckets hold fewer gathered
# bytes at once and pay one collective's latency more per bucket.
BUCKET_DIVISORS = (1, 2, 4)
# Plans tried per bucket size after the default's: each is a whole schedule and memory plan.
MOVES_PER_BUCKET_SIZE = 4
# The arena heuristics the trials leave to the final layout (planner.memory.arena): the seeded
# multi-start took 5.7 of a GPT search's 10 s.
SLOW_HEURISTICS = ("perturbed-size",)


@dataclass(frozen=True)
class Trial:
    """One set of decisions planned: the step graph, its schedule and memory decision."""

    bucket_bytes: int
    gathers: GatherChoice
    planning: Planning

    @property
    def arena_bytes(self) -> int:
        assert self.planning.memory is not None
        return self.planning.memory.summary.arena_bytes

    @property
    def step_seconds(self) -> float:
        return max((op.end for op in self.ops), default=0.0)

    @property
    def ops(self) -> tuple:
        assert self.planning.memory is not None and self.planning.schedule is not None
        return self.planning.memory.ops or self.planning.schedule.ops


def choose_gathers(p: Planning) -> Planning:
    """`p` with ZeRO-3's decisions chosen under its memory budget (module docstring) and
    recorded in its options' data_parallel.gathers; `p` itself where it shards no parameters,
    its options give the decisions or it has no budget (the default decisions). Where no
    decisions fit the budget, the default's are recorded (memory planning then names the
    smallest feasible budget)."""
    dp = p.options.data_parallel
    if dp.ranks == 1 or not dp.shard_parameters or dp.gathers is not None \
            or p.options.memory.budget_bytes is None or not traits(p.target).shards_parameters:
        return p
    priced = stages.price(p.but(graph=stages.step(p).graph))
    default = chosen_collectives(p.graph, p.target, dp).bucket_bytes
    found = _searched(_quick(p), priced, default, dp.bucket_bytes is not None)
    base = _trial(p, priced, default, GatherChoice())
    chosen = None if found is None or (found.bucket_bytes, found.gathers) == (
        default, GatherChoice()) else _trial(p, priced, found.bucket_bytes, found.gathers)
    best = _better(chosen, base) or Trial(default, GatherChoice(), p)
    record = best.gathers.model_copy(update={} if base is None else {
        "default_bucket_bytes": default, "default_keep": kept_buckets(base.planning.graph),
        "default_arena_bytes": base.arena_bytes, "default_step_seconds": base.step_seconds})
    return p.but(options=p.options.model_copy(update={"data_parallel": dp.model_copy(
        update={"bucket_bytes": best.bucket_bytes, "gathers": record})}))


def _quick(p: Planning) -> Planning:
    """`p` laid out by the quick arena heuristics (all but the seeded multi-start, which
    takes most of a layout's time): the search's trials compare arenas laid out alike, each
    an upper bound on the final layout's."""
    memory = p.options.memory
    quick = tuple(h for h in memory.heuristics if h not in SLOW_HEURISTICS) \
        or memory.heuristics
    return p.but(options=p.options.model_copy(update={
        "memory": memory.model_copy(update={"heuristics": quick})}))


def _searched(p: Planning, priced: Planning, default: int, given: bool) -> Trial | None:
    """The fastest decisions that fit the budget the moves find from the default's at each
    bucket size whose default decisions fit it (the default's, then smaller ones while they
    do better; `given`: the default's alone)."""
    best = None
    for size in (default,) if given else tuple(dict.fromkeys(
            max(4, default // d) for d in BUCKET_DIVISORS)):
        start = _fitting_start(p, priced, size)
        found = None if start is None else _improved(p, priced, start)
        if best is not None and _better(found, best) is best:
            break
        best = _better(found, best)
    return best


def _fitting_start(p: Planning, priced: Planning, size: int) -> Trial | None:
    """The default decisions at bucket size `size` under the budget; where they do not fit
    it, the decisions the peak moves reach from them on the plan without a budget (every move
    at once, each round, while the arena falls) as soon as they fit it (memory planning's
    recomputes meet the rest); None where none does."""
    start = _trial(p, priced, size, GatherChoice())
    if start is not None:
        return start
    free = p.but(options=p.options.model_copy(update={
        "memory": p.options.memory.model_copy(update={"budget_bytes": None})}))
    t = _trial(free, priced, size, GatherChoice())
    for _ in range(MOVES_PER_BUCKET_SIZE):
        moves = [] if t is None else peak_moves(t)
        if t is None or not moves:
            return None
        gathers = _merged(t.gathers, moves, t)
        fits = _trial(p, priced, size, gathers)
        if fits is not None:
            return fits
        lower = _trial(free, priced, size, gathers)
        if lower is None or lower.arena_bytes >= t.arena_bytes:
            return None
        t = lower
    return None


def _trial(p: Planning, priced: Planning, size: int, gathers: GatherChoice) -> Trial | None:
    """The step planned with buckets of `size` and `gathers` (None: it does not fit the
    memory budget)."""
    dp = p.options.data_parallel.model_copy(update={"bucket_bytes": size, "gathers": gathers})
    q = p.but(options=p.options.model_copy(update={"data_parallel": dp}))
    q = stages.step(q).but(model=priced.model)
    try:
        return Trial(size, gathers, stages.place_memory(stages.schedule(q)))
    except InfeasibleBudget:
        return None


def _better(t: Trial | None, best: Trial | None) -> Trial | None:
    """The better of two trials that fit the budget (None: one that does not): the faster,
    then the smaller."""
    if t is None or best is None:
        return best if t is None else t
    return t if (t.step_seconds, t.arena_bytes) < (best.step_seconds, best.arena_bytes) \
        else best


def _improved(p: Planning, priced: Planning, start: Trial) -> Trial:
    """`start` after the greedy moves at its peak (module docstring) that make it better."""
    best, tried = start, 0
    while tried < MOVES_PER_BUCKET_SIZE:
        moves = peak_moves(best)
        if not moves:
            return best
        together = _merged(best.gathers, moves, best)
        options = [together] + ([_merged(best.gathers, [m], best) for m in moves]
                                if len(moves) > 1 else [])
        for gathers in options[:MOVES_PER_BUCKET_SIZE - tried]:
            tried += 1
            t = _trial(p, priced, best.bucket_bytes, gathers)
            if _better(t, best) is not best:
                assert t is not None
                best = t
                break
        else:
            return best
    return best


# A move: ("prefetch", all-gather, its new depth) or ("free", all-gather, 0).
Move = tuple[str, str, int]


def peak_moves(t: Trial) -> list[Move]:
    """The moves at `t`'s peak: per gathered copy live at the op where the most bytes are
    live and not read by it, its all-gather's depth cut to behind that op (its first reader
    later), or its forward copy freed (a kept copy read before and after)."""
    assert t.planning.memory is not None
    ops = t.ops
    memory: MemoryDecision = t.planning.memory
    live = [0] * len(ops)
    for b in memory.tensors:
        if b.placement == "device" and not b.alias_of:
            for k in range(max(b.first, 0), min(b.last, len(ops) - 1) + 1):
                live[k] += b.bytes
    if not live:
        return []
    peak = max(range(len(ops)), key=lambda k: (live[k], -k))
    graph = t.planning.graph
    # (the rewrite's names: planner.step.collectives.sharded_parameters reserves them)
    gather_of = {c: n for n in graph.nodes if n.name.startswith("allgather/")
                 for c in n.outputs}
    pos = {op.name: k for k, op in enumerate(ops)}
    moves: dict[str, Move] = {}
    for b in memory.tensors:
        node = gather_of.get(b.tensor)
        if node is None or not b.first <= peak <= b.last or ops[peak].name in b.readers:
            continue
        reads = sorted(pos[r] for r in b.readers if r in pos)
        if reads and reads[0] > peak:
            depth = sum(1 for op in ops[peak + 1:reads[0]] if op.cpus)
            moves[node.name] = ("prefetch", node.name, depth)
        elif node.attrs.get("keep") == 1 and reads and reads[0] < peak < reads[-1]:
            moves[node.name] = ("free", node.name, 0)
    return [moves[n] for n in sorted(moves)]


def _merged(gathers: GatherChoice, moves: list[Move], t: Trial) -> GatherChoice:
    """`gathers` with `moves` made (the keep list read off `t`'s graph where it was the
    graph's rule)."""
    keep = list(gathers.keep or kept_buckets(t.planning.graph))
    limits = gathers.prefetch_limits()
    for kind, name, depth in moves:
        if kind == "prefetch":
            limits[name] = min(depth, limits.get(name, depth))
        else:
            keep[gather_bucket(name)] = False
    return gathers.model_copy(update={"keep": tuple(keep),
                                      "prefetch": tuple(sorted(limits.items()))})

