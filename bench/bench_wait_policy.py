"""PyTorch eager under each OpenMP wait policy, quiet: what a process inherits matters.

    python bench/bench_wait_policy.py [--models lstm,resnet-50] [--rounds 3] [--steps 5]

The generated package loads its runtime with OMP_WAIT_POLICY=passive. Until 2026-11-25 it
left the variable in os.environ, so every process started afterwards inherited it, among them
the PyTorch baselines the CPU benches spawn after profiling in the parent. This bench shows
what that did: each model's nn.Module twin (bench/zoo_modules.py, the sizes of
bench_cpu_strategies.py, SGD, on the host's cores) in one process per policy (libgomp reads
the policy once, when loaded: bench/step_process.py starts each from the environment given),
stepped in alternating rounds; the table gives medians over rounds of each round's median step
and the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_cpu_strategies import MODELS, SGD  # noqa: E402
from step_process import StepProcess  # noqa: E402
from zoo_modules import module_trainer  # noqa: E402

POLICIES = {"unset (libgomp's default)": None, "passive": "passive"}


def started(label: str, policy: str | None, cores: int) -> StepProcess:
    """The eager twin of `label` in a process started with OMP_WAIT_POLICY=`policy` (None:
    unset); this process's environment is left as it was."""
    before = os.environ.pop("OMP_WAIT_POLICY", None)
    if policy is not None:
        os.environ["OMP_WAIT_POLICY"] = policy
    try:
        return StepProcess(module_trainer, label, MODELS[label], SGD.lr, cores,
                           what=f"{label} eager ({policy})")
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)
        if before is not None:
            os.environ["OMP_WAIT_POLICY"] = before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="lstm,resnet-50")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    labels = args.models.split(",")
    for label in labels:
        if label not in MODELS:
            raise SystemExit(f"unknown model {label!r}; known: {', '.join(MODELS)}")
    cores = len(os.sched_getaffinity(0))
    load = [os.getloadavg()[0]]
    rows = []
    for label in labels:
        runners = {name: started(label, policy, cores) for name, policy in POLICIES.items()}
        per_round: dict[str, list[float]] = {name: [] for name in runners}
        try:
            for _ in range(args.rounds):
                for name, run in runners.items():
                    per_round[name].append(statistics.median(run.step()
                                                             for _ in range(args.steps)))
        finally:
            for run in runners.values():
                run.close()
        ms = {name: 1e3 * statistics.median(v) for name, v in per_round.items()}
        rows.append((label, ms))
        print(f"done: {label}", file=sys.stderr, flush=True)
    load.append(os.getloadavg()[0])
    names = list(POLICIES)
    print(f"{cores} threads; load average {load[0]:.2f} before, {load[1]:.2f} after")
    print(f"| model | {' | '.join(f'{n} ms' for n in names)} | passive / unset |")
    print(f"| --- | {' | '.join('---:' for _ in names)} | ---: |")
    for label, ms in rows:
        cells = " | ".join(f"{ms[n]:.1f}" for n in names)
        print(f"| {label} | {cells} | {ms['passive'] / ms[names[0]]:.2f} |")


if __name__ == "__main__":
    main()
