"""Scheduling benchmark: predicted step times of every strategy against the lower bound, and
planning time, on knl-7250 with the analytical cost model (training graphs, SGD).

    python bench/bench_schedule.py [--quick]     (--quick skips ResNet-1001)

Columns: uniform (68 threads, one op at a time), best uniform grid (intra x inter), paper
(seed 002 Strategies 1-4), optimized; DESIGN.md's bound max(critical path, area); the plan's
lower bound (the largest of that, the allotment bound and the cut bound, planner.schedule.bound);
optimized over each; planning seconds of optimized. Times are simulated milliseconds per step.

Planning time, last: `planner plan` as a whole command (a fresh interpreter: start-up, imports,
graph, planning, verification, writing the plan; this checkout's planner), median wall and CPU
seconds of 5 runs (3 for ResNet-1001), as the environment runs it and with bytecode cached,
and `pipeline.plan` in-process (median of 3; 1 for ResNet-1001), for Inception-v3 b16 and
ResNet-1001 training; with the CPU model and load average (shared machine).
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

# This checkout's planner, whatever else is installed (the timed commands below use it too).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from planner.costs import CostModel  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target import preset  # noqa: E402
from planner.zoo import build  # noqa: E402

MODELS = [("resnet-50", "resnet", dict(depth=50, batch=64)),
          ("inception_v3", "inception_v3", dict(batch=16)),
          ("dcgan", "dcgan", dict(batch=64)),
          ("lstm", "lstm", dict(batch=20)),
          ("gpt", "gpt", dict(batch=16, seq=128, dim=256, heads=8, layers=4)),
          ("bert", "bert", dict(batch=16, seq=128, dim=256, heads=8, layers=4))]


def main() -> None:
    warnings.simplefilter("ignore")
    model = CostModel(preset("knl-7250"))
    print(f"{'model':<14}{'ops':>7}{'uniform':>10}{'grid':>10}{'paper':>10}{'optimized':>11}"
          f"{'cp|area':>10}{'bound':>10}{'/cp|area':>10}{'/bound':>8}{'plan s':>8}")
    for label, name, params in MODELS:
        g = prepare(build(name, **params), GraphOptions(optimizer=Optimizer(kind="sgd")))
        row = []
        for opts in (ScheduleOptions(strategy="uniform"),
                     ScheduleOptions(strategy="uniform", grid=True),
                     ScheduleOptions(strategy="paper")):
            row.append(plan(g, model.target, model.table, PlanOptions(schedule=opts))
                       .summary.step_seconds * 1e3)
        t0 = time.perf_counter()
        p = plan(g, model.target, model.table)
        seconds = time.perf_counter() - t0
        s = p.summary
        design = max(s.critical_path_seconds, s.area_bound_seconds)
        print(f"{label:<14}{len(g.nodes):>7}" + "".join(f"{v:>10.2f}" for v in row)
              + f"{s.step_seconds * 1e3:>11.2f}{design * 1e3:>10.2f}"
              f"{s.lower_bound_seconds * 1e3:>10.2f}{s.step_seconds / design:>10.3f}"
              f"{s.ratio:>8.3f}{seconds:>8.1f}")
    if "--quick" not in sys.argv:
        g = prepare(build("resnet", depth=1001, batch=2, image=32),
                    GraphOptions(optimizer=Optimizer(kind="sgd")))
        t0 = time.perf_counter()
        p = plan(g, model.target, model.table)
        print(f"resnet-1001 training ({len(g.nodes)} ops): optimized planned in "
              f"{time.perf_counter() - t0:.1f} s; ratio {p.summary.ratio:.3f}")


# (label, zoo spec, targets in seconds: whole command, in-process) of the planning-time table
TIMED = [("inception_v3 b16", "zoo:inception_v3?batch=16", 1.5, None),
         ("resnet-1001 b2", "zoo:resnet?depth=1001&batch=2&image=32", None, 8.0)]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def command_seconds(spec: str, runs: int, cached: bool = False) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds of `planner plan SPEC --train sgd --target
    knl-7250` in a fresh interpreter, running this checkout's planner. `cached`: with the
    modules' bytecode cached (in a temporary folder, after one run to fill it), as an
    installed package has it, even where PYTHONDONTWRITEBYTECODE is set."""
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
        if cached:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        command = [sys.executable, "-m", "planner.cli", "plan", spec, "--train", "sgd",
                   "--target", "knl-7250", "-o", os.path.join(tmp, "p.plan.json"), "--force"]
        if cached:
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def in_process_seconds(spec: str, runs: int) -> float:
    from planner.zoo import from_spec

    graph = prepare(from_spec(spec), GraphOptions(optimizer=Optimizer(kind="sgd")))
    target = preset("knl-7250")
    seconds = []
    for _ in range(runs):
        t0 = time.perf_counter()
        plan(graph, target)
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def planning_time(quick: bool) -> None:
    print(f"\nplanning time on {cpu_model()}, {os.cpu_count()} logical CPUs; "
          f"load average {load_average()} before")
    print(f"{'graph':<18}{'command s':>10}{'cpu s':>8}{'cached s':>10}{'cpu s':>8}{'target':>8}"
          f"{'in-process s':>14}{'target':>8}")
    for label, spec, command_target, inner_target in TIMED:
        if quick and "1001" in spec:
            continue
        runs = 5 if command_target else 3
        wall, cpu = command_seconds(spec, runs)
        cached_wall, cached_cpu = command_seconds(spec, runs, cached=True)
        inner = in_process_seconds(spec, 3 if command_target else 1)
        print(f"{label:<18}{wall:>10.2f}{cpu:>8.2f}{cached_wall:>10.2f}{cached_cpu:>8.2f}"
              f"{(f'< {command_target}' if command_target else ''):>8}{inner:>14.2f}"
              f"{(f'< {inner_target}' if inner_target else ''):>8}")
    print(f"load average {load_average()} after")


if __name__ == "__main__":
    main()
    planning_time("--quick" in sys.argv)
