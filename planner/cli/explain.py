"""`planner explain PLAN [NAME] [--target T] [--costs C] [--json]` (planner.pipeline.explain)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from planner.errors import UserError


def add_explain_command(sub: Any) -> None:
    e = sub.add_parser(
        "explain", help="why a plan decided what it did: an op's threads, a tensor's "
                        "placement, a conv's algorithm",
        description="Plans the plan's embedded graph again with the options it recorded and "
                    "refuses when that does not give the plan; NAME is an op or a tensor "
                    "(default: every recompute and offload decision).")
    e.add_argument("plan", metavar="PLAN")
    e.add_argument("name", metavar="NAME", nargs="?", help="an op or tensor of the plan")
    e.add_argument("--target", help="preset name or target JSON file (default: the preset "
                                    "the plan names, or this host's kept measurement for a "
                                    "plan made with --target host)")
    e.add_argument("--costs", help="the cost table the plan was made with (default: the one "
                                    "this host kept when it priced the plan by measured "
                                    "costs, found by the plan's costs_sha256)")
    e.add_argument("--json", action="store_true")
    e.set_defaults(run=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from planner.costs import load_table
    from planner.pipeline.explain import explain, format_explain, rederive
    from planner.plan import load_plan
    from planner.target.presets import PRESETS, load_target

    plan = load_plan(args.plan)
    name = args.target or plan.target.name
    # A host plan is explained from this host's kept measurement (what `--target host` read
    # when it was made here); rederive refuses it, naming why, where that is not its target.
    if args.target is None and name not in PRESETS and name != "host":
        raise UserError(f"{args.plan}: target {name!r} is no preset; give it with --target FILE")
    target = load_target(name)
    table = load_table(args.costs) if args.costs else kept_table(args.plan, plan)
    try:
        derived = rederive(plan, target, table)
    except UserError as e:
        raise UserError(f"{args.plan}: {e}") from None
    out = explain(derived, args.name)
    print(json.dumps(out, indent=2, sort_keys=True) if args.json else format_explain(out))
    return 0


def kept_table(path: str, plan: Any) -> Any:
    """The cost table a plan priced by measured costs on this host was made with (the host
    keeps each by its digest: planner.costs.host_costs.keep_priced); None for an analytical
    plan; UserError in one line when this host does not hold it."""
    from planner.costs.host_costs import priced_path, read_priced

    sha = plan.provenance.costs_sha256
    if not sha:
        return None
    table = read_priced(sha)
    if table is None:
        raise UserError(f"{path}: the plan was priced by a cost table (costs_sha256 {sha[:12]}) "
                        f"this host does not keep ({priced_path(sha).parent} holds those of "
                        f"plans priced here by measured costs); give it with --costs FILE")
    return table
