"""Steps under each OpenMP wait policy, quiet: how long an idle worker spins before it sleeps.

    python bench/bench_wait_policy.py [--engine eager|executor] [--models lstm,resnet-50]
                                      [--spins 0,300,1000,3000,10000,300000]
                                      [--rounds 3] [--steps 5]

libgomp reads its policy once, when loaded: each contender runs in a process of its own
(bench/step_process.py) started with the environment given, and the contenders of a model are
stepped in alternating rounds; the tables give medians over rounds of each round's median step
and the 1-minute load average before and after. Models: bench_cpu_strategies.py's, at its
sizes, SGD, on the host's cores.

`--engine eager` (the default): each model's nn.Module twin (bench/zoo_modules.py) with
OMP_WAIT_POLICY unset and passive. Until 2026-11-25 the generated package left
OMP_WAIT_POLICY=passive in os.environ, so every process started afterwards inherited it, among
them the PyTorch baselines the CPU benches spawn after profiling in the parent: this shows what
that did.

`--engine executor`: the generated executor of each model's uniform and optimized plans
(priced by bench_cpu_strategies.py's in-step profile) with GOMP_SPINCOUNT at each count of
`--spins` (0: passive; 300,000: libgomp's default; the package's own, codegen/backends.py's
CPU_LOAD_ENVIRONMENT, is marked): what the package's choice is measured by.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_cpu_strategies import (  # noqa: E402
    MODELS,
    SGD,
    built,
    executor_step,
    measure,
    profiled_costs,
    zoo_name,
)
from step_process import StepProcess  # noqa: E402
from zoo_modules import module_trainer  # noqa: E402

from codegen.backends import CPU_LOAD_ENVIRONMENT  # noqa: E402

POLICIES = {"unset (libgomp's default)": None, "passive": "passive"}
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
PACKAGE_SPINS = int(CPU_LOAD_ENVIRONMENT["GOMP_SPINCOUNT"])


@contextlib.contextmanager
def wait_environment(**values: str):
    """This process's environment with the wait variables set to `values` alone (the others
    unset), for the processes started inside; restored after."""
    before = {k: os.environ.pop(k) for k in WAIT_VARIABLES if k in os.environ}
    os.environ.update(values)
    try:
        yield
    finally:
        for k in WAIT_VARIABLES:
            os.environ.pop(k, None)
        os.environ.update(before)


def eager_runners(label: str, cores: int) -> dict[str, StepProcess]:
    """The eager twin of `label` in one process per entry of POLICIES."""
    runners = {}
    for name, policy in POLICIES.items():
        with wait_environment(**({"OMP_WAIT_POLICY": policy} if policy else {})):
            runners[name] = StepProcess(module_trainer, label, MODELS[label], SGD.lr, cores,
                                        what=f"{label} eager ({name})")
    return runners


def executor_runners(label: str, spins: list[int], tmp: Path) -> dict[str, StepProcess]:
    """`label`'s uniform and optimized executors in one process per spin count."""
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.pipeline import PlanOptions, plan
    from planner.schedule import ScheduleOptions
    from planner.target.detect import detect
    from planner.zoo import build as zoo

    target = detect()
    graph = prepare(zoo(zoo_name(label), **MODELS[label]), GraphOptions(optimizer=SGD))
    table = profiled_costs(label, graph, target)
    runners = {}
    for strategy in ("uniform", "optimized"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = plan(graph, target, table, PlanOptions(schedule=ScheduleOptions(
                strategy=strategy)))
        folder = tmp / strategy
        built(p, folder)
        for n in spins:
            with wait_environment(GOMP_SPINCOUNT=str(n)):
                runners[f"{strategy} {n}"] = StepProcess(executor_step, p, folder, graph,
                                                         what=f"{label} {strategy} {n}")
    return runners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("eager", "executor"), default="eager")
    parser.add_argument("--models", default="lstm,resnet-50")
    parser.add_argument("--spins", default=f"0,300,1000,{PACKAGE_SPINS},10000,300000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    labels = args.models.split(",")
    for label in labels:
        if label not in MODELS:
            raise SystemExit(f"unknown model {label!r}; known: {', '.join(MODELS)}")
    try:
        spins = [int(n) for n in args.spins.split(",")]
    except ValueError:
        raise SystemExit(f"--spins: whole numbers separated by commas, got {args.spins!r}") \
            from None
    cores = len(os.sched_getaffinity(0))
    load = [os.getloadavg()[0]]
    rows = []
    for label in labels:
        with tempfile.TemporaryDirectory(prefix="wait-policy-") as tmp:
            runners = (eager_runners(label, cores) if args.engine == "eager"
                       else executor_runners(label, spins, Path(tmp)))
            try:
                rows.append((label, {k: 1e3 * v for k, v in
                                     measure(runners, args.steps, args.rounds).items()}))
            finally:
                for run in runners.values():
                    run.close()
        print(f"done: {label}", file=sys.stderr, flush=True)
    load.append(os.getloadavg()[0])
    print(f"{cores} threads; load average {load[0]:.2f} before, {load[1]:.2f} after")
    print(eager_table(rows) if args.engine == "eager" else executor_table(rows, spins))


def eager_table(rows: list[tuple[str, dict[str, float]]]) -> str:
    names = list(POLICIES)
    lines = [f"| model | {' | '.join(f'{n} ms' for n in names)} | passive / unset |",
             f"| --- | {' | '.join('---:' for _ in names)} | ---: |"]
    for label, ms in rows:
        cells = " | ".join(f"{ms[n]:.1f}" for n in names)
        lines.append(f"| {label} | {cells} | {ms['passive'] / ms[names[0]]:.2f} |")
    return "\n".join(lines)


def executor_table(rows: list[tuple[str, dict[str, float]]], spins: list[int]) -> str:
    """Step ms per plan and spin count, the package's count starred."""
    heads = [f"{n}{'*' if n == PACKAGE_SPINS else ''}" for n in spins]
    lines = [f"| model | plan | {' | '.join(f'{h} ms' for h in heads)} |",
             f"| --- | --- | {' | '.join('---:' for _ in spins)} |"]
    for label, ms in rows:
        for strategy in ("uniform", "optimized"):
            cells = " | ".join(f"{ms[f'{strategy} {n}']:.2f}" for n in spins)
            lines.append(f"| {label} | {strategy} | {cells} |")
    lines.append("(* the package's GOMP_SPINCOUNT; 0 is OMP_WAIT_POLICY=passive's count, "
                 "300000 libgomp's default)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
