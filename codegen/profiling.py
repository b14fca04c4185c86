"""Measuring op kernels on this machine: the `time_op` the profiling driver
(planner.costs.profile) calls, backed by the generated executor itself.

For a batch of signatures, one executor is built whose plan holds, per signature, one copy of
the op per placement the hill climb may ask for (every thread count of its grid, compact and
spread): each copy is an op of the plan with exactly those logical CPUs, all copies ordered one
after another, so the lanes pin every copy's OpenMP team to its CPUs and nothing co-runs. A
few steps later, every placement's median time is known; `time_op` answers from it. One
compile per batch, whatever the thread grid.

    signatures = list(graph_signatures(graph).values())
    timer = KernelTimer(detect(), work_dir, signatures=signatures)
    run = profile(signatures, target, timer, options)

or every op inside the real step, one uniform plan per thread count:

    table = profile_in_step(graph, detect(), work_dir)

Example (kernels run for real: built and measured here):
    >>> timer = KernelTimer(detect(), tempfile.mkdtemp())               # doctest: +SKIP
    >>> sig = OpSignature(op="Relu", shapes=((64, 64),), dtypes=("float32",))
    >>> timer(sig, 1, (0,)) > 0                                         # doctest: +SKIP
    True
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from codegen.build import build, runtime_key
from codegen.load import load
from codegen.render import module_name, render
from planner.costs.conv_layouts import alternatives
from planner.costs.gpu_profile import batches, signature_bytes
from planner.costs.model import MissingCostWarning
from planner.costs.profile import ProfileOptions
from planner.costs.records import CostTable
from planner.costs.signature import PLAIN, OpSignature, graph_signatures, unique_signatures
from planner.costs.team_scale import Ran, team_scale
from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node, Tensor
from planner.ir.record import CpuId
from planner.ops.base import OpError
from planner.pipeline import planning, run
from planner.plan import Plan, digest
from planner.schedule.contention_fit import Placed, fit_corun_figures
from planner.schedule.record import Bound, Edge, Schedule, ScheduledOp
from planner.target.backends import channel_block, traits
from planner.target.records import AFFINITIES, Target, affinity_cpus


def copies_graph(sig: OpSignature, copies: int) -> Graph:
    """`copies` independent nodes of the signature's op reading the same inputs (graph
    inputs of its shapes and dtypes, integer ones valid ids for their consumer)."""
    tensors, nodes, outputs = _copies(sig, copies, "")
    graph = Graph(name=f"profile_{sig.op}", kind="inference", tensors=tensors, nodes=nodes,
                  outputs=outputs)
    return check_graph(graph)


def signatures_graph(runs: list[tuple[OpSignature, int]], written: bool = False) -> Graph:
    """copies_graph of several signatures in one graph: for run k, its inputs and copies
    named `s{k}_in{i}`, `s{k}_copy{j}` (its nodes in the order given: `_before(sig)` nodes
    that make its operands, its copies, `_after(sig, copies)` that read blocked outputs).
    written=True: every float32 operand written in the graph just before its signature's
    copies (WRITTEN). An operand the signature has blocked (OpSignature.layouts) is written
    so and read so either way (BLOCKED), and the step's blocked pass then keeps it blocked."""
    tensors: list[Tensor] = []
    nodes: list[Node] = []
    outputs: list[str] = []
    for k, (sig, copies) in enumerate(runs):
        ts, ns, outs = _copies(sig, copies, f"s{k}_", written)
        tensors += ts
        nodes += ns
        outputs += outs
    graph = Graph(name="profile", kind="inference", tensors=tuple(tensors), nodes=tuple(nodes),
                  outputs=tuple(outputs))
    return check_graph(graph)


# Operand dtypes a host array cannot carry into a step: numpy has no bfloat16 of its own
# (ml_dtypes' crosses neither DLPack nor the buffer protocol, so the bindings refuse it). Such an
# operand is fed as float32 and cast in the graph by a node `{prefix}cast{i}`, which runs
# before the copies and is not one of them (the timers read the copies' times only).
CAST_IN_GRAPH = frozenset({"bfloat16"})

# Operands a step's op reads were just written by its producer (in its cores' caches, or
# handed over from another lane's); operands fed before a batch's step sit behind the other
# signatures' data (memory-bound ops ran 2-3x slower so: bench/results/
# 2026-11-25-default-vs-in-step.md). With written=True each float32 operand is fed and
# negated in the graph (Neg: a parallel loop over the operand, as a step's producers write
# theirs on their team's cores, and a standard normal feed stays one) right before its
# consumer: the uniform plans' FIFO lanes run it just before the copies, and the co-running
# lanes hand some of them across cores, as a step's do. Other operands are fed as they are
# (integer ids valid for their consumer: graph.interpret.random_feeds), bfloat16 ones cast
# in the graph as always.
WRITTEN = "float32"

# An operand a step keeps channel-blocked crosses no graph boundary (what is fed and returned
# is plain: planner.step.blocked), so where a signature has one blocked, it is written (even
# with written=False) by a depthwise 1x1 convolution from its plain feed, `{prefix}block{i}`,
# and each copy's blocked output is read by another, `{prefix}unblock{k}_{j}`, into the graph's
# plain output: convolutions take either layout at their image and output, as the step's
# producers of blocked images are. Neither is timed. The step's blocked pass then keeps the
# operands blocked exactly where the signature says (`_measured_batch` checks the keys).
BLOCKED = "Conv2D"


def _before(sig: OpSignature, written: bool = False) -> int:
    """How many nodes of `_copies` come before the signature's copies (casts and writes)."""
    return sum(d in CAST_IN_GRAPH or (written and d == WRITTEN) or _blocked(sig, i)
               for i, d in enumerate(sig.dtypes))


def _after(sig: OpSignature, copies: int) -> int:
    """How many nodes of `_copies` come after its copies (readers of blocked outputs)."""
    return copies * sum(_blocked(sig, i) for i in range(len(sig.shapes), len(sig.layouts)))


def _blocked(sig: OpSignature, operand: int) -> bool:
    """Whether operand `operand` of the signature (inputs then outputs) is blocked."""
    return bool(sig.layouts) and sig.layouts[operand] != PLAIN


def _copies(sig: OpSignature, copies: int, prefix: str, written: bool = False
            ) -> tuple[tuple[Tensor, ...], tuple[Node, ...], tuple[str, ...]]:
    """The tensors and nodes of `copies` runs of the signature (the in-graph casts and writes
    first, the readers of blocked outputs last), and the graph's outputs."""
    from planner.ops import get_op
    from planner.ops.base import TensorType

    n_in = len(sig.shapes)
    inputs = tuple(Tensor(name=f"{prefix}in{i}", shape=s, dtype=d,
                          role="activation" if (d in CAST_IN_GRAPH or (written and d == WRITTEN)
                                                or _blocked(sig, i)) else "input")
                   for i, (s, d) in enumerate(zip(sig.shapes, sig.dtypes, strict=True)))
    op = get_op(sig.op)
    attrs = op.normalize_attrs(dict(sig.attrs))
    outs = op.infer([TensorType(t.shape, t.dtype) for t in inputs], attrs)
    if sig.layouts and len(sig.layouts) != n_in + len(outs):
        raise ValueError(f"{sig.key}: {len(sig.layouts)} layouts for {n_in} inputs and "
                         f"{len(outs)} outputs")
    tensors, nodes = [], []
    for i, t in enumerate(inputs):
        if t.role == "input":
            tensors.append(t)
            continue
        fed = Tensor(name=f"{prefix}fed{i}", shape=t.shape, dtype="float32", role="input")
        tensors += [fed, t]
        if _blocked(sig, i):
            mix = _depthwise(f"{prefix}mix{i}", t.shape[1])
            tensors.append(mix)
            nodes.append(Node(name=f"{prefix}block{i}", op=BLOCKED,
                              attrs={"groups": t.shape[1]}, inputs=(fed.name, mix.name),
                              outputs=(t.name,)))
        elif t.dtype in CAST_IN_GRAPH:
            nodes.append(Node(name=f"{prefix}cast{i}", op="Cast", attrs={"to": t.dtype},
                              inputs=(fed.name,), outputs=(t.name,)))
        else:
            nodes.append(Node(name=f"{prefix}write{i}", op="Neg", inputs=(fed.name,),
                              outputs=(t.name,)))
    outputs: list[str] = []
    readers: list[Node] = []
    for k in range(copies):
        names = tuple(f"{prefix}out{k}_{j}" for j in range(len(outs)))
        tensors += [Tensor(name=n, shape=t.shape, dtype=t.dtype) for n, t in zip(names, outs,
                                                                                   strict=True)]
        nodes.append(Node(name=f"{prefix}copy{k}", op=sig.op, attrs=dict(sig.attrs),
                          inputs=tuple(t.name for t in inputs), outputs=names))
        for j, (name, t) in enumerate(zip(names, outs, strict=True)):
            if not _blocked(sig, n_in + j):
                outputs.append(name)
                continue
            mix = _depthwise(f"{prefix}mix_out{k}_{j}", t.shape[1])
            plain = Tensor(name=f"{prefix}plain{k}_{j}", shape=t.shape, dtype=t.dtype)
            tensors += [mix, plain]
            readers.append(Node(name=f"{prefix}unblock{k}_{j}", op=BLOCKED,
                                attrs={"groups": t.shape[1]}, inputs=(name, mix.name),
                                outputs=(plain.name,)))
            outputs.append(plain.name)
    return tuple(tensors), tuple(nodes + readers), tuple(outputs)


def _depthwise(name: str, channels: int) -> Tensor:
    """A fed (C, 1, 1, 1) weight of a depthwise 1x1 convolution (BLOCKED)."""
    return Tensor(name=name, shape=(channels, 1, 1, 1), dtype="float32", role="input")


def placements_plan(graph: Graph, target: Target,
                    placements: list[tuple[int, tuple[CpuId, ...]]]) -> Plan:
    """A plan running node k of `graph` on placements[k] (threads, CPUs), one after another:
    a schedule of one op per second, memory planned and assembled as any plan of a CPU
    target. ValueError for a target whose plans do not run on its CPUs."""
    if not traits(target).timed_on_host:
        raise ValueError(f"target {target.name!r}: kernels are timed on its CPUs, and its "
                         f"plans run on the {target.backend} backend")
    ops = tuple(ScheduledOp(name=node.name, op=node.op, cpus=cpus, threads=threads,
                            start=float(k), end=float(k + 1))
                for k, (node, (threads, cpus)) in enumerate(zip(graph.nodes, placements,
                                                                strict=True)))
    seconds = float(len(ops))
    schedule = Schedule(
        backend=target.backend, strategy="profile", ops=ops,
        edges=tuple(Edge(before=a.name, after=b.name)
                    for a, b in zip(ops, ops[1:], strict=False)),
        bound=Bound(seconds=seconds, critical_path=seconds, area=seconds), mean_corun=1.0)
    # The pipeline's stages after scheduling, as for any plan of the target.
    out = run(planning(graph, target).but(schedule=schedule),
              ("price", "place memory", "assemble")).plan
    assert out is not None
    return out


# Signatures measured by one executor (one compile for all): a batch's outputs stay live to
# the step's end, so its bytes are capped too; a few dozen keep an interrupted run's loss small.
BATCH_SIGNATURES = 32
BATCH_BYTES = 256 << 20


class KernelTimer:
    """time_op(signature, threads, cpus) -> seconds, by the generated executor on this host.

    `options` fixes the thread grid measured per signature (the hill climb's: 1, 1 + interval,
    ..., the last core; both affinities); `steps` executor steps after one warm-up give each
    placement's median. Kernels are built under `work_dir`, one folder per executor.

    `signatures`, the ones the driver will ask for, are measured in batches: the first call
    for one builds and runs the executor of its batch (signatures_graph: each signature's
    copies one after another), a compile per batch rather than per signature. When a batch
    fails (a kernel that does not build or run), its signatures are measured alone, so the
    broken one fails by itself. Others are measured alone when asked for.
    """

    def __init__(self, target: Target, work_dir: str | Path,
                 options: ProfileOptions | None = None, steps: int = 5,
                 signatures: Sequence[OpSignature] = ()) -> None:
        if not traits(target).timed_on_host:
            raise ValueError(f"target {target.name!r} has no CPU executor to measure on")
        self.target, self.dir, self.steps = target, Path(work_dir), steps
        self.options = options or ProfileOptions()
        self._times: dict[str, dict[tuple[CpuId, ...], float]] = {}
        held_bytes = {s.key: _held_bytes(s, 1 + len(self.grid()))
                      for s in unique_signatures(signatures)}
        self._batch_of: dict[str, tuple[OpSignature, ...]] = {}
        for held in batches([s for s in unique_signatures(signatures)
                             if held_bytes[s.key] is not None], BATCH_BYTES,
                            lambda s: held_bytes[s.key]):
            for k in range(0, len(held), BATCH_SIGNATURES):
                batch = tuple(held[k:k + BATCH_SIGNATURES])
                self._batch_of.update((s.key, batch) for s in batch)

    def grid(self) -> list[tuple[int, tuple[CpuId, ...]]]:
        """Every (threads, CPUs) the hill climb may ask for, each once."""
        cores = min(self.options.max_threads or self.target.cores, self.target.cores)
        counts = sorted({*range(1, cores + 1, self.options.interval), cores})
        out: dict[tuple[CpuId, ...], int] = {}
        for k in counts:
            for affinity in self.options.affinities or AFFINITIES:
                out.setdefault(affinity_cpus(self.target, k, affinity), k)
        return [(k, cpus) for cpus, k in out.items()]

    def __call__(self, sig: OpSignature, threads: int, cpus: tuple[CpuId, ...]) -> float:
        if sig.key not in self._times:
            batch = self._batch_of.get(sig.key, (sig,))
            try:
                self._times.update(self._measure(batch))
            except Exception:
                if len(batch) == 1:
                    raise
                self._batch_of.update((s.key, (s,)) for s in batch)
                self._times.update(self._measure((sig,)))
        times = self._times[sig.key]
        if cpus not in times:
            raise ValueError(f"placement {threads} thread(s) on CPUs {list(cpus)} is not in the "
                             f"measured grid")
        return times[cpus]

    def _measure(self, batch: tuple[OpSignature, ...]
                 ) -> dict[str, dict[tuple[CpuId, ...], float]]:
        """Every placement's median seconds of each signature of the batch, by key."""
        placements = self.grid()
        # Per signature: its in-graph casts (CAST_IN_GRAPH), then an unmeasured copy that
        # brings its operands into the cache, both on the one-thread placement, then one copy
        # per placement: each reads operands as hot as when it had the executor to itself,
        # whatever the batch's other signatures evicted.
        graph = signatures_graph([(s, 1 + len(placements)) for s in batch])
        where = [p for s in batch for p in [placements[0]] * (_before(s) + 1) + placements
                 + [placements[0]] * _after(s, 1 + len(placements))]
        plan = placements_plan(graph, self.target, where)
        name = f"{batch[0].op}_{digest('|'.join(s.key for s in batch))[:12]}"
        feeds = _feeds(graph)
        ex = warmed_executor(plan, self.dir / module_name(name), None, feeds)
        seconds = {row["name"]: row["seconds"]
                   for row in median_stats(ex, feeds, self.steps)["ops"]}
        return {s.key: {cpus: seconds[f"s{k}_copy{j}"]
                        for j, (_, cpus) in enumerate(placements, start=1)}
                for k, s in enumerate(batch)}


def _held_bytes(sig: OpSignature, copies: int) -> int | None:
    """The bytes the signature's runs hold in a batch's executor: its operands (and their
    float32 feeds where cast in the graph) and `copies` outputs; None for a signature whose
    outputs cannot be inferred (left out of the batches: measured alone, it fails alone)."""
    try:
        runs = signature_bytes(sig, copies)
    except OpError:
        return None
    return runs + sum(4 * math.prod(s) for s, d in zip(sig.shapes, sig.dtypes, strict=True)
                      if d in CAST_IN_GRAPH)


def warmed_executor(plan: Plan, folder: str | Path, state: dict | None,
                    feeds: dict[str, np.ndarray]):
    """`plan`'s executor, built under `folder` and loaded, with `state` as its parameters (None:
    a graph without any), after one warm-up step: first-touch pages, caches, thread pools. It
    runs the plan's main schedule (`set_variant(None)` hands the choice back to the adaptive
    rule): what it measures folds under the main schedule's thread counts."""
    ex = load(build(render(plan, folder)).dir).Executor()
    ex.set_variant("main")
    if state is not None:
        ex.load_params(state)
    ex.step(feeds)
    return ex


def _feeds(graph: Graph) -> dict[str, np.ndarray]:
    from planner.graph.interpret import random_feeds

    return random_feeds(graph, seed=0)


def median_stats(executor, feeds: dict[str, np.ndarray], steps: int,
                 statistic: Statistic = statistics.median) -> dict:
    """`steps` steps of a warm executor; its stats() with each op's median seconds over the
    steps (or another `statistic` of them: `min`, as measure_signatures takes). Why the
    median: a step a neighbour's burst of work slows (a shared machine, a page the kernel
    reclaims) would otherwise move every op of that step in the cost table, and the plans
    made from it by as much."""
    return interleaved_median_stats([executor], feeds, steps, statistic)[0]


# Of an op's seconds over several steps, the one a cost table keeps.
Statistic = Callable[[Sequence[float]], float]


def interleaved_median_stats(executors: Sequence, feeds: dict[str, np.ndarray], steps: int,
                             statistic: Statistic = statistics.median) -> list[dict]:
    """`median_stats` of several warm executors of one graph, their steps taken in turns: a
    neighbour's burst of work falls on all of them alike, not on one (what their ratios,
    a contention fit's, would read as their difference)."""
    runs: list[list[dict]] = [[] for _ in executors]
    for _ in range(max(1, steps)):
        for executor, per_step in zip(executors, runs, strict=True):
            executor.reset_stats()
            executor.step(feeds)
            per_step.append(executor.stats())
    return [_over_steps(per_step, statistic) for per_step in runs]


def _over_steps(per_step: list[dict], statistic: Statistic = statistics.median) -> dict:
    """The last step's stats() with each op's `statistic` of its seconds over `per_step`.

    Example (an op slowed in one step of three):
        >>> steps = [{"ops": [{"name": "a", "seconds": s}]} for s in (2e-6, 9e-6, 3e-6)]
        >>> [_over_steps(steps)["ops"][0]["seconds"], _over_steps(steps, min)["ops"][0]["seconds"]]
        [3e-06, 2e-06]
    """
    seconds: dict[str, list[float]] = {}
    for stats in per_step:
        for row in stats["ops"]:
            seconds.setdefault(row["name"], []).append(row["seconds"])
    out = dict(per_step[-1])
    out["ops"] = [dict(row, calls=len(per_step), seconds=statistic(seconds[row["name"]]))
                  for row in per_step[-1]["ops"]]
    return out


def in_step_counts(target: Target, options: ProfileOptions) -> list[int]:
    """The thread counts `profile_in_step` measures: the hill climb's grid (1, 1 + interval,
    ..., the last core), every point of it, since a whole step measures every op at once."""
    cores = min(options.max_threads or target.cores, target.cores)
    return sorted({*range(1, cores + 1, options.interval), cores})


def profile_in_step(graph: Graph, target: Target, work_dir: str | Path,
                    options: ProfileOptions | None = None, steps: int = 5,
                    table: CostTable | None = None, progress: TextIO | None = None,
                    date: str | None = None, layouts: bool = True,
                    feeds: Mapping[str, np.ndarray] | None = None,
                    corun: bool = True, statistic: Statistic = statistics.median) -> CostTable:
    """Every op's seconds inside the step, at each thread count of the grid: per count k, the
    uniform plan (each op on k compact CPUs, one op at a time) is built and run `steps` steps
    after a warm-up, and its stats() (each op's median over the steps: `median_stats`) fold
    into `table` (planner.costs.feedback), replacing the samples of the same signature,
    thread count and placement.

    Why: an op measured alone (KernelTimer) reads inputs that stay in its cores' caches from
    one run to the next; inside the step it reads what the previous op just wrote, on the
    previous op's cores, and a team of several threads first pulls those lines across. On small
    ops that is most of the time: the 2-core development machine ran LSTM's ops on two threads
    1.8x slower in the step than alone. The step's own measurement prices what the plans run.

    With two cores or more (and `corun`), the uniform plan of one-thread lanes on every core
    (ops co-running wherever the graph lets them) is run too: how much slower each op ran
    there than alone gives the table's `contention` and `corun_slowdown` (planner.schedule.
    contention.fit_contention), which the simulator then charges co-running ops for the memory
    bandwidth and the rest of the machine they share (`step_contention`).

    layouts=False measures the graph's convolutions on their own layouts only (a graph of
    signatures that lists the alternative layouts itself: `measure_signatures`). `feeds`: the
    step's inputs where random ones would not do (a trainer's example batch: bags' offsets,
    edge lists), the rest drawn by random_feeds. `statistic`: of each op's seconds over the
    steps, the one kept (`median_stats`).
    """
    from planner.costs.feedback import fold_stats
    from planner.graph.interpret import init_params, random_feeds

    options = options or ProfileOptions()
    table = table or CostTable(target=target.name)
    state, feeds = init_params(graph, seed=0), {**random_feeds(graph, seed=1), **(feeds or {})}
    # The convolutions on their alternative layouts too, so that planning can choose
    # (planner/costs/conv_layouts.py; in a step that keeps images blocked, those few that have
    # one there).
    other = alternatives(graph, bool(channel_block(target))) if layouts else graph
    graphs = {"": graph, "_alternative": other} if other is not graph else {"": graph}
    for kind, g in graphs.items():
        for k in in_step_counts(target, options):
            p, stats = _uniform_stats(g, target, table, (k, 1), Path(work_dir), state, feeds,
                                      steps, progress, kind, statistic)
            table = fold_stats(table, p, stats, date=date)
    figures = step_contention(graph, target, table, progress, steps, feeds) if corun else None
    if figures is not None:
        table = table.model_copy(update=figures)
    return table


def step_contention(graph: Graph, target: Target, table: CostTable,
                    progress: TextIO | None = None, steps: int = 40,
                    feeds: Mapping[str, np.ndarray] | None = None
                    ) -> dict[str, float] | None:
    """This host's co-running figures (records.HOST_FIGURES by name: contention,
    corun_slowdown, handoff_seconds, team_scale) fitted from `graph`'s own step: its uniform
    plan of one one-thread lane against its uniform plan of one-thread lanes on every core
    (planner.schedule.contention_fit) and against its uniform plan of one lane of every core
    (planner.costs.team_scale),
    priced by `table`, each run in a process of its own (codegen.isolated: in one process
    their libgomps spoil each other), their `steps` steps taken in turns; None on a target of
    one core. What planner.costs.host_costs keeps beside the signatures'
    times: a graph of signatures co-runs ops that share no data, and fitted from it the
    slowdown of co-running came out 0.2-0.5 where a step's own lanes, handing their outputs
    across cores, gave 1.4-2.2 (bench/results/2026-11-25-default-vs-in-step.md). `feeds` as
    profile_in_step's."""
    import shutil
    import tempfile

    from codegen.isolated import steps_in_turns
    from planner.graph.interpret import init_params, random_feeds

    if target.cores < 2 or target.cpu is None:
        return None
    state, feeds = init_params(graph, seed=0), {**random_feeds(graph, seed=1), **(feeds or {})}
    work = Path(tempfile.mkdtemp(prefix="planner-corun-"))
    try:
        plans = [_uniform_plan(graph, target, table, lanes, progress)
                 for lanes in ((1, 1), (1, target.cores), (target.cores, 1))]
        packages = [build(render(p, work / f"lanes{k}")).dir for k, p in enumerate(plans)]
        runs = steps_in_turns(packages, state, feeds, steps)
        seconds = [_seconds(_over_steps([s for _, s in run])) for run in runs]
        priced = _without_layouts(table)
        lone, corun, wide = plans
        placed = [Placed(o.name, tuple(o.cpus), o.start, o.end) for o in corun.ops]
        return {**fit_corun_figures(target, corun.graph, placed, lone.summary.step_seconds,
                                    priced, seconds[:2],
                                    [statistics.median(t for t, _ in run) for run in runs[:2]],
                                    handoff_latency(corun, [s for _, s in runs[1]])),
                "team_scale": team_scale(target, priced, ran(lone, seconds[0]),
                                         ran(wide, seconds[2]))}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ran(plan: Plan, seconds: Mapping[str, float]) -> list[Ran]:
    """`plan`'s ops as its measured step ran them (`seconds` by op; 0: not measured)."""
    sigs = graph_signatures(plan.graph)
    return [Ran(sigs[o.name], o.threads, o.affinity, seconds.get(o.name, 0.0))
            for o in plan.ops]


def _uniform_stats(graph: Graph, target: Target, costs: CostTable, lanes: tuple[int, int],
                   work_dir: Path, state: dict, feeds: dict, steps: int,
                   progress: TextIO | None, kind: str = "",
                   statistic: Statistic = statistics.median) -> tuple[Plan, dict]:
    """The uniform plan of `graph` with `lanes` (threads per op, lanes), priced by `costs`,
    built under `work_dir` and run: the plan and its `median_stats`."""
    p, ex = _uniform_executor(graph, target, costs, lanes, work_dir, state, feeds, progress,
                              kind)
    return p, median_stats(ex, feeds, steps, statistic)


def _uniform_executor(graph: Graph, target: Target, costs: CostTable, lanes: tuple[int, int],
                      work_dir: Path, state: dict, feeds: dict, progress: TextIO | None,
                      kind: str = "") -> tuple[Plan, object]:
    """The uniform plan of `graph` with `lanes` (threads per op, lanes), priced by `costs`,
    and its executor built under `work_dir`, warm."""
    p = _uniform_plan(graph, target, costs, lanes, progress, kind)
    intra, inter = lanes
    return p, warmed_executor(p, work_dir / f"uniform_{intra}x{inter}{kind}", state, feeds)


def _uniform_plan(graph: Graph, target: Target, costs: CostTable, lanes: tuple[int, int],
                  progress: TextIO | None, kind: str = "") -> Plan:
    """The uniform plan of `graph` with `lanes` (threads per op, lanes), priced by `costs`
    (less its measurements on chosen layouts: the plan measures the layouts it is given, not
    those the table would choose for it)."""
    from planner.pipeline import PlanOptions, plan
    from planner.schedule import ScheduleOptions

    intra, inter = lanes
    if progress is not None:
        what = " (convolutions on their alternative layouts)" if kind else ""
        print(f"in-step profile: {len(graph.nodes)} ops{what}, {inter} lane(s) of {intra} "
              "thread(s): building and running", file=progress, flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingCostWarning)
        return plan(graph, target, _without_layouts(costs), PlanOptions(
            schedule=ScheduleOptions(strategy="uniform", intra=intra, inter=inter)))


def _seconds(stats: dict) -> dict[str, float]:
    return {o["name"]: o["seconds"] for o in stats["ops"]}


def measure_signatures(signatures: Sequence[OpSignature], target: Target,
                       progress: TextIO | None = None, steps: int = 5) -> CostTable:
    """The signatures measured on this host as `profile_in_step` measures a step's ops, in
    batches: each batch's signatures one copy each in one graph (signatures_graph), its
    uniform plan per thread count built and run, so a batch costs a few builds whatever its
    size. What planner.costs.host_costs measures for the signatures it does not keep yet; one
    progress line per batch. Each op's fastest step is kept, not its median: the store keeps
    the best of repeated measurements (noise only slows a kernel), and beside neighbours a
    median of five steps still held a two-thread GEMM's 20.8 ms against 1.46 ms the next time
    (a team waiting for a descheduled thread; bench/results/2026-11-26-measured-costs-load.md).
    A batch that fails is measured one signature at a time, and a signature that fails alone
    is left out with a warning (the model prices it): one kernel
    that cannot be measured never stops a plan."""
    import shutil
    import tempfile

    unique = unique_signatures(signatures)
    held = {s.key: _held_bytes(s, 1) for s in unique}
    runnable = [s for s in unique if held[s.key] is not None]
    groups = [tuple(g[k:k + BATCH_SIGNATURES])
              for g in batches(runnable, BATCH_BYTES, lambda s: held[s.key])
              for k in range(0, len(g), BATCH_SIGNATURES)]
    # Outputs not inferred: alone, where it fails by itself (and says why).
    groups += [(s,) for s in unique if held[s.key] is None]
    table = CostTable(target=target.name)
    work = Path(tempfile.mkdtemp(prefix="planner-costs-"))
    try:
        done = 0
        for b, group in enumerate(groups, start=1):
            if progress is not None:
                print(f"measuring costs on this host: signatures {done + 1}-{done + len(group)} "
                      f"of {len(unique)} (batch {b} of {len(groups)}; kept for later plans)",
                      file=progress, flush=True)
            table = _measured_batch(group, target, work / f"batch{b}", steps, table)
            done += len(group)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return table


def host_measured(graph: Graph, target: Target, progress: TextIO | None = None,
                  feeds: Mapping[str, np.ndarray] | None = None, options: Any = None,
                  evaluation: bool = True) -> CostTable:
    """The table a plan of `graph` on this host is priced by when nobody names one (`--costs
    measured`, planner.torch's default): the kept measurements of the signatures of the
    graphs `plan(graph, target, ..., options, evaluation=)` prices (planner.pipeline.
    priced_graphs: a data-parallel plan's rewritten step, with its sharded updates), those
    the host's store lacks measured first (planner.costs.host_costs.host_table, with
    measure_signatures), and the host's contention figures, fitted from this step's
    co-running lanes if none were yet (step_contention; `feeds` as profile_in_step's). The
    CLI's `--costs measured` prices the same graphs (planner/cli/plan.py, priced_table)."""
    from planner.costs.host_costs import host_table
    from planner.pipeline import priced_graphs

    def corun(step: Graph, target: Target, table: CostTable, progress: TextIO | None):
        return step_contention(step, target, table, progress, feeds=feeds)

    return host_table(priced_graphs(graph, target, options, evaluation), target,
                      measure_signatures, progress=progress, corun=corun,
                      kernels=runtime_key()).table


def _measured_batch(group: tuple[OpSignature, ...], target: Target, folder: Path, steps: int,
                    table: CostTable) -> CostTable:
    """`table` with the group's signatures measured together, else one at a time, leaving
    out (with a warning) those that fail alone."""
    try:
        measured = profile_in_step(signatures_graph([(s, 1) for s in group], written=True),
                                   target, folder, steps=steps, table=table, layouts=False,
                                   corun=False, statistic=min)
        # The group's signatures only: not the in-graph writes and casts of their operands.
        keys = {s.key for s in group} | set(table.index)
        # Each as asked: a signature with blocked operands that the harness's step ran on
        # other layouts has no time under its key (a plain one's operands cross no blocked
        # kernel: fed, or written by a Neg from a feed).
        lost = [s.key for s in group if s.layouts and s.key not in measured.index]
        if lost:
            raise ValueError(f"the profile's step ran {lost[0]} on other operand layouts")
        return measured.model_copy(update={"entries": tuple(e for e in measured.entries
                                                            if e.key in keys)})
    except Exception as e:  # noqa: BLE001 - any kernel's failure is that kernel's alone
        if len(group) == 1:
            fallback = ("its plain kernel's time where one is kept, else the analytical "
                        "model" if group[0].layouts else "the analytical model")
            warnings.warn(f"{group[0].key}: not measured ({type(e).__name__}: {e}); priced "
                          f"by {fallback}", MissingCostWarning, stacklevel=3)
            return table
    for k, s in enumerate(group):
        table = _measured_batch((s,), target, folder / f"alone{k}", steps, table)
    return table


def _without_layouts(table: CostTable) -> CostTable:
    """`table` less the entries of convolutions on a chosen layout."""
    return table.model_copy(update={"entries": tuple(e for e in table.entries
                                                     if "layout" not in e.signature.attrs)})


def handoff_latency(plan: Plan, per_step: Sequence[dict]) -> float:
    """The median of the cross-lane waits (`waits_between_ops`) of `plan`'s measured steps
    (stats() per step), rounded to the nanosecond; 0 where none handed over.

    >>> from planner.target.presets import preset
    >>> graph = copies_graph(OpSignature(op="Relu", shapes=((4,),), dtypes=("float32",)), 2)
    >>> p = placements_plan(graph, preset("xeon-8180"), [(1, (0,)), (1, (1,))])
    >>> steps = [{"ops": [{"name": "copy0", "start": 0.0, "end": 1e-5},
    ...                   {"name": "copy1", "start": 1e-5 + w, "end": 5e-5}]}
    ...          for w in (2e-5, 3e-5, 9e-5)]
    >>> handoff_latency(p, steps)
    3e-05
    """
    waits = [w for stats in per_step for w in waits_between_ops(plan, stats)[1]]
    return round(max(0.0, statistics.median(waits)), 9) if waits else 0.0


def waits_between_ops(plan: Plan, stats: dict) -> tuple[list[float], list[float]]:
    """From a step's measured timeline (stats() start and end per op): how long each op
    started after it could, split by what let it go last — the previous op of its own lane,
    or an op of another lane (a hand-off: that lane's thread has to be woken). The plan's
    simulator starts an op the moment it can; these are what it leaves out.

    Returns (same-lane waits, cross-lane waits) in seconds, one per op that waits on anything;
    of a parallel-loop group's members, the first (the others queue for the loop's threads).

    Example (a chain of three ops: copy0 on CPU 0, copy1 and copy2 on CPU 1; copy1 is handed
    over from lane 0, copy2 follows copy1 on lane 1):
        >>> from planner.target.presets import preset
        >>> graph = copies_graph(OpSignature(op="Relu", shapes=((4,),), dtypes=("float32",)), 3)
        >>> p = placements_plan(graph, preset("xeon-8180"), [(1, (0,)), (1, (1,)), (1, (1,))])
        >>> stats = {"ops": [{"name": "copy0", "start": 0.0, "end": 1.0},
        ...                  {"name": "copy1", "start": 1.5, "end": 2.0},
        ...                  {"name": "copy2", "start": 2.25, "end": 3.0}]}
        >>> waits_between_ops(p, stats)
        ([0.25], [0.5])
    """
    order = sorted(plan.ops, key=lambda o: o.order)
    lane = {o.name: o.lane for o in order}
    span = {o["name"]: (o["start"], o["end"]) for o in stats["ops"]}
    before: dict[str, list[str]] = {o.name: [] for o in order}
    for e in plan.happens_before:
        before[e.after].append(e.before)
    group = {o.name: o.group for o in order}
    same, cross, last = [], [], {}
    for o in order:
        free = [(span[b][1], lane[b] != lane[o.name]) for b in before[o.name]]
        previous, last[lane[o.name]] = last.get(lane[o.name]), o.name
        if o.group and group.get(previous) == o.group:
            continue
        if previous is not None:
            free.append((span[previous][1], False))
        if free:
            at, handed = max(free)
            (cross if handed else same).append(span[o.name][0] - at)
    return same, cross
