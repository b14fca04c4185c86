"""torch.compile(backend="planner")'s training step under two checkouts of planner (A/B: a
change against the code before it), each run in a process of its own, rounds alternating.

    python bench/bench_backend_ab.py --trees OLD NEW [--models transformer_encoder,resnet18]
                                     [--rounds 4] [--steps 12] [--costs measured]

Each process imports planner from one tree (PYTHONPATH; this script and bench/cpu_modules.py
from this checkout), trains one bench/cpu_modules.py module through the user's loop compiled
by the backend (cpu_modules.eager_step: SGD, the model and loss compiled, backward, step),
warms it up (past the choice of its way and schedules, as bench_fixed_set.py does; priced by
--costs, bench_fixed_set.py's "measured", or the backend's default), times --steps steps and
reports its median step (and mean: a cyclic collection's pause shows there), the peak RSS
over the timed steps (VmHWM, reset after the warm-up: planning's own peak is not the steps'),
the RSS after them, and how many graphs fell back to eager. Rounds alternate the trees' order
(A B, B A, ...), so a drift in the machine's load falls on both; the table gives the medians
over rounds of each run's median, and the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(model: str, steps: int, costs: str | None) -> None:
    import time
    import warnings

    import torch

    # planner from the tree (PYTHONPATH) before bench/cpu_modules.py puts this checkout first
    # on sys.path (for tests.importers.fresh_models): otherwise both trees ran this one.
    import codegen  # noqa: F401  (the planner's own builder, from the same tree)
    import planner.torch  # noqa: F401  (registers the backend)
    from planner.torch.lane_choice import MEASURED
    from planner.torch.piece import PlannerFallback

    sys.path.insert(0, str(HERE))
    from bench_neighbours import ADAPT_STEPS
    from cpu_modules import eager_step, example

    torch.set_num_threads(os.cpu_count() or 1)
    module, inputs, y, loss_fn = example(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PlannerFallback)
        step = eager_step(module, inputs, y, loss_fn, 0.01, compiled=True, backend="planner",
                          options={"costs": costs} if costs else None)
        # Past the measurement of its two ways (lane_choice.py) and its schedules' choice, as
        # bench_fixed_set.py warms the backend up.
        for _ in range(3 + 2 * (MEASURED + 1) + ADAPT_STEPS):
            step()
    # The steps' own high-water mark, not planning's: Linux resets VmHWM on "5".
    Path("/proc/self/clear_refs").write_text("5")
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    print(json.dumps({"ms": 1e3 * statistics.median(times),
                      "mean_ms": 1e3 * statistics.mean(times),
                      "step_peak_mib": int(status["VmHWM"].split()[0]) / 1024,
                      "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
                      "fallbacks": sum(issubclass(w.category, PlannerFallback) for w in caught)}))


def run(tree: Path, model: str, steps: int, costs: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # This script and bench/cpu_modules.py from here (a tree before this script has none),
    # planner from the tree.
    out = subprocess.run([sys.executable, __file__, "--child", model, "--steps", str(steps),
                          *(["--costs", costs] if costs else [])],
                         env=env, cwd=tree, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", nargs=2, type=Path, metavar=("A", "B"))
    ap.add_argument("--models", default="transformer_encoder,resnet18")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--costs", choices=("measured", "in-step", "analytical"),
                    help="the backend's options={'costs': ...} (default: its own default)")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps, args.costs)
        return
    trees = [t.resolve() for t in args.trees]
    print(f"load before: {os.getloadavg()[0]:.2f}")
    for model in args.models.split(","):
        runs: dict[int, list[dict]] = {0: [], 1: []}
        for r in range(args.rounds):
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                runs[k].append(run(trees[k], model, args.steps, args.costs))
                print(f"  {model} round {r} {'AB'[k]}: {runs[k][-1]} "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
        for k in (0, 1):
            med = {f: statistics.median(x[f] for x in runs[k]) for f in runs[k][0]}
            print(f"{model:22s} {'AB'[k]} step {med['ms']:7.1f} ms (mean {med['mean_ms']:.1f})  "
                  f"steps' peak RSS "
                  f"{med['step_peak_mib']:7.1f} MiB  RSS after {med['rss_mib']:7.1f} MiB  "
                  f"(steps ms: {', '.join(format(x['ms'], '.1f') for x in runs[k])})")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
