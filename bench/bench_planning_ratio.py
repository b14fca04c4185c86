"""Planning time against graph building (issue 51, item 2): `planner plan GRAPH --train sgd
--target T` against `planner graph GRAPH --train sgd`, each a fresh interpreter, in alternating
rounds (graph, plan, graph, plan, ...: a loaded machine slows both alike), with bytecode cached
(a private PYTHONPYCACHEPREFIX, warmed by one untimed round). Prints per command the median wall
and CPU seconds (user + system of the child) and the plan/graph ratios; with --baseline DIR,
another checkout's commands take turns with this one's in every round (before/after).

    python bench/bench_planning_ratio.py [--rounds 7] [--graph 'zoo:inception_v3?batch=16']
                                         [--target knl-7250] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one command; CPU from the children's resource usage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--graph", default="zoo:inception_v3?batch=16")
    ap.add_argument("--target", default="knl-7250")
    ap.add_argument("--baseline", metavar="DIR", help="another checkout, timed in turn")
    args = ap.parse_args()
    checkouts = [("this", ROOT)] + ([("baseline", os.path.abspath(args.baseline))]
                                    if args.baseline else [])
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        out = os.path.join(tmp, "out.json")
        commands = {
            "graph": [sys.executable, "-m", "planner.cli", "graph", args.graph, "--train", "sgd",
                      "-o", out, "--force"],
            "plan": [sys.executable, "-m", "planner.cli", "plan", args.graph, "--train", "sgd",
                     "--target", args.target, "-o", out, "--force"]}
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        load = [os.getloadavg()[0]]
        for r in range(args.rounds + 1):
            for name, cwd in checkouts:
                for what, cmd in commands.items():
                    t = timed(cmd, cwd, env)
                    if r:  # the first round writes the bytecode
                        times.setdefault((name, what), []).append(t)
            load.append(os.getloadavg()[0])
    print(f"{args.graph} --train sgd, --target {args.target}: medians of {args.rounds} "
          f"alternating rounds; 1-minute load average {min(load):.1f}-{max(load):.1f}")
    print(f"{'checkout':<10}{'command':<8}{'wall s':>8}{'CPU s':>8}{'wall x':>8}{'CPU x':>8}")
    for name, _ in checkouts:
        graph = [statistics.median(x) for x in zip(*times[name, "graph"], strict=True)]
        for what in commands:
            wall, cpu = (statistics.median(x) for x in zip(*times[name, what], strict=True))
            print(f"{name:<10}{what:<8}{wall:>8.3f}{cpu:>8.3f}{wall / graph[0]:>8.2f}"
                  f"{cpu / graph[1]:>8.2f}")


if __name__ == "__main__":
    main()
