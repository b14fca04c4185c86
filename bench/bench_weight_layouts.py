"""Convolution weights kept in their kernels' layout (issue 89) against plain ones: one build of
each model's plan, two executors of it (`weight_layouts="kernel"`, the default, and "plain",
which reorders every convolution weight in and every weight gradient out at each step), their
steps timed in alternating rounds on the main schedule.

    PYTHONPATH=. python bench/bench_weight_layouts.py [--models dcgan,resnet-50-b32]
        [--rounds 6] [--steps 5]

Per model (bench_neighbours' zoo graphs, SGD, priced as the host's plans are by default): the
median over rounds of each executor's median step (ms), the kept executor's
`kept_layout_bytes`, and the load average before and after, since the host is shared. Both
executors compute the same bits (tests/codegen/test_weight_layouts.py); the difference is the
reorders alone.

`--profile`: instead of timing, each executor's steps in a process of its own under
`ONEDNN_VERBOSE=profile_exec` (bench/onednn_profile.py's sums): oneDNN's reorders per step by
layout pair, which weight reorders the kept layouts remove and which remain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

LAYOUTS = ("kernel", "plain")


def executors(label: str, folder: Path, layouts=LAYOUTS) -> tuple[dict, dict]:
    """({layout: warm executor of the model's main schedule}, its feeds)."""
    from bench_cpu_strategies import SGD
    from bench_neighbours import MODELS

    from codegen.build import build
    from codegen.load import load
    from codegen.render import render
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.interpret import init_params, random_feeds
    from planner.pipeline import plan
    from planner.target.detect import detect
    from planner.zoo import build as zoo

    name, params = MODELS[label]
    p = plan(prepare(zoo(name, **params), GraphOptions(optimizer=SGD)), detect())
    module = load(build(render(p, folder)).dir)
    feeds = random_feeds(p.graph, seed=1)
    out = {}
    for layout in layouts:
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


def _profile_child(label: str, layout: str, steps: int) -> None:
    """(In the child, ONEDNN_VERBOSE set.) Warm-up, then marked steps."""
    from onednn_profile import END, START

    exs, feeds = executors(label, Path(tempfile.mkdtemp()), (layout,))
    for _ in range(2):
        exs[layout].step(feeds)
    print(START, flush=True)
    for _ in range(steps):
        exs[layout].step(feeds)
    print(END, flush=True)


def profile(label: str, steps: int) -> None:
    """Each layout's oneDNN reorders per step (ms, calls) by layout pair."""
    from onednn_profile import summed

    for layout in LAYOUTS:
        run = subprocess.run([sys.executable, __file__, "--child", label, "--layout", layout,
                              "--steps", str(steps)], capture_output=True, text=True,
                             env={**os.environ, "ONEDNN_VERBOSE": "profile_exec"})
        if run.returncode != 0:
            print(f"{label} {layout}: failed: {run.stderr.strip().splitlines()[-1:]}")
            continue
        kinds, reorders = summed(run.stdout.splitlines(), steps)
        total = sum(v[0] for v in kinds.values())
        ms, calls = kinds.get("reorder", [0.0, 0.0])
        print(f"\n{label}, weight_layouts={layout}: oneDNN {total:.2f} ms a step, reorders "
              f"{ms:.2f} ms in {calls:.0f} calls")
        for name, (ms, calls) in sorted(reorders.items(), key=lambda kv: -kv[1][0]):
            print(f"    reorder {name:32s} {ms:8.3f} ms {calls:6.0f} calls")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="dcgan,resnet-50-b32")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--layout", help=argparse.SUPPRESS)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if args.child:
        return _profile_child(args.child, args.layout, args.steps)
    if args.profile:
        print(f"load average {os.getloadavg()[0]:.2f}; {args.steps} steps, main schedule")
        for label in args.models.split(","):
            profile(label, args.steps)
        return
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
