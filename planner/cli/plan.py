"""The `plan`, `show`, `diff` and `verify` commands (registered by `add_plan_commands`).

    planner plan GRAPH --target T [--costs C] [--strategy S] [graph flags: --train OPT
                 --lr LR --precision P --loss KIND[:OUT] --keep NAMES --train-dropout]
                 [--intra N --inter M]
                 [--grid] [--min-team-us US] -o plan.json
    planner show PLAN [--json] [--timeline out.png] [--trace out.json]
                 [--kernels [--costs TABLE | --probe] [--stats STATS]]
    planner diff A B [--json]          exit 1 when the plans differ, 0 with "no differences"
    planner verify PLAN [--graph GRAPH] exit 1 when a rule is broken, naming the op
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from planner.errors import UserError


def add_plan_commands(sub: Any, measurers: Callable[[], Any] | None = None) -> None:
    _add_plan(sub, measurers)
    _add_show(sub, measurers)
    d = sub.add_parser("diff", help="compare two plans; exit 1 when they differ")
    d.add_argument("a", metavar="A")
    d.add_argument("b", metavar="B")
    d.add_argument("--json", action="store_true")
    d.set_defaults(run=run_diff)

    v = sub.add_parser("verify", help="re-check a plan independently of the planner")
    v.add_argument("plan", metavar="PLAN")
    v.add_argument("--graph", metavar="GRAPH", help="also check the ops against this graph")
    v.add_argument("--json", action="store_true")
    v.set_defaults(run=run_verify)


def _add_plan(sub: Any, measurers: Callable[[], Any] | None) -> None:
    """`planner plan`: the graph, its target and costs, the scheduling and decision flags."""
    from planner.cli.data_parallel import add_data_parallel_flags
    from planner.cli.decisions import add_decision_flags
    from planner.cli.flags import field_flag
    from planner.cli.graph_flags import add_graph_flags
    from planner.schedule import ScheduleOptions

    p = sub.add_parser("plan", help="schedule a graph on a target and write the plan")
    p.add_argument("graph", metavar="GRAPH")
    p.add_argument("--target", required=True,
                   help="preset name, 'host' (this machine's CPUs), 'gpu' (its first NVIDIA GPU) "
                        "or target JSON file")
    p.add_argument("--costs", metavar="C",
                   help="what prices the plan: 'measured' (times measured on this machine, "
                        "kept per host in the cache: only kernels not measured yet are run), "
                        "'analytical' (the model) or a cost table JSON; default: measured for "
                        "--target host, the model for other targets ($PLANNER_COSTS overrides "
                        "the default)")
    p.add_argument("--strategy", choices=["uniform", "paper", "optimized"], default="optimized")
    add_graph_flags(p)
    field_flag(p, "--intra", ScheduleOptions, "intra", type=int,
               help="uniform: threads per op")
    field_flag(p, "--inter", ScheduleOptions, "inter", type=int, help="uniform: ops at a time")
    p.add_argument("--grid", action="store_true", help="uniform: best of an intra x inter grid")
    field_flag(p, "--min-team-us", ScheduleOptions, "min_team_seconds", type=float,
               default=0.0, metavar="US",
                   help="uniform: ops predicted under US microseconds on one thread, or no "
                        "faster on their lane's cores, run on one (default 0: every op on its "
                        "lane's cores)")
    p.add_argument("--memory-budget", metavar="BYTES",
                   help="device memory budget, e.g. 11GiB: recompute, offload and convolution "
                        "workspaces are chosen to fit it (default: no budget)")
    add_decision_flags(p)
    add_data_parallel_flags(p, "N processes each train on a shard of the batch; the plan "
                               "averages the gradients over them (planner.schedule.parallel)")
    _add_plan_outputs(p)
    p.set_defaults(run=run_plan, measurers=measurers)


def _add_plan_outputs(p: Any) -> None:
    """`planner plan`'s flags of what it writes: the schedules it leaves out, the batch sizes
    it plans apart, the output file."""
    p.add_argument("--no-variants", action="store_true",
                   help="leave out the schedules for fewer free cores (docs/executor.md: what "
                        "the executor runs when other processes hold some of the cores)")
    p.add_argument("--no-evaluation", action="store_true",
                   help="a training plan without its evaluation schedule (evaluate() is then "
                        "refused; docs/training.md)")
    p.add_argument("--batch-sizes", metavar="B,B,...",
                   help="one plan per batch size of a zoo GRAPH (the training batch and the "
                        "smaller last one, an evaluation batch), each written beside FILE with "
                        ".batchB before its suffix (m.plan.json: m.plan.batch4.json); "
                        "`planner diff` of two says what the shape changes. "
                        "In Python, trainer(..., shapes=[...]) plans them, and a trainer "
                        "plans any batch it is fed on first use")
    p.add_argument("--batch-range", metavar="MIN:MAX",
                   help="one plan for every batch from MIN to MAX of a zoo GRAPH: made and "
                        "built for MAX, the range written in the plan (shape_range), and any "
                        "smaller batch of the same graph run on its build with nothing planned "
                        "or built (planner/pipeline/ranges.py; docs/plans.md)")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing different FILE")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _add_show(sub: Any, measurers: Callable[[], Any] | None) -> None:
    s = sub.add_parser("show", help="summarize a plan; optionally draw its timeline as SVG")
    s.add_argument("plan", metavar="PLAN")
    s.add_argument("--json", action="store_true")
    s.add_argument("--timeline", metavar="FILE",
                   help="draw the step as a Gantt chart of CPUs or streams over time (.svg or "
                        ".png; needs matplotlib: pip install 'planner[plot]')")
    s.add_argument("--trace", metavar="JSON",
                   help="write the predicted step as Chrome trace JSON (open it in Perfetto "
                        "beside an executor's measured trace: docs/plans.md)")
    s.add_argument("--memory", metavar="FILE",
                   help="draw memory over the step's ops: naive, liveness, + offload, "
                        "+ recompute (seed 001's Fig. 10; .svg or .png by the suffix; needs "
                        "matplotlib)")
    s.add_argument("--target", metavar="TARGET",
                   help="the machine the plan was made for, to set its step against the "
                        "machine's peaks (default: the preset or 'host' the plan names, when "
                        "it is still the one planned for)")
    s.add_argument("--kernels", action="store_true",
                   help="each op's share of its threads' peak in the step beside its kernel's "
                        "share alone: the plan's gap to the machine apart from the kernels' "
                        "(planner/report/kernel_share.py)")
    s.add_argument("--costs", metavar="TABLE",
                   help="with --kernels: the kernels' times alone (default: the table the "
                        "plan was priced by, kept on this host)")
    s.add_argument("--probe", action="store_true",
                   help="with --kernels: measure each op's kernel alone now, on this host (a "
                        "plan for 'host'), as benchdnn times a primitive")
    s.add_argument("--stats", metavar="JSON",
                   help="with --kernels: an executor's stats() after steps of this plan (the "
                        "ops' measured times in the step; default: the predicted ones)")
    s.add_argument("--force", action="store_true")
    s.set_defaults(run=run_show, measurers=measurers)


def _costs(args: argparse.Namespace, graph: Any, target: Any, options: Any) -> Any:
    """The cost table `--costs` names (module planner.costs.host_costs for 'measured'), or
    None for the analytical model."""
    return priced_table(args.costs, graph, target, options, args.measurers,
                        evaluation=not args.no_evaluation)


def priced_table(costs: str | None, graph: Any, target: Any, options: Any,
                 measurers: Callable[[], Any] | None, evaluation: bool = True) -> Any:
    """What prices a plan of `graph` by the flag `--costs` (`costs`; None: the default, measured
    on the host): a cost table, or None for the analytical model. `plan` and `fit` both price
    through it, so their plans of one graph are priced alike."""
    from planner.costs import load_table
    from planner.costs.host_costs import COST_SOURCES, default_costs, host_table

    costs = costs or default_costs(target)
    if costs not in COST_SOURCES:
        return load_table(costs)
    if costs == "analytical":
        return None
    made = measurers() if measurers is not None else None
    if made is None or made.signatures is None:
        raise UserError("--costs measured: this planner has no executors to measure with "
                        "(codegen is not installed)")
    from planner.pipeline import priced_graphs

    priced = host_table(priced_graphs(graph, target, options, evaluation), target,
                        made.signatures, progress=sys.stderr, corun=made.step_corun,
                        kernels=made.kernels() if made.kernels is not None else "")
    if priced.measured:
        print(f"measured {len(priced.measured)} signature(s) on this host, "
              f"{len(priced.kept)} kept from earlier plans", file=sys.stderr)
    return priced.table


def run_plan(args: argparse.Namespace) -> int:
    from planner.collection import collector_off

    with collector_off():  # the whole command: graph, plan and its JSON
        if args.batch_sizes is not None and args.batch_range is not None:
            raise UserError("--batch-sizes and --batch-range: give one (a plan per batch size, "
                            "or one plan for a range of them)")
        if args.batch_sizes is not None:
            return _run_batches(args)
        if args.batch_range is not None:
            smallest, largest = batch_range(args.batch_range)
            return _run_plan(argparse.Namespace(**{**vars(args), "graph": _at_batch(
                args.graph, largest, "--batch-range")}), (smallest, largest))
        return _run_plan(args)


def batch_range(text: str) -> tuple[int, int]:
    """`--batch-range 8:32`: the smallest and largest batch, 1 <= MIN <= MAX.

    >>> batch_range("8:32")
    (8, 32)
    """
    try:
        smallest, largest = (int(v) for v in text.split(":"))
    except ValueError:
        raise UserError(f"--batch-range {text!r}: give MIN:MAX, e.g. --batch-range 8:32") \
            from None
    if not 1 <= smallest <= largest:
        raise UserError(f"--batch-range {text!r}: give 1 <= MIN <= MAX")
    return smallest, largest


def batch_sizes(text: str) -> list[int]:
    """`--batch-sizes 32,4`: the sizes, each >= 1, in the order given, once each.

    >>> batch_sizes("32, 4,32")
    [32, 4]
    """
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        raise UserError(f"--batch-sizes {text!r}: give batch sizes as integers, e.g. "
                        f"--batch-sizes 32,4") from None
    if not sizes or min(sizes) < 1:
        raise UserError(f"--batch-sizes {text!r}: each batch size is 1 or more")
    return list(dict.fromkeys(sizes))


def batch_output(path: str, batch: int) -> str:
    """Where the plan of batch `batch` goes: FILE's name with `.batchB` before its suffix.

    >>> batch_output("out/mlp.plan.json", 4), batch_output("mlp", 32)
    ('out/mlp.plan.batch4.json', 'mlp.batch32')
    """
    from pathlib import PurePath

    p = PurePath(path)
    return str(p.with_name(f"{p.stem}.batch{batch}{p.suffix}"))


def _run_batches(args: argparse.Namespace) -> int:
    """`plan --batch-sizes`: a zoo GRAPH planned at each batch size (its `batch` parameter)."""
    for b in batch_sizes(args.batch_sizes):
        each = argparse.Namespace(**{**vars(args), "graph": _at_batch(args.graph, b,
                                                                        "--batch-sizes"),
                                     "output": batch_output(args.output, b)})
        _run_plan(each)
    return 0


def _at_batch(spec: str, batch: int, flag: str) -> str:
    """The zoo spec `spec` with its `batch` parameter set; UserError for a graph file."""
    from planner.zoo import PREFIX, ZooError, parse_spec

    if not spec.startswith(PREFIX):
        raise UserError(f"{flag} plans a zoo spec at a batch size; {spec!r} has its shapes "
                        f"fixed by its file: export it at the batch size, or train it from "
                        f"PyTorch with planner.torch.trainer, which plans ranges of the "
                        f"batches it is fed")
    try:
        name, params = parse_spec(spec)
    except ZooError as e:
        raise UserError(str(e)) from None
    query = "&".join(f"{k}={_spec_value(v)}" for k, v in {**params, "batch": batch}.items())
    return f"{PREFIX}{name}?{query}"


def _spec_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def _run_plan(args: argparse.Namespace, shape_range: tuple[int, int] | None = None) -> int:
    from planner.cli.settings import from_flags, graph_options, plan_options
    from planner.frontend.prepare import prepare
    from planner.io.write import write_text
    from planner.pipeline import plan
    from planner.target.presets import load_target

    settings = from_flags(args)  # the record trainer() fills from its keywords too
    graph = prepare(args.graph, graph_options(settings))
    target = load_target(settings.target)
    options = plan_options(settings)
    table = _costs(args, graph, target, options)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = plan(graph, target, table, options, evaluation=not args.no_evaluation)
    if shape_range is not None:  # made for the largest: the record says which it serves
        from planner.plan import Plan, ShapeRange
        from planner.verify import verify_plan

        # A new record, not model_copy: the copy would keep the cached JSON of the old one.
        out = Plan(**{f: getattr(out, f) for f in Plan.model_fields}
                   | {"shape_range": ShapeRange(smallest=shape_range[0],
                                                largest=shape_range[1])})
        problems = verify_plan(out)
        if problems:
            raise UserError(f"--batch-range: {problems[0]}")
    text = out.to_json()
    write_text(args.output, text, force=args.force)
    if args.json:
        print(json.dumps(out.summary.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        print(format_summary(out.json_data))  # the file's data: no second model dump
        print(f"wrote {args.output}")
    return 0


def _read_json(path: str) -> dict[str, Any]:
    from planner.io.read import read_json
    from planner.plan import plan_data_problem

    data = read_json(path, "plan")
    problem = plan_data_problem(data)
    if problem:
        raise UserError(f"{path}: {problem}")
    return data


def technique_curves_of(plan) -> dict | None:
    """Fig. 10's counterfactual curves for `show --memory`: liveness, + offload, + recompute
    on the plan's order, replayed by memory planning on the plan's target, for a GPU plan
    whose target is a preset (a plan names its target, not its whole description); else
    None (the chart shows the plan's own curve and naive)."""
    from planner.costs import CostModel
    from planner.pipeline import BACKENDS
    from planner.report.memory import graph_order
    from planner.target.presets import PRESETS, preset

    curves = BACKENDS[plan.backend].technique_curves
    if curves is None or plan.target.name not in PRESETS:
        return None
    return curves(plan.graph, graph_order(plan), CostModel(preset(plan.target.name)))


def run_show(args: argparse.Namespace) -> int:
    from planner.io.write import write_text
    from planner.plan import load_plan
    from planner.report.diff import decisions_line
    from planner.report.memory import format_memory, memory_curves, memory_report
    from planner.report.plots import memory_plot, plot_format, timeline_plot
    from planner.report.sharding import format_sharding, sharding_report
    from planner.report.trace import plan_trace

    fmt = plot_format(args.timeline) if args.timeline else ""
    if args.memory:
        plot_format(args.memory)  # a suffix it cannot write is refused before any work
    plan = load_plan(args.plan)
    data = plan.model_dump(mode="json", by_alias=True)
    if args.timeline:
        write_text(args.timeline, timeline_plot(data, fmt), force=args.force)
    if args.trace:
        write_text(args.trace, json.dumps(plan_trace(data), sort_keys=True) + "\n",
                   force=args.force)
    if args.memory:
        write_text(args.memory, memory_plot(plan, memory_curves(plan, technique_curves_of(plan)),
                                            plot_format(args.memory)), force=args.force)
    roof, why_not = _roofline(plan, args.target)
    kernels = _kernel_shares(args, plan)
    if args.json:
        zero3 = sharding_report(data)
        print(json.dumps({"summary": data["summary"], "by_type": by_type(data),
                          "memory": memory_report(data)} | ({"zero3": zero3} if zero3 else {})
                         | ({"roofline": roof.model_dump(mode="json")} if roof else {})
                         | ({"kernels": kernels.model_dump(mode="json")} if kernels else {}),
                         indent=2, sort_keys=True))
    else:
        print(format_summary(data))
        if roof is not None:
            from planner.report.roofline import format_roofline

            print(format_roofline(roof))
        elif why_not:
            print(f"against the machine: {why_not}")
        if kernels is not None:
            from planner.report.kernel_share import format_kernel_shares

            print(format_kernel_shares(kernels))
        memory = format_memory(data)
        if memory:
            print(memory)
        sharding = format_sharding(data)
        if sharding:
            print(sharding)
        print(decisions_line(data))
        for path in (args.timeline, args.trace, args.memory):
            if path:
                print(f"wrote {path}")
    return 0


def _roofline(plan: Any, target_spec: str | None) -> tuple[Any, str]:
    """A CPU plan's roofline (planner.report.roofline) on the machine it was planned for
    (_planned_on); else None and why (empty for a GPU plan)."""
    from planner.report.roofline import roofline

    target, why_not = _planned_on(plan, target_spec)
    return (None, why_not) if target is None else (roofline(plan, target), "")


def _planned_on(plan: Any, target_spec: str | None) -> tuple[Any, str]:
    """The target `--target` names, or the preset or host the plan names when that is still
    the machine it was planned for; else None and why (empty for a GPU plan)."""
    from planner.target.backends import traits
    from planner.target.presets import PRESETS, load_target

    if not traits(plan).host_cores:  # a GPU plan's kernels have no CPU peaks
        return None, ""
    name = plan.target.name
    if target_spec is None and name not in PRESETS and name != "host":
        return None, (f"target {name!r} is neither a preset nor this host: give it with "
                      f"--target FILE")
    target = load_target(target_spec or name)
    if target_spec is None and target.digest() != plan.provenance.target_sha256:
        return None, (f"target {name!r} is not the one the plan was made for (its peaks "
                      f"were measured again since): give that one with --target FILE")
    return target, ""


def _kernel_shares(args: argparse.Namespace, plan: Any) -> Any:
    """`show --kernels`' figures (planner.report.kernel_share), or None without --kernels;
    UserError in one line where they cannot be had."""
    from planner.report.kernel_share import kernel_shares

    if not args.kernels:
        if args.costs or args.probe or args.stats:
            raise UserError("--costs, --probe and --stats go with --kernels")
        return None
    target, why_not = _planned_on(plan, args.target)
    if target is None:
        raise UserError(f"{args.plan}: --kernels: " + (why_not or "a GPU plan's kernels are "
                        "timed by the CUDA profiler, not set against a CPU's peaks"))
    return kernel_shares(plan, target, _alone_table(args, plan, target), _step_stats(args, plan))


def _alone_table(args: argparse.Namespace, plan: Any, target: Any) -> Any:
    """The kernels' times alone: --costs, measured now (--probe), or the table the plan was
    priced by (None for an analytical plan)."""
    from planner.cli.explain import kept_table
    from planner.costs import load_table
    from planner.costs.signature import graph_signatures

    if args.costs and args.probe:
        raise UserError("--costs and --probe: give one (a table, or the kernels measured now)")
    if args.costs:
        return load_table(args.costs)
    if not args.probe:
        return kept_table(args.plan, plan)
    if plan.target.name != "host" or args.measurers is None:
        raise UserError(f"{args.plan}: --probe measures kernels on this host: the plan is for "
                        f"{plan.target.name!r} (plan it with --target host)")
    signatures = list(graph_signatures(plan.graph).values())
    return args.measurers().signatures(signatures, target, progress=sys.stderr)


def _step_stats(args: argparse.Namespace, plan: Any) -> dict[str, float] | None:
    """Op name -> mean seconds of the executor's stats() that --stats names (its ops that
    ran), or None (predicted times)."""
    from planner.io.read import read_json

    if not args.stats:
        return None
    data = read_json(args.stats, "executor stats")
    rows = data.get("ops") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise UserError(f"{args.stats}: not an executor's stats(): no list 'ops'")
    names = {op.name for op in plan.ops}
    measured = {}
    for row in rows:
        if not isinstance(row, dict) or row.get("name") not in names:
            raise UserError(f"{args.stats}: stats row {str(row)[:80]!r} names no op of the "
                            f"plan (stats of another plan?)")
        calls, seconds = row.get("calls", 0), row.get("seconds", 0.0)
        if isinstance(calls, int) and calls > 0 and isinstance(seconds, (int, float)) \
                and seconds > 0:
            measured[row["name"]] = float(seconds)
    return measured


def by_type(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per op type: count, busy seconds, thread counts used."""
    acc: dict[str, dict[str, Any]] = {}
    for op in plan["ops"]:
        a = acc.setdefault(op["op"], {"count": 0, "seconds": 0.0, "threads": Counter(),
                                      "smt": 0})
        a["count"] += 1
        a["seconds"] += op["end"] - op["start"]
        a["threads"][op["threads"]] += 1
        a["smt"] += int(op["smt"])
    return {k: {**v, "threads": dict(sorted(v["threads"].items()))} for k, v in acc.items()}


def format_summary(plan: dict[str, Any]) -> str:
    s = plan["summary"]
    lines = [f"plan of {plan['graph']['name']} on {plan['target']['name']} "
             f"({plan.get('backend', 'cpu')}, {s['strategy']}): {s['ops']} ops",
             f"  step        {s['step_seconds'] * 1e3:.3f} ms",
             f"  lower bound {s['lower_bound_seconds'] * 1e3:.3f} ms (critical path "
             f"{s['critical_path_seconds'] * 1e3:.3f}, area {s['area_bound_seconds'] * 1e3:.3f}"
             f", allotment {s.get('allotment_bound_seconds', 0.0) * 1e3:.3f}"
             f", cut {s.get('cut_bound_seconds', 0.0) * 1e3:.3f})"
             f"; ratio {s['ratio']:.3f}",
             f"  utilization {s['utilization']:.1%}; mean co-running ops {s['mean_corun']:.2f}"]
    if s.get("strategy_switch"):  # the budget changed the strategy: say so, and why
        lines.insert(1, f"  strategy    {s['strategy_switch']}")
    shapes = plan.get("shape_range")
    if shapes:
        lines.append(f"  range       batches {shapes['smallest']} to {shapes['largest']} "
                     f"(planned and built for {shapes['largest']}; smaller ones run on its "
                     f"build)")
    grouped = Counter(op["group"] for op in plan["ops"] if op.get("group"))
    if grouped:
        lines.append(f"  {len(grouped)} parallel-loop group(s) of {sum(grouped.values())} ops, "
                     f"each one loop, one op per thread (docs/executor.md)")
    if s.get("measured_signatures") is not None:
        modelled = s.get("modelled_signatures") or []
        lines.append(f"  {len(s['measured_signatures'])} signature(s) priced by measured times, "
                     f"{len(modelled)} by the analytical model"
                     + (": " + "; ".join(modelled[:5]) + ("; ..." if len(modelled) > 5 else "")
                        if modelled else ""))
    elif s.get("analytical_signatures"):
        lines.append(f"  {s['analytical_signatures']} signature(s) priced by the analytical "
                     f"model")
    lines.append("ops by type (count, busy ms, thread counts):")
    types = by_type(plan)
    for op, v in sorted(types.items(), key=lambda kv: -kv[1]["seconds"]):
        threads = ",".join(f"{k}x{n}" for k, n in v["threads"].items())
        smt = f", {v['smt']} on SMT" if v["smt"] else ""
        lines.append(f"  {op:<24} {v['count']:>5} {v['seconds'] * 1e3:>10.3f}  {threads}{smt}")
    if plan.get("variants"):
        lines.append("schedules for fewer free cores (one unpinned lane; docs/executor.md):")
        lines += [f"  {v['name']:<10} step {v['step_seconds'] * 1e3:.3f} ms, up to "
                  f"{max(v['threads'])} threads per op" for v in plan["variants"]]
    return "\n".join(lines)


def run_diff(args: argparse.Namespace) -> int:
    from planner.report.diff import diff_plans
    from planner.report.diff_text import format_diff

    d = diff_plans(_read_json(args.a), _read_json(args.b))
    print(json.dumps(d, indent=2, sort_keys=True) if args.json else format_diff(d))
    return 1 if d["different"] else 0


def _embedded_graph_problems(text: str) -> tuple[list[str], list[str]] | None:
    """Node names of the plan's embedded graph, and a problem if its digest does not match."""
    from planner.graph import Graph
    from planner.plan import digest

    try:
        data = json.loads(text)
        graph = Graph.model_validate(data["graph"])
        recorded = data["provenance"]["graph_sha256"]
    except (ValueError, KeyError, TypeError):
        return None  # verify_plan_text reports what is malformed
    problems = []
    if digest(graph.to_json()) != recorded:
        problems.append("the embedded graph does not match provenance.graph_sha256")
    return [n.name for n in graph.nodes], problems


def run_verify(args: argparse.Namespace) -> int:
    from planner.io.read import read_json
    from planner.verify import verify_plan_text

    try:
        read_json(args.plan, "plan")  # what every command reads, refused alike
    except UserError as e:
        return _report(args, [str(e).removeprefix(f"{args.plan}: ")])
    with open(args.plan, encoding="utf-8") as f:
        text = f.read()
    names = None
    problems: list[str] = []
    if not args.graph:
        embedded = _embedded_graph_problems(text)
        names, problems = embedded if embedded else (None, [])
    else:
        from planner.frontend.prepare import prepare
        from planner.pipeline.choices import recorded_choices
        from planner.plan import digest
        from planner.step import step_graph

        data = json.loads(text) if text.strip().startswith("{") else {}
        graph = prepare(args.graph)
        try:  # the step graph's passes under the choices the plan records
            graph = step_graph(graph, recorded_choices(graph, data))
        except ValueError as e:
            problems.append(f"the plan's step choices: {e}")
        names = [n.name for n in graph.nodes]
        recorded = data.get("provenance", {}).get("graph_sha256")
        if recorded and recorded != digest(graph.to_json()):
            problems.append(f"plan was made for another graph (graph_sha256 {recorded[:12]} != "
                            f"{digest(graph.to_json())[:12]})")
    problems += verify_plan_text(text, names)
    return _report(args, problems)


def _report(args: argparse.Namespace, problems: list[str]) -> int:
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems}, indent=2))
    elif problems:
        for p in problems[:50]:
            print(f"{args.plan}: {p}")
        if len(problems) > 50:
            print(f"... and {len(problems) - 50} more")
    else:
        print(f"{args.plan}: ok")
    return 1 if problems else 0
