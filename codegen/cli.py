"""`planner build PLAN [-o DIR]`: render and compile a plan's executor; prints the import name.

Wiring (planner/cli/main.py, build_parser):

    from codegen.cli import add_build_commands
    add_build_commands(sub)

    $ planner build lenet.plan.json
    rendering generated/lenet (51 ops) ...
    building the planner's kernel library (CPU runtime) for this host (once; ...) in ...
    lenet: compiling the schedule
    built generated/lenet in 1.2 s; import it with:
      import sys; sys.path.insert(0, "generated"); import lenet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_build_commands(sub: Any) -> None:
    p = sub.add_parser("build", help="generate and compile the executor of a plan",
                       description="Render PLAN's executor sources into DIR (default "
                                   "generated/<graph name>) and compile them; the backend's kernel "
                                   "library is built once per target and cached.")
    p.add_argument("plan", metavar="PLAN")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="output folder; its name is the module name")
    p.add_argument("--force", action="store_true",
                   help="replace DIR even when it holds another plan's executor or other files")
    p.add_argument("--sanitize", metavar="NAMES", type=sanitizers, default=(),
                   help="instrument the runtime and schedule: address, undefined or thread, "
                        "or a comma list (address,undefined); run an address-sanitized "
                        "executor with LD_PRELOAD=$(c++ -print-file-name=libasan.so)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run_build)


def sanitizers(text: str) -> tuple[str, ...]:
    """argparse type of --sanitize: known sanitizer names, comma-separated."""
    from codegen.build import SANITIZERS, sanitizer_flags
    from codegen.errors import BuildError

    names = tuple(sorted({n.strip() for n in text.split(",") if n.strip()}))
    try:
        sanitizer_flags(names)
    except BuildError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not names:
        raise argparse.ArgumentTypeError(f"name one of {sorted(SANITIZERS)}")
    return names


def run_build(args: argparse.Namespace) -> int:
    from codegen.package import build_package
    from codegen.render import module_name
    from planner.plan import load_plan

    plan = load_plan(args.plan)
    out = Path(args.output) if args.output else Path("generated") / module_name(plan.graph.name)
    quiet = args.json

    def say(line: str) -> None:
        if not quiet:
            print(line, flush=True)

    say(f"rendering {out} ({len(plan.ops)} ops) ...")
    tree, result = build_package(plan, out, force=args.force,
                                 replace_executors=args.output is None, progress=say,
                                 sanitize=args.sanitize)
    if args.json:
        print(json.dumps({"module": tree.name, "dir": str(out), "cached": result.cached,
                          "seconds": round(result.seconds, 3),
                          "runtime": str(result.runtime)}, indent=2, sort_keys=True))
        return 0
    parent = out.parent if str(out.parent) != "" else Path(".")
    print(f"built {out} in {result.seconds:.1f} s; import it with:")
    print(f"  import sys; sys.path.insert(0, {str(parent)!r}); import {tree.name}")
    return 0


if __name__ == "__main__":  # `python -m codegen.cli PLAN` until planner/cli/main.py wires it in
    parser = argparse.ArgumentParser(prog="planner")
    add_build_commands(parser.add_subparsers(dest="command", required=True))
    sys.exit(run_build(parser.parse_args(["build", *sys.argv[1:]])))
