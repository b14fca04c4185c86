"""Host detection quiet and beside neighbours (issue 89): does a busy machine pass for a slow
one? For each neighbour count N (bench_neighbours' 2-thread float32 matmul processes), each
round detects the host afresh (`planner target detect`'s path: planner.target.detect.detect,
refresh=True, its own empty cache) twice: as detection measures (one-thread rounds count the
process's CPU time) and with every round timed on the wall (what it measured before issue 89).
Prints one markdown row per detection: the float32 peak and memory bandwidth the target takes,
each figure's load and whether it is kept as busy, the 1-minute load average and the host key
the cost store is kept under (planner.costs.host_costs.host_key: what the machine is, the same
in every row however the figures came out).

    python bench/bench_host_figures.py [--neighbours 0,4] [--rounds 2] [--budget 0.5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_neighbours import neighbours  # noqa: E402

from planner.costs.host_costs import host_key  # noqa: E402
from planner.target import measure  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.target.host_cache import HostMeasurement  # noqa: E402


def detect_once(budget_s: float, wall_only: bool) -> tuple[object, HostMeasurement]:
    real = measure.round_seconds
    if wall_only:
        measure.round_seconds = lambda wall, cpu, threads: wall
    try:
        with tempfile.TemporaryDirectory() as cache:
            os.environ["PLANNER_CACHE"] = cache
            target = detect(budget_s=budget_s, refresh=True)
            [entry] = Path(cache, "hosts").glob("*.json")
            return target, HostMeasurement.model_validate_json(entry.read_text())
    finally:
        measure.round_seconds = real


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--neighbours", default="0,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget", type=float, default=0.5)
    args = ap.parse_args()
    print("| N | timing | round | peak GFLOP/s | GEMM 1 core | GEMM all | memory GB/s "
          "| loads (1 core GEMM, all-core GEMM, all-core stream) | busy | loadavg 1 min "
          "| host key |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.neighbours.split(",")]:
        procs = neighbours(n)
        time.sleep(3.0)  # the neighbours running
        try:
            for r in range(args.rounds):
                for wall_only in (False, True):
                    t, m = detect_once(args.budget, wall_only)
                    loads = ", ".join(f"{m.load_of(f):.2f}" for f in (
                        "gemm_flops_one_core", "gemm_flops_all_cores", "memory_bandwidth"))
                    print(f"| {n} | {'wall' if wall_only else 'CPU time, 1 thread'} | {r} "
                          f"| {t.cpu.peak_flops / 1e9:.0f} | {m.gemm_flops_one_core / 1e9:.0f} "
                          f"| {m.gemm_flops_all_cores / 1e9:.0f} "
                          f"| {t.cpu.memory_bandwidth / 1e9:.1f} | {loads} "
                          f"| {'yes' if m.busy else 'no'} | {os.getloadavg()[0]:.2f} "
                          f"| {host_key(t)[:12]} |",
                          flush=True)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.join()


if __name__ == "__main__":
    main()
