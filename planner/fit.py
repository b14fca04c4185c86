"""`planner fit`: the largest batch (or ResNet depth) whose plan fits a memory budget, found by
planning: grow the value until a plan fails, then bisect between the last fit and the first
failure (a search over whole plans, so it sits beside the pipeline, above the stages). A value
fits when memory planning under the budget succeeds (offload, recompute and workspaces as
needed), so the answer is exactly as good as the planner.

    batch   16 ok, 32 ok, 64 ok, 128 ok, 256 ok, 512 fails -> bisect 256..512 -> 384 ok, 448 fails,
            416 fails, 400 ok, ... -> the largest that fits

With `data_parallel` (ranks >= 2) the value is one rank's batch of a data-parallel plan
(planner.schedule.parallel), which fits by recomputing too (its collectives on their comm
lane: planner.memory.cpu_budget); with its `shard_optimizer` each
rank holds 1/ranks of the optimizer state, with `shard_parameters` (ZeRO-3) 1/ranks of the
parameters and gradients too, so a larger batch may fit.

With `global_batch` G the value is the micro-batch B of a plan that accumulates G / B of them
per optimizer step (GraphOptions.accumulate, planner/ir/accumulation.py): the largest
divisor of G that fits, so that a global batch beyond the budget still trains, on the memory
of one micro-batch (and one gradient sum per parameter).

`multiple` restricts the search to multiples of it (seed 001's Table 5 reports multiples of 16);
depth varies n in ResNet's 3 x (10 + n) + 2 bottleneck configuration ([3, 4, n, 3], seed 001's
Table 4 grows the third stage the same way).

Example:
    >>> from planner.target import preset
    >>> r = fit("zoo:mlp?hidden=64&in_features=32&classes=4", preset("k40c-12gb"),
    ...         budget_bytes=1 << 20, vary="batch", multiple=8)
    >>> r.value > 0 and r.peak_bytes <= 1 << 20
    True
    >>> r = fit("zoo:mlp?hidden=64&in_features=32&classes=4", preset("xeon-8180"),
    ...         budget_bytes=100_000, global_batch=96, optimizer="sgd")
    >>> r.value * r.accumulate, r.accumulate > 1, r.peak_bytes <= 100_000
    (96, True, True)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, Literal

from planner.costs import CostTable
from planner.errors import InfeasibleBudget
from planner.frontend.options import MAX_ACCUMULATE, GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph, Record
from planner.memory.options import MemoryOptions
from planner.pipeline import BACKENDS, DECISIONS, Planning, PlanOptions, memory_of, planning, run
from planner.schedule.parallel import DataParallelOptions
from planner.target.backends import traits
from planner.target.records import Target
from planner.zoo import ZooError, build, parse_spec
from planner.zoo.resnet import BASIC

Vary = Literal["batch", "depth"]
# Search no further than this many multiples (a budget that fits more is a typo).
LIMIT = 1 << 20


class Trial(Record):
    """One planned value: whether it fit, its peak, or the smallest budget it needs."""

    value: int
    fits: bool
    accumulate: int = 1
    peak_bytes: int = 0
    smallest_bytes: int = 0
    step_seconds: float = 0.0


class FitResult(Record):
    """The largest value that fits (0 when none does) and every trial on the way."""

    model: str
    vary: Vary
    value: int
    accumulate: int = 1  # micro-batches per optimizer step (with a global batch)
    budget_bytes: int
    target: str
    peak_bytes: int
    step_seconds: float
    trials: tuple[Trial, ...]
    params: dict[str, Any]


def depth_of(n: int) -> int:
    """ResNet depth with n blocks in the third stage ([3, 4, n, 3] bottlenecks)."""
    return 3 * (10 + n) + 2


def fit_planning(graph: Graph, target: Target, table: CostTable | None, options: MemoryOptions,
                 data_parallel: DataParallelOptions | None = None) -> Planning:
    """The record the pipeline's stages plan a trial from: fit's schedule for the backend
    (BackendPlanner.fit_schedule), no probes for the smallest budget (a lower bound does:
    fit needs only "does not fit")."""
    return planning(graph, target, table, PlanOptions(
        memory=options.model_copy(update={"infeasible_probes": 0}),
        schedule=BACKENDS[target.backend].fit_schedule,
        data_parallel=data_parallel or DataParallelOptions()))


def peak_and_step(p: Planning) -> tuple[int, float]:
    """Planned peak bytes and step seconds of a step graph's record, by the pipeline's
    decisions (no Plan is assembled). Raises InfeasibleBudget when the budget cannot be met."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = run(p, DECISIONS)
    assert p.schedule is not None and p.memory is not None
    step = max((op.end for op in p.memory.ops or p.schedule.ops), default=0.0)
    return p.memory.summary.peak_bytes, step


def fit(spec: str, target: Target, budget_bytes: int, vary: Vary = "batch",
        optimizer: str = "momentum", multiple: int = 1, table: CostTable | None = None,
        options: MemoryOptions | None = None, precision: str = "fp32",
        data_parallel: DataParallelOptions | None = None,
        graph_options: GraphOptions | None = None,
        global_batch: int | None = None,
        price: Callable[[Graph], CostTable | None] | None = None) -> FitResult:
    """Search as in the module docstring. `spec` is a zoo spec (`zoo:resnet?batch=16`); its
    other parameters stay fixed. Each value's graph is planner.frontend.prepare's under
    `graph_options` (default: a training graph with `optimizer` under `precision`), with
    `global_batch` accumulating it. `price`: the cost table of each trial's graph (measured on
    the host, `planner fit`'s default), else `table` prices them all. Offload only where it
    goes to a slower tier (traits' slower_tier: not a CPU's host store, the same RAM), unless
    `options` say otherwise. Raises ValueError for a spec that cannot vary `vary`, or a
    global batch the target or the options cannot accumulate."""
    name, params = parse_spec(spec)
    _check_request(spec, name, params, vary, multiple, budget_bytes, target)
    options = (options or MemoryOptions(offload=traits(target).slower_tier)).model_copy(
        update={"budget_bytes": budget_bytes})
    graph_options = graph_options or GraphOptions(optimizer=Optimizer(kind=optimizer),
                                                  precision=precision)
    micro = _micro_batches(global_batch, vary, multiple, target, graph_options, data_parallel)
    trials: dict[int, Trial] = {}

    def value_of(k: int) -> int:
        if micro:
            return micro[k - 1]
        return depth_of(k) if vary == "depth" else k * multiple

    def accumulate(value: int) -> int:
        return global_batch // value if micro and global_batch else 1

    def fits(k: int) -> bool:
        if micro and k > len(micro):
            return False  # past the global batch itself
        if k in trials:
            return trials[k].fits
        value = value_of(k)
        each = graph_options.model_copy(update={"accumulate": accumulate(value)})
        trials[k] = _trial(lambda: build(name, **{**params, vary: value}), value, each,
                           target, options, data_parallel,
                           lambda graph: price(graph) if price is not None else table)
        return trials[k].fits

    first = 6 if vary == "depth" else 1  # ResNet-50's n, or one multiple
    best = largest(fits, first)
    ordered = tuple(trials[k] for k in sorted(trials))
    winner = trials.get(best) if best else None
    return FitResult(model=name, vary=vary, value=value_of(best) if best else 0,
                     accumulate=accumulate(value_of(best)) if best else 1,
                     budget_bytes=budget_bytes, target=target.name,
                     peak_bytes=winner.peak_bytes if winner else 0,
                     step_seconds=winner.step_seconds if winner else 0.0, trials=ordered,
                     params={k: v for k, v in params.items() if k != vary})


def _check_request(spec: str, name: str, params: dict, vary: Vary, multiple: int,
                   budget_bytes: int, target: Target) -> None:
    """ValueError for a search `fit` cannot make (its docstring)."""
    if vary == "depth" and name != "resnet":
        raise ValueError(f"--vary depth grows a ResNet; {spec!r} is model {name!r}")
    if vary not in ("batch", "depth"):
        raise ValueError(f"vary must be batch or depth, got {vary!r}")
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    if vary == "depth" and params.get("depth") in BASIC:
        raise ValueError("--vary depth grows bottleneck ResNets (depth >= 50), not "
                         f"depth {params['depth']}")
    if budget_bytes > memory_of(target):
        raise ValueError(f"budget {budget_bytes} bytes is more than the {memory_of(target)} "
                         f"bytes of memory of target {target.name!r}")


def _trial(forward: Callable[[], Graph], value: int, each: GraphOptions, target: Target,
           options: MemoryOptions, data_parallel: DataParallelOptions | None,
           price: Callable[[Graph], CostTable | None]) -> Trial:
    """One value's trial: its graph (`forward()` under `each`) planned under the budget of
    `options`, or why it does not fit (past the zoo's limits, a node beyond the target's
    memory, a budget no decision meets)."""
    accumulate = each.accumulate
    try:
        graph = prepare(forward(), each)
        p = run(fit_planning(graph, target, price(graph), options, data_parallel),
                ("step graph",))
    except ZooError:  # past the zoo's limits (depth, sizes): too big to consider
        return Trial(value=value, fits=False, accumulate=accumulate)
    try:
        p = run(p, ("fits",))
    except ValueError:  # its largest node alone is beyond the target's memory
        return Trial(value=value, fits=False, accumulate=accumulate)
    try:
        peak, step = peak_and_step(p)
    except InfeasibleBudget as e:
        return Trial(value=value, fits=False, accumulate=accumulate,
                     smallest_bytes=e.smallest_bytes)
    return Trial(value=value, fits=True, accumulate=accumulate, peak_bytes=peak,
                 step_seconds=step)


def _micro_batches(global_batch: int | None, vary: Vary, multiple: int, target: Target,
                   options: GraphOptions, data_parallel: DataParallelOptions | None
                   ) -> list[int]:
    """The micro-batches a global batch may be cut into (its divisors that are multiples of
    `multiple`), ascending; [] without one."""
    if global_batch is None:
        return []
    if not 1 <= global_batch <= MAX_GLOBAL_BATCH:
        raise ValueError(f"global batch must be between 1 and 2^48, got {global_batch}")
    if vary != "batch":
        raise ValueError("a global batch is fit by varying the batch, not the depth")
    if not BACKENDS[target.backend].accumulates:
        raise ValueError(f"a global batch is reached by gradient accumulation, which the "
                         f"{target.backend} executor does not run yet: fit for a CPU target")
    if data_parallel is not None and data_parallel.ranks > 1:
        raise ValueError("a global batch with --data-parallel: data-parallel plans do not "
                         "accumulate yet")
    if options.accumulate > 1:
        raise ValueError("give the global batch or --accumulate, not both: fit chooses the "
                         "accumulation")
    # A micro-batch accumulated more often than an executor counts is no choice.
    out = [d for d in divisors(global_batch)
           if d % multiple == 0 and global_batch // d <= MAX_ACCUMULATE]
    if not out:
        raise ValueError(f"global batch {global_batch} has no divisor that is a multiple of "
                         f"{multiple} and at least 1/{MAX_ACCUMULATE} of it (--accumulate's "
                         f"largest)")
    return out


# The divisor search takes sqrt(G) steps (2^24 at most); and a larger batch's micro-batch,
# at least G / 2^31, would be 2^17 samples or more.
MAX_GLOBAL_BATCH = 2**48


def divisors(n: int) -> list[int]:
    """The divisors of `n` >= 1, ascending, in O(sqrt n) steps.

    >>> divisors(12), divisors(1), len(divisors(10**12))
    ([1, 2, 3, 4, 6, 12], [1], 169)
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def largest(fits: Callable[[int], bool], first: int) -> int:
    """The largest k >= first with fits(k), assuming fits is true up to some k and false
    after; 0 when fits(first) is false. Doubles, then bisects."""
    if not fits(first):
        return 0
    lo, hi = first, first * 2
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > LIMIT:
            return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
