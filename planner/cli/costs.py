"""`planner profile` (measure this machine's kernels into a cost table) and `planner costs
update` (fold an executor's measured op times back into one).

    planner profile GRAPH --target host -o costs.json [graph flags] [--interval N]
                    [--repeats N] [--max-threads N] [--in-step]
    planner profile GRAPH --target gpu -o costs.json [graph flags] [--repeats N]
                    [--max-workspace BYTES]
    planner costs update COSTS --from-stats STATS.json --plan PLAN [-o OUT]

Profiling runs the generated kernels of every op signature of the graph that `planner plan`
with the same graph flags (--train, --precision, --loss, ...: planner/cli/graph_flags.py) plans,
on this machine's CPUs (codegen.profiling, which planner/cli/main.py passes in as the Measurers:
the planner's stages never import code generation), hill climbing over thread counts with
compact and spread placements (planner.costs.profile). The table is written after every
signature, so an interrupted run keeps what it measured and a second run resumes where it
stopped. `--target gpu` measures on
this machine's first GPU instead (planner.costs.gpu_profile, codegen.gpu_profiling): every
cuDNN algorithm of each convolution, each generated kernel at every threads-per-block variant,
every other op alone; refused in one line where there is no GPU. `--in-step` measures every
op inside the real step instead: one uniform plan per thread count of the grid, built and run,
its per-op times folded in (codegen.profiling.profile_in_step); a few builds however many
signatures, and the times include what running among the step's other ops costs (inputs
arriving from other cores' caches).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from typing import Any

from planner.errors import UserError


def add_cost_commands(sub: Any, measurers: Callable[[], Any]) -> None:
    """`planner profile` and `planner costs update`; `measurers()` gives the
    planner.costs.profile.Measurers that run kernels (called only when profiling)."""
    from planner.cli.flags import field_flag
    from planner.cli.graph_flags import add_graph_flags
    from planner.costs.profile import ProfileOptions

    p = sub.add_parser("profile", help="measure the op kernels of a graph on this machine",
                       description="Runs the generated executor's kernels of every op "
                                   "signature of GRAPH on this machine's CPUs and writes the "
                                   "cost table that `planner plan --costs` reads.")
    p.add_argument("graph", metavar="GRAPH", nargs="?")
    p.add_argument("--all-reduce", type=int, metavar="N",
                   help="instead of a graph's kernels: all-reduce time against message size "
                        "on a gloo group of N processes on this host, fitted to alpha-beta; "
                        "writes the link `planner plan --interconnect` reads "
                        "(planner.costs.link)")
    p.add_argument("--target", default="host",
                   help="'host' (or a target JSON of this machine) for its CPUs, 'gpu' for its "
                        "first GPU: kernels run here")
    add_graph_flags(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the cost table; an existing table of this target is resumed")
    field_flag(p, "--interval", ProfileOptions, "interval", type=int, default=None,
               help="thread-count step of the climb")
    field_flag(p, "--repeats", ProfileOptions, "repeats", type=int, default=5,
               help="measured steps per placement")
    field_flag(p, "--max-threads", ProfileOptions, "max_threads", type=int, default=None)
    p.add_argument("--in-step", action="store_true",
                   help="measure every op inside the training step (one uniform plan per "
                        "thread count) rather than each signature's kernel alone")
    p.add_argument("--max-workspace", metavar="BYTES", default="4GiB",
                   help="--target gpu: most workspace a convolution algorithm may use while "
                        "cuDNN times it (default 4GiB)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=partial(run_profile, measurers=measurers))

    c = sub.add_parser("costs", help="cost tables: fold measured times back in")
    csub = c.add_subparsers(dest="costs_command", required=True, metavar="ACTION")
    u = csub.add_parser("update", help="fold an executor's stats() into a cost table")
    u.add_argument("costs", metavar="COSTS", help="the cost table to update (created if absent)")
    u.add_argument("--from-stats", required=True, metavar="STATS",
                   help="JSON of an executor's stats() after some steps")
    u.add_argument("--plan", required=True, metavar="PLAN", help="the plan those steps ran")
    u.add_argument("-o", "--output", metavar="FILE", help="default: COSTS itself")
    u.set_defaults(run=run_update)


def run_profile(args: argparse.Namespace, measurers: Callable[[], Any]) -> int:
    """`planner profile`: its inputs, then one of the two ways of measuring (module
    docstring), the table written and reported."""
    if args.all_reduce is not None:
        return _profile_link(args)
    if args.graph is None:
        raise UserError("planner profile: give a GRAPH (or --all-reduce N)")
    from planner.target.presets import load_target

    target = load_target(args.target)  # `gpu` without a GPU: UserError, one line
    return PROFILERS[target.backend](args, measurers, target)


def _measure_cpu(args: argparse.Namespace, measurers: Callable[[], Any], target) -> int:
    target, graph, options, table = _profile_inputs(args, target)
    measure = measurers()
    if args.in_step:
        return _measure_in_step(args, measure, graph, target, options, table)
    return _measure_kernels(args, measure, graph, target, options, table)


def _profile_link(args: argparse.Namespace) -> int:
    """`planner profile --all-reduce N`: the measured link, written and reported."""
    import json

    from planner.costs.link import profile_link
    from planner.io.write import write_text

    if args.graph is not None:
        raise UserError("planner profile --all-reduce measures the process group: no GRAPH")
    if not 2 <= args.all_reduce <= 64:
        raise UserError(f"--all-reduce {args.all_reduce}: 2 to 64 processes")
    link = profile_link(args.all_reduce)
    write_text(args.output, link.model_dump_json(indent=2) + "\n")
    if args.json:
        print(json.dumps(link.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        print(f"all-reduce over {args.all_reduce} processes: alpha "
              f"{link.latency_seconds * 1e6:.1f} us, beta {link.bandwidth / 1e9:.2f} GB/s "
              f"-> {args.output}")
    return 0


def _profile_inputs(args: argparse.Namespace, target):
    """(target, graph, options, table to resume) of `planner profile` on the CPUs; UserError
    for a target that is not this machine, bad options or a table of another target."""
    from pydantic import ValidationError

    from planner.cli.flags import flag_message
    from planner.costs.profile import ProfileOptions

    if target.name != "host" and args.target != "host":
        raise UserError(f"--target {args.target}: profiling runs kernels on this machine; "
                        f"use --target host (its CPUs) or --target gpu (its GPU)")
    graph = profiled_graph(args, target)
    try:
        ProfileOptions(repeats=args.repeats)  # the flag's range; a climb measures once
        interval = args.interval if args.interval is not None else max(1, target.cores // 8)
        options = ProfileOptions(interval=interval, repeats=1, max_threads=args.max_threads)
    except ValidationError as e:
        raise UserError(flag_message(e) or f"profile options: {e}") from None
    return target, graph, options, _resumed(args.output, target)


def profiled_graph(args: argparse.Namespace, target):
    """The graph `planner plan` with the same flags plans on `target`: its kernels are the
    ones the plan prices."""
    from planner.cli.graph_flags import graph_options
    from planner.frontend.prepare import prepare
    from planner.pipeline import step_graph

    return step_graph(prepare(args.graph, graph_options(args)), target)


def _resumed(output: str, target):
    """The table at `output` to resume (an empty one if none); UserError for another
    target's."""
    from pathlib import Path

    from planner.costs.records import CostTable, load_table

    if not Path(output).exists():
        return CostTable(target=target.name)
    table = load_table(output)
    if table.target != target.name:
        raise UserError(f"{output}: a cost table of {table.target!r}, not of this machine's "
                        f"target {target.name!r}")
    return table


def _save(path: str, table) -> None:
    from planner.io.write import write_text

    write_text(path, table.to_json(), force=True)


def _measure_in_step(args: argparse.Namespace, measure, graph, target, options, table) -> int:
    """Every op inside the real step (measure.in_step), the table written once at the end."""
    with tempfile.TemporaryDirectory(prefix="planner-profile-") as work:
        table = measure.in_step(graph, target, work, options, steps=max(1, args.repeats),
                                table=table, progress=None if args.json else sys.stderr)
    _save(args.output, table)
    if args.json:
        print(json.dumps({"output": args.output, "signatures": len(table.entries),
                          "complete": True}, indent=2, sort_keys=True))
    else:
        print(f"wrote {args.output}: {len(table.entries)} signature(s) measured in the step")
    return 0


def _measure_gpu(args: argparse.Namespace, measurers: Callable[[], Any], target) -> int:
    """`planner profile --target gpu`: planner.costs.gpu_profile with codegen's GpuProfiler on
    this machine's GPU, the table written after every batch; 130 when interrupted."""
    from planner.costs.gpu_profile import profile_gpu
    from planner.costs.signature import graph_signatures
    from planner.memory.options import parse_budget

    if args.target != "gpu" and target.name != "gpu":
        raise UserError(f"--target {args.target}: profiling runs kernels on this machine's "
                        f"GPU; use --target gpu (plans for it then use --target gpu too)")
    if args.in_step or args.interval is not None or args.max_threads is not None:
        raise UserError("--in-step, --interval and --max-threads are for CPU targets; "
                        "--target gpu measures each signature's kernels alone")
    workspace = parse_budget(args.max_workspace, "--max-workspace")
    graph = profiled_graph(args, target)
    table = _resumed(args.output, target)
    gpu = measurers().gpu
    if gpu is None:
        raise UserError("this planner has no GPU profiler (codegen is not installed)")
    with tempfile.TemporaryDirectory(prefix="planner-profile-") as work:
        progress = None if args.json else sys.stderr
        measure = gpu(target, work, steps=max(1, args.repeats), max_workspace_bytes=workspace,
                      progress=progress)
        run = profile_gpu(list(graph_signatures(graph, target.gpus[0]).values()), target, measure,
                          table=table, progress=progress, checkpoint=partial(_save, args.output),
                          bytes_of=measure.bytes_of)
    _save(args.output, run.table)
    return report_profile(args, run)


def _measure_kernels(args: argparse.Namespace, measure, graph, target, options, table) -> int:
    """Each signature's kernel alone, hill climbing (planner.costs.profile), the table written
    after every signature; 130 when interrupted (a second run resumes)."""
    from planner.costs.conv_layouts import profiled_signatures
    from planner.costs.profile import profile
    from planner.target.backends import channel_block

    # The convolutions on their alternative layouts too, where planning chooses between the
    # two (planner/costs/conv_layouts.py: not in a step that keeps images blocked).
    signatures = profiled_signatures(graph, bool(channel_block(target)))
    with tempfile.TemporaryDirectory(prefix="planner-profile-") as work:
        timer = measure.kernel_timer(target, work, options, steps=max(1, args.repeats),
                                     signatures=[s for s in signatures if s not in table])
        run = profile(signatures, target, timer, options,
                      table=table, progress=None if args.json else sys.stderr,
                      checkpoint=partial(_save, args.output))
    _save(args.output, run.table)
    return report_profile(args, run)


def report_profile(args: argparse.Namespace, run) -> int:
    result = {"output": args.output, "measured": run.measured, "skipped": run.skipped,
              "complete": run.complete, "failures": [list(f) for f in run.failures]}
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        for key, why in run.failures:
            print(f"not measured: {key}: {why}", file=sys.stderr)
        print(f"wrote {args.output}: {run.measured} signature(s) measured, {run.skipped} "
              f"already there" + ("" if run.complete else " (interrupted: run again to resume)"))
    if not run.complete:
        return 130
    # A table that lacks a signature prices it analytically: a script chaining profile and
    # plan must see that, as with any partial result.
    return 1 if run.failures else 0


# How each backend's kernels are measured: the CPU's by signature (or in a running step), the
# GPU's through its own profiler (codegen.gpu_profiling).
PROFILERS: dict[str, Callable[[argparse.Namespace, Callable[[], Any], Any], int]] = {
    "cpu": _measure_cpu, "cuda": _measure_gpu}


def run_update(args: argparse.Namespace) -> int:
    from pathlib import Path

    from planner.costs.feedback import fold_stats
    from planner.costs.records import CostTable, load_table
    from planner.io.read import read_json
    from planner.io.write import write_text
    from planner.plan import load_plan

    plan = load_plan(args.plan)
    stats = read_json(args.from_stats, "stats JSON")
    table = (load_table(args.costs) if Path(args.costs).exists()
             else CostTable(target=plan.target.name))
    updated = fold_stats(table, plan, stats)
    out = args.output or args.costs
    write_text(out, updated.to_json(), force=True)
    print(f"wrote {out}: {len(updated.entries)} signature(s)")
    return 0
