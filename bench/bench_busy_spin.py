"""libgomp's spinning throttled on a busy host, against the same run with it left alone.

    python bench/bench_busy_spin.py [--models gpt,transformer_encoder,mobilenet_v2,resnet18]
                                    [--neighbours 4] [--rounds 2]

Each contender is a process of its own (libgomp reads its environment once, when it loads):
`throttled` with the environment as it is (the executor throttles libgomp's spinning while its
steps' threads wait for CPUs: templates/cpu/runtime/busy_host.h), `spinning` with
GOMP_SPINCOUNT=300000 set, libgomp's own default count, which as a user's own choice turns the
throttle off. In each: planner.torch's trainer of the model (bench/cpu_modules.py, SGD, the
host's measured costs, the executor's adaptive schedule choice), 15 steps, 15 timed quiet, then
N two-thread BLAS loops started beside it (bench_neighbours.neighbours), 15 steps, 20 timed.
Medians of wall time and of the process's CPU time per step; contenders of a model alternate in
rounds. The table gives each round's numbers with the load average and whether the step ran
throttled, and the ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = {"throttled": {}, "spinning": {"GOMP_SPINCOUNT": "300000"}}


def one(label: str, neighbours: int, folder: Path) -> dict:
    """In this process: the trainer's steps quiet, then beside `neighbours` BLAS loops."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from bench_neighbours import module_trainer
    from bench_neighbours import neighbours as start

    t, inputs, y = module_trainer(label, folder, "measured")

    def timed(k: int) -> tuple[float, float]:
        walls, cpus = [], []
        for _ in range(k):
            c0, w0 = time.process_time(), time.perf_counter()
            t.step(*inputs, y)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3

    timed(15)
    quiet = timed(15)
    procs = start(neighbours)
    time.sleep(1.0)
    try:
        timed(15)
        busy = timed(20)
        load = os.getloadavg()[0]
    finally:
        for p in procs:
            p.kill()
    stats = t.executor.stats()
    return {"quiet_ms": quiet[0], "quiet_cpu_ms": quiet[1], "busy_ms": busy[0],
            "busy_cpu_ms": busy[1], "load": load, "running": stats["schedule"]["running"],
            "throttled": stats["spin"]["throttled"]}


def contender(label: str, mode: str, neighbours: int, folder: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", label, "--neighbours",
                          str(neighbours), "--folder", str(folder)],
                         env={**os.environ, **MODES[mode]}, capture_output=True, text=True,
                         timeout=1800)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{label} {mode}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def table(rows: list[tuple[str, str, int, dict]]) -> str:
    out = ["| model | contender | round | quiet ms (CPU ms) | busy ms (CPU ms) | load | "
           "schedule | throttled |", "|---|---|---|---|---|---|---|---|"]
    for label, mode, r, d in rows:
        out.append(f"| {label} | {mode} | {r} | {d['quiet_ms']:.1f} ({d['quiet_cpu_ms']:.1f}) "
                   f"| {d['busy_ms']:.1f} ({d['busy_cpu_ms']:.1f}) | {d['load']:.1f} | "
                   f"{d['running']} | {d['throttled']} |")
    out += ["", "| model | busy ms, spinning / throttled (medians) | busy CPU ms, same |",
            "|---|---|---|"]
    for label in dict.fromkeys(r[0] for r in rows):
        med = {m: [statistics.median(d[k] for lb, mm, _, d in rows if lb == label and mm == m)
                   for k in ("busy_ms", "busy_cpu_ms")] for m in MODES}
        out.append(f"| {label} | {med['spinning'][0] / med['throttled'][0]:.2f}x | "
                   f"{med['spinning'][1] / med['throttled'][1]:.2f}x |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt,transformer_encoder,mobilenet_v2,resnet18")
    parser.add_argument("--neighbours", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.one, args.neighbours, args.folder)), flush=True)
        return
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for label in args.models.split(","):
                for mode in (list(MODES) if r % 2 == 0 else list(MODES)[::-1]):
                    d = contender(label, mode, args.neighbours, Path(tmp) / label)
                    rows.append((label, mode, r + 1, d))
                    print(f"{label} {mode} round {r + 1}: busy {d['busy_ms']:.1f} ms, load "
                          f"{d['load']:.1f}", file=sys.stderr, flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
