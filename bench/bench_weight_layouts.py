"""Convolution weights kept in their kernels' layout (issue 89) against plain ones: one build of
each model's plan, two executors of it (`weight_layouts="kernel"`, the default, and "plain",
which reorders every convolution weight in and every weight gradient out at each step), their
steps timed in alternating rounds on the main schedule.

    PYTHONPATH=. python bench/bench_weight_layouts.py [--models dcgan,resnet-50-b32]
        [--rounds 6] [--steps 5]

Per model (bench_roofline's `_made`: bench_neighbours' zoo graphs, SGD, the host's measured
costs): the median over rounds of each executor's median step (ms), the kept executor's
`kept_layout_bytes`, and the load average before and after, since the host is shared. Both
executors compute the same bits (tests/codegen/test_weight_layouts.py); the difference is the
reorders alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

LAYOUTS = ("kernel", "plain")


def executors(label: str, folder: Path) -> tuple[dict, dict]:
    """({layout: warm executor of the model's main schedule}, its feeds)."""
    from bench_roofline import _made

    from codegen.build import build
    from codegen.load import load
    from codegen.render import render
    from planner.graph.interpret import init_params, random_feeds

    p, _, _ = _made(label, folder, "measured")
    module = load(build(render(p, folder)).dir)
    feeds = random_feeds(p.graph, seed=1)
    out = {}
    for layout in LAYOUTS:
        ex = module.Executor(weight_layouts=layout)
        ex.set_variant("main")
        ex.load_params(init_params(p.graph, seed=0))
        ex.step(feeds)
        out[layout] = ex
    return out, feeds


def median_ms(ex, feeds: dict, steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        ex.step(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="dcgan,resnet-50-b32")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"{'model':15s} {'kept ms':>9s} {'plain ms':>9s} {'plain/kept':>10s} "
          f"{'kept MiB':>9s}  load average")
    for label in args.models.split(","):
        exs, feeds = executors(label, Path(tempfile.mkdtemp()))
        load_before = os.getloadavg()[0]
        rounds: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        for r in range(args.rounds):
            for layout in LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]:
                rounds[layout].append(median_ms(exs[layout], feeds, args.steps))
        kept, plain = (statistics.median(rounds[layout]) for layout in LAYOUTS)
        mib = exs["kernel"].stats()["kept_layout_bytes"] / 2**20
        print(f"{label:15s} {kept:9.2f} {plain:9.2f} {plain / kept:10.3f} {mib:9.2f}  "
              f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}")
        print("   rounds kept:  " + " ".join(f"{v:.1f}" for v in rounds["kernel"]))
        print("   rounds plain: " + " ".join(f"{v:.1f}" for v in rounds["plain"]))


if __name__ == "__main__":
    main()
