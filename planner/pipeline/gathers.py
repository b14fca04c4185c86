"""ZeRO-3's memory, chosen by planning (the stage "gathers" of planner.pipeline's STAGES): what
SimpleFSDP and FSDP2 users tune by hand (the bucket size, how far ahead of its reader each
all-gather is issued, whether a bucket's gathered copy is kept from forward to backward or
freed and gathered again) chosen from the costs, so that the arena is the smallest whose
predicted step is within STEP_TOLERANCE of the default decisions' (under --memory-budget: the
fastest plan that fits it).

    for each bucket size (the default's, a half and a quarter of it; one given: that one)
        plan the step with the default decisions (GatherChoice())
        repeat: at the step's peak (the op where the most bytes are live), every gathered copy
                live there that the op does not read is a move:
                  read later       issue its all-gather behind the peak op (prefetch depth)
                  read before and  free it after forward, gather it again (keep: false)
                  after, kept
                plan the moves together, else each alone; keep the first that lowers the arena
                within the step's bound; until none does
    the best plan of all, its decisions recorded in the options (DataParallelOptions.gathers)

Each trial is the plan's own stages (step graph, schedule, memory planning) on one cost model,
so the choice is a pure function of the graph, costs and options: the same inputs give the same
decisions, and re-planning a plan with its recorded options (planner explain, verify) makes the
same plan without searching.

Example:
    >>> import warnings
    >>> from planner.frontend.options import GraphOptions
    >>> from planner.frontend.prepare import prepare
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.pipeline import PlanOptions, plan
    >>> from planner.schedule.parallel import DataParallelOptions
    >>> from planner.target import preset
    >>> g = prepare("zoo:mlp?batch=64&hidden=256,256&in_features=64&classes=8",
    ...             GraphOptions(optimizer=Optimizer(kind="adam")))
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     p = plan(g, preset("xeon-8180"), evaluation=False, options=PlanOptions(
    ...         data_parallel=DataParallelOptions(ranks=2, shard_parameters=True)))
    >>> chosen = p.provenance.options["data_parallel"]["gathers"]
    >>> p.summary.memory.arena_bytes <= chosen["default_arena_bytes"]
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

# How much longer than the default decisions' predicted step a chosen plan's may be: the
# moves that free memory delay a gather's issue or add one; a step 2% longer is within the
# cost model's error, a larger one is a trade the user makes with --memory-budget. (The
# prediction, not the run: on gloo ranks sharing a loaded 2-core host each added or exposed
# collective cost milliseconds the link model prices in microseconds, and the chosen GPT
# plan stepped 1.4-1.9x the default's: bench/results/2026-11-29-zero3-chosen.md.)
STEP_TOLERANCE = 0.02
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
    """`p` with ZeRO-3's decisions chosen (module docstring) and recorded in its options'
    data_parallel.gathers; `p` itself where it shards no parameters or its options give them.
    The chosen plan's arena is at most the default decisions' (laid out alike); where no
    decisions fit the memory budget, the default's are recorded (memory planning then names
    the smallest feasible budget)."""
    dp = p.options.data_parallel
    if dp.ranks == 1 or not dp.shard_parameters or dp.gathers is not None \
            or not traits(p.target).shards_parameters:
        return p
    priced = stages.price(p.but(graph=stages.step(p).graph))
    default = chosen_collectives(p.graph, p.target, dp).bucket_bytes
    found = _searched(_quick(p), priced, default, dp.bucket_bytes is not None)
    base = _trial(p, priced, default, GatherChoice())
    chosen = None if found is None or (found.bucket_bytes, found.gathers) == (
        default, GatherChoice()) else _trial(p, priced, found.bucket_bytes, found.gathers)
    budget = p.options.memory.budget_bytes is not None
    bound = base.step_seconds * (1 + STEP_TOLERANCE) if base is not None else float("inf")
    best = _better(chosen, base, bound, budget) if base is not None else chosen
    if best is None:
        best = Trial(default, GatherChoice(), p)
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
    """The best decisions the moves find from the default's at each bucket size (the
    default's, then smaller ones while they do better; `given`: the default's alone)."""
    budget = p.options.memory.budget_bytes is not None
    base = _trial(p, priced, default, GatherChoice())
    bound = base.step_seconds * (1 + STEP_TOLERANCE) if base is not None else float("inf")
    best = None
    for size in (default,) if given else tuple(dict.fromkeys(
            max(4, default // d) for d in BUCKET_DIVISORS)):
        start = base if size == default else _trial(p, priced, size, GatherChoice())
        found = None if start is None else _improved(p, priced, start, bound, budget)
        if best is not None and _better(found, best, bound, budget) is best:
            break
        best = _better(found, best, bound, budget)
    return best


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


def _better(t: Trial | None, best: Trial | None, bound: float, budget: bool) -> Trial | None:
    """The better of two trials: under a budget the faster (then the smaller); else the
    smaller of those within the step's bound (then the faster)."""
    if t is None or (not budget and t.step_seconds > bound and best is not None):
        return best
    if best is None:
        return t
    key = ((lambda x: (x.step_seconds, x.arena_bytes)) if budget
           else (lambda x: (x.arena_bytes, x.step_seconds)))
    return t if key(t) < key(best) else best


def _improved(p: Planning, priced: Planning, start: Trial, bound: float,
              budget: bool) -> Trial:
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
            if _better(t, best, bound, budget) is not best:
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

