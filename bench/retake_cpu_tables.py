"""Retake the CPU tables of bench/RESULTS.md with the planner's default (measured) costs, in one
command, on a quiet machine (issue 51, item 4):

    PYTHONPATH=. python bench/retake_cpu_tables.py [-o bench/results/DATE-cpu-tables.md]
    PYTHONPATH=. python bench/retake_cpu_tables.py --quick      # one tiny case of each: a check

1. CPU strategies (bench_cpu_strategies.py --costs measured): the zoo graphs' plans, each
   strategy's executor against PyTorch eager.
2. nn.Modules against eager and torch.compile (bench_vs_compile.py --costs measured).
3. The busy machine (bench_neighbours.py --costs measured): beside 0, 2, 4, 6 two-thread BLAS
   neighbours and a DataLoader.

Each bench alternates its contenders round by round and reports medians over rounds (see each
one's docstring); each runs in a process of its own, one after another, and the 1-minute load
average is recorded before and after each. The plans are priced as a user's are by default:
each kernel signature measured on this host once and kept in $PLANNER_CACHE (entries measured
while the machine was busy are measured again when it is quiet: planner/costs/host_costs.py),
so the first run also measures what the store lacks. Writes the outputs, with the commands and
loads, to -o (default: printed).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (title, bench arguments): the RESULTS.md tables' own commands, with the default costs.
FULL = (
    ("CPU strategies", ["bench_cpu_strategies.py", "--models",
                        "lstm,inception_v3,dcgan,resnet-50,wide_deep", "--steps", "5",
                        "--rounds", "5", "--no-compile", "--costs", "measured"]),
    ("nn.Modules against eager and torch.compile",
     ["bench_vs_compile.py", "--rounds", "3", "--costs", "measured"]),
    ("With BLAS neighbours and a DataLoader",
     ["bench_neighbours.py", "--models", "lstm,resnet-50,gpt,mobilenet_v2,transformer_encoder",
      "--neighbours", "0,2,4,6,loader2", "--rounds", "3", "--steps", "5", "--costs",
      "measured"]),
)
# One tiny case of each: the script and the benches' measured-costs paths work.
QUICK = (
    ("CPU strategies", ["bench_cpu_strategies.py", "--models", "wide_deep", "--steps", "2",
                        "--rounds", "1", "--no-compile", "--costs", "measured"]),
    ("nn.Modules against eager and torch.compile",
     ["bench_vs_compile.py", "--models", "transformer_encoder", "--rounds", "1", "--steps",
      "2", "--costs", "measured"]),
    ("With BLAS neighbours and a DataLoader",
     ["bench_neighbours.py", "--models", "transformer_encoder", "--neighbours", "0",
      "--rounds", "1", "--steps", "2", "--costs", "measured"]),
)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one tiny case of each table")
    ap.add_argument("-o", "--output", type=Path, help="write the report here")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("PLANNER_COSTS", None)  # the default: measured on this host
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# CPU tables with the default (measured) costs, {now}", "",
             f"{os.cpu_count()} logical CPUs; `python bench/retake_cpu_tables.py"
             f"{' --quick' if args.quick else ''}`", ""]
    failed = []
    for title, argv in QUICK if args.quick else FULL:
        before = load()
        print(f"{title}: python bench/{' '.join(argv)}", file=sys.stderr, flush=True)
        run = subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]], env=env,
                             cwd=HERE.parent, capture_output=True, text=True)
        lines += [f"## {title}", "", f"`python bench/{' '.join(argv)}`; load average "
                  f"{before} before, {load()} after; exit status {run.returncode}", "", "```",
                  run.stdout.rstrip(), "```", ""]
        if run.returncode:
            failed.append(title)
            lines += ["stderr (last lines):", "", "```",
                      "\n".join(run.stderr.rstrip().splitlines()[-20:]), "```", ""]
    text = "\n".join(lines)
    if args.output:
        args.output.write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(text)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
