"""`planner fit` (planner.fit), and the memory options `plan` and `show` read.

    planner fit GRAPH --target T --budget 11GiB [--vary batch|depth] [--global-batch G]
                [graph flags: --train OPT
                (default momentum) --lr --precision --loss --keep: planner/cli/graph_flags.py]
                [--costs C] [--multiple N] [--json]
    planner fit GRAPH --target T --pareto [-o curve.json] [--plot curve.svg] [--measure N]
                (planner.cli.curve: the step-time / budget curve)

Wiring for the other commands (planner/cli/plan.py):

    plan   --memory-budget BYTES:  MemoryOptions(budget_bytes=parse_budget(...)) into
           planner.pipeline.plan
    show   --json:   {"memory": memory_report(data), ...};  text: format_memory(data)
           --memory out.png:  memory_plot(plan, memory_curves(plan, ...), format by suffix)
"""

from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

from planner.errors import UserError


def add_memory_commands(sub: Any, measure_plans: Any = None, measurers: Any = None) -> None:
    from planner.cli.curve import add_pareto_flags
    from planner.cli.data_parallel import add_data_parallel_flags
    from planner.cli.graph_flags import add_graph_flags

    f = sub.add_parser(
        "fit", help="the largest batch (or ResNet depth) whose plan fits a memory budget",
        description="GRAPH is a zoo spec such as 'zoo:resnet?depth=50'; the parameter named "
                    "by --vary is searched, the others stay as given.")
    f.add_argument("graph", metavar="GRAPH")
    f.add_argument("--target", required=True, help="preset name or target JSON file")
    f.add_argument("--budget", help="device bytes, e.g. 11GiB or 12e9 (needed but with --pareto)")
    f.add_argument("--vary", choices=["batch", "depth"], default="batch")
    add_graph_flags(f, train="momentum")
    f.add_argument("--costs", metavar="C",
                   help="what prices the plans, as `planner plan --costs`: 'measured', "
                        "'analytical' or a cost table JSON; default: measured for --target "
                        "host, the model for other targets")
    f.add_argument("--multiple", type=int, default=1,
                   help="search batches in multiples of this (default 1)")
    add_data_parallel_flags(f, "fit one rank's batch of a plan for N processes (planner plan "
                               "--data-parallel)", layout=False)
    f.add_argument("--global-batch", type=int, metavar="G",
                   help="fit the micro-batch of a plan that accumulates G / micro-batch of "
                        "them per optimizer step (--accumulate): the largest divisor of G "
                        "that fits, so a batch beyond the budget still trains (CPU targets)")
    f.add_argument("--json", action="store_true")
    add_pareto_flags(f, measure_plans)
    f.set_defaults(run=run_fit, measurers=measurers)


def run_fit(args: argparse.Namespace) -> int:
    from planner.cli.graph_flags import graph_options
    from planner.cli.plan import priced_table
    from planner.fit import fit
    from planner.memory.options import parse_budget
    from planner.pipeline import PlanOptions
    from planner.target.presets import load_target

    if args.pareto:
        from planner.cli.curve import run_pareto

        return run_pareto(args)
    if args.budget is None:
        raise UserError("fit needs --budget (or --pareto for the step-time / budget curve)")
    if args.output or args.plot or args.measure or args.no_offload or args.decisions \
            or args.keep_tensor or args.recompute or args.offload or args.region_budget:
        raise UserError("-o, --plot, --measure, --no-offload and memory decisions go with "
                        "--pareto")
    if not args.graph.startswith("zoo:"):
        raise UserError(f"fit varies a zoo model's {args.vary}: GRAPH must be a zoo spec such "
                        f"as 'zoo:resnet?depth=50', not {args.graph!r}")
    from pydantic import ValidationError

    from planner.cli.flags import flag_message
    from planner.schedule.parallel import DataParallelOptions

    if args.multiple < 1:
        raise UserError(f"--multiple {args.multiple}: search batches in multiples of 1 or more")
    budget = parse_budget(args.budget)
    graph = graph_options(args)
    target = load_target(args.target)
    try:
        dp = DataParallelOptions(ranks=args.data_parallel, shard_optimizer=args.shard_optimizer,
                                 shard_parameters=args.shard_parameters)
    except ValidationError as e:
        raise UserError(flag_message(e) or e.errors()[0]["msg"].removeprefix("Value error, ")
                        ) from None
    def price(g: Any) -> Any:  # each trial's graph priced as `planner plan` prices it
        return priced_table(args.costs, g, target,
                            PlanOptions(data_parallel=dp), args.measurers, evaluation=False)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = fit(args.graph, target, budget, args.vary, multiple=args.multiple,
                         price=price, data_parallel=dp if dp.ranks > 1 else None,
                         graph_options=graph, global_batch=args.global_batch)
        except ValueError as e:
            raise UserError(f"--global-batch {args.global_batch}: {e}"
                            if args.global_batch is not None else str(e)) from None
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=True))
        return 0
    print(format_fit(result))
    return 0


def format_fit(result) -> str:
    from planner.memory.options import format_bytes

    lines = [f"fit {result.model} on {result.target} within {format_bytes(result.budget_bytes)}"
             f", varying {result.vary}:"]
    for t in result.trials:
        detail = (f"peak {format_bytes(t.peak_bytes)}, step {t.step_seconds * 1e3:.1f} ms"
                  if t.fits else f"needs >= {format_bytes(t.smallest_bytes)}"
                  if t.smallest_bytes else "beyond the zoo's limits or the target's memory")
        each = f" x {t.accumulate:<4}" if t.accumulate > 1 else ""
        lines.append(f"  {result.vary} {t.value:>6}{each}  {'fits' if t.fits else 'no  '}  "
                     f"{detail}")
    if result.value:
        times = (f" x accumulate {result.accumulate} = {result.value * result.accumulate} per "
                 f"optimizer step (--accumulate {result.accumulate})"
                 if result.accumulate > 1 else "")
        lines.append(f"largest {result.vary}: {result.value}{times} (peak "
                     f"{format_bytes(result.peak_bytes)}, step "
                     f"{result.step_seconds * 1e3:.1f} ms)")
    else:
        lines.append(f"no {result.vary} fits")
    return "\n".join(lines)
