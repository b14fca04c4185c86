"""The per-step team scale (CostTable.team_scale, issue 60) on the nn.Modules: each module's
trainer priced by its default table (the host's store, the scale fitted from its step), by
the same table without the scale, and by its in-step profile, in rotating turns.

    PYTHONPATH=. python bench/bench_team_scale.py [--models mobilenet_v2,resnet18]
                                                  [--rounds 5] [--steps 15]

Per module (bench/cpu_modules.py, SGD): the first trainer, on the default costs
(`costs="measured"`), fits the step's figures if the store has none; the table its plan was
priced by (kept by the planner for `planner explain`) is written as a file with and without
its team scale, and each of the three trainers is built once and then run `--rounds` times,
`--steps` steps each in a fresh process (bench_vs_compile.measure), the three in rotating
order. Printed: the median of each side's run medians, their ratios, each run's median and the
load average. The strategies table's models: bench/bench_default_vs_in_step_strategies.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_vs_compile import measure  # noqa: E402

from planner.costs.host_costs import read_priced  # noqa: E402

MODULES = ("mobilenet_v2", "resnet18", "transformer_encoder", "stochastic_depth", "gpt", "mae",
           "gnn")


def compare(label: str, work: Path, rounds: int, steps: int) -> None:
    first = work / "default"
    measure(label, "ours", 1, first, "measured")
    plan = json.loads(next(first.glob("torch_*/plan.json")).read_text())
    table = read_priced(plan["provenance"]["costs_sha256"])
    if table is None:
        raise SystemExit(f"{label}: the default plan's cost table was not kept")
    sides: dict[str, tuple[Path, str]] = {}
    for name, t in (("scaled", table), ("unscaled", table.model_copy(
            update={"team_scale": None}))):
        folder = work / name
        folder.mkdir(parents=True)
        (folder / "costs.json").write_text(t.to_json())
        sides[name] = folder, str(folder / "costs.json")
    sides["in-step"] = work / "in-step", "in-step"
    runs: dict[str, list[float]] = {k: [] for k in sides}
    order = list(sides)
    for r in range(rounds):
        for name in order[r % 3:] + order[:r % 3]:
            folder, costs = sides[name]
            runs[name].append(measure(label, "ours", steps, folder, costs)[0])
    m = {k: statistics.median(v) for k, v in runs.items()}
    each = " | ".join(" ".join(f"{t * 1e3:.2f}" for t in v) for v in runs.values())
    print(f"{label:22s} team_scale {table.team_scale}: scaled {m['scaled'] * 1e3:.2f}, unscaled "
          f"{m['unscaled'] * 1e3:.2f}, in-step {m['in-step'] * 1e3:.2f} ms; scaled / in-step "
          f"{m['scaled'] / m['in-step']:.3f}, unscaled / in-step "
          f"{m['unscaled'] / m['in-step']:.3f} (runs {each}); load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODULES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    os.environ.pop("PLANNER_COSTS", None)
    print(f"load average before {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="team-scale-") as work:
        for label in args.models.split(","):
            compare(label, Path(work) / label, args.rounds, args.steps)


if __name__ == "__main__":
    main()
