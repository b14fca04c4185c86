"""`planner explain PLAN [NAME] [--target T] [--costs C] [--json]` (planner.report.explain)."""

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
    e.add_argument("--costs", help="the cost table the plan was made with")
    e.add_argument("--json", action="store_true")
    e.set_defaults(run=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from planner.costs import load_table
    from planner.plan import load_plan
    from planner.report.explain import explain, format_explain, rederive
    from planner.target.presets import PRESETS, load_target

    plan = load_plan(args.plan)
    name = args.target or plan.target.name
    # A host plan is explained from this host's kept measurement (what `--target host` read
    # when it was made here); rederive refuses it, naming why, where that is not its target.
    if args.target is None and name not in PRESETS and name != "host":
        raise UserError(f"{args.plan}: target {name!r} is no preset; give it with --target FILE")
    target = load_target(name)
    table = load_table(args.costs) if args.costs else None
    try:
        derived = rederive(plan, target, table)
    except UserError as e:
        raise UserError(f"{args.plan}: {e}") from None
    out = explain(derived, args.name)
    print(json.dumps(out, indent=2, sort_keys=True) if args.json else format_explain(out))
    return 0
