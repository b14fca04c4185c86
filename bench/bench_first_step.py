"""From process start to the end of a user's script (issue 83): each engine runs the same
script in a fresh process (bench/first_step_loop.py), timed from before the process starts.

    python bench/bench_first_step.py [--workloads cnn,text] [--restarts 3]
        [--engines eager,inductor,inductor-dynamic,planner,trainer] [--text-steps 200]
        [--neighbours 0] [--cold | --new-host] [--quick] [--device cpu|cuda] [--declare]

Columns: time to the first step's end (the restarts table adds it counted from the end of the
engine's imports: `import torch`, and `planner.torch` for the planner's two doors), the whole
script's wall time (compile included), the
median of the second half of the steps (steady), the child's peak RSS, and the executor
packages the planner built during the run (new folders under $PLANNER_CACHE/packages).
`--restarts N` runs the CNN script N times in a row per engine in fresh processes (a
notebook's restarts): the planner's later processes find their builds and the host's
measurements by digest; Inductor's its FX-graph cache. The planner's cache is one of the bench's
own (`--cache`; default `planner-bench-first-step` beside the user's cache folder, kept between
runs: the kernel library is built in its first run), so that packages other work builds
meanwhile are not counted. `--cold` gives the planner an empty cache folder (the kernel
library built again) and Inductor a fresh cache directory first; `--new-host` a new folder
holding what `planner cache warm` leaves (the kernel library and the host's peaks), one per
engine and workload (a host that has measured no kernel: the planner's first plans are priced
by the model while a child measures, codegen/measure_later.py). The last column is
how long that child went on after the script ended (waited for before the next cell).
`--device cuda` runs PyTorch's engines on the GPU and the trainer for `target="gpu"` (the
backend is the host's only: not run there).
`--declare` gives torch.compile's engines the text workload's length range declared
(`torch._dynamo.mark_dynamic(x, 1, max=longest)`), as the trainer is given `shapes=`.
`--neighbours N` runs N processes of 2-thread float32 matmuls beside every run
(bench/bench_neighbours.py's). The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

ENGINES = ("eager", "inductor", "inductor-dynamic", "planner", "trainer")


def packages(cache: Path) -> set[str]:
    """The executor packages in `cache` (folders: not their .lock and .use files beside)."""
    folder = cache / "packages"
    return {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()


def run_once(workload: str, engine: str, steps: int, quick: bool, env: dict,
             device: str = "cpu", declare: bool = False) -> dict:
    """One fresh process: its RESULT line, timed from before it started."""
    cache = Path(env["PLANNER_CACHE"])
    before = packages(cache)
    cmd = [sys.executable, str(HERE / "first_step_loop.py"), "--workload", workload,
           "--engine", engine, "--steps", str(steps), "--device", device] + (
               ["--quick"] if quick else []) + (["--declare"] if declare else [])
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    end = time.time()
    after = measuring_after(end)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"engine": engine, "error": f"exit {done.returncode}: {tail}"}
    out = json.loads(lines[-1][len("RESULT "):])
    return {"engine": engine, "first_step_s": out["first_step_end"] - start,
            "after_import_s": out["first_step_end"] - out["imported"],
            "total_s": end - start, "steady_ms": out["steady_ms"],
            "slowest_ms": out.get("slowest_ms", float("nan")),
            "peak_rss_mib": out["peak_rss_mib"], "steps": out["steps"],
            "built": len(packages(cache) - before),
            "most_per_graph": most_per_graph(cache, packages(cache) - before),
            "measuring_after_s": after}


def most_per_graph(cache: Path, names: set[str]) -> int:
    """The most packages built for one graph (its plan's graph name: a forward, a backward,
    an evaluation) among `names`: issue 83 (b) asks at most 2 for all lengths."""
    graphs: dict[str, int] = {}
    for name in names:
        try:
            plan = json.loads((cache / "packages" / name / "plan.json").read_text())
            graph = str(plan["graph"]["name"])
        except (OSError, ValueError, KeyError, TypeError):
            graph = name  # (unreadable: counted on its own)
        graphs[graph] = graphs.get(graph, 0) + 1
    return max(graphs.values(), default=0)


def measuring_after(end: float) -> float:
    """Seconds the script's background measurement (codegen/measure_later.py: a child at low
    priority that finishes alone when the script ends first) went on after the script's end,
    waited for, so that it never runs beside the next cell."""
    while subprocess.run(["pgrep", "-f", "codegen.measure_child"],
                         capture_output=True).returncode == 0:
        time.sleep(0.2)
    return max(0.0, time.time() - end) if time.time() - end > 0.3 else 0.0


def table(title: str, rows: list[dict]) -> str:
    head = (f"\n{title}\n| engine | first step (s) | total (s) | steady step (ms) | peak RSS "
            f"(MiB) | packages built (most of one graph) | measuring after the end (s) |\n"
            f"| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    body = []
    for r in rows:
        if "error" in r:
            body.append(f"| {r['engine']} | {r['error']} | | | | | |")
        else:
            body.append(f"| {r['engine']} | {r['first_step_s']:.1f} | {r['total_s']:.1f} | "
                        f"{r['steady_ms']:.0f} | {r['peak_rss_mib']:.0f} | {r['built']} "
                        f"({r['most_per_graph']}) | "
                        f"{r['measuring_after_s']:.1f} |")
    return "\n".join([head, *body])


def new_host() -> str:
    """A new planner cache folder holding what `planner cache warm` leaves: the kernel library
    (linked) and the host's peaks (copied from the bench's cache, measured there once, or
    measured now): a host that has measured no kernel and built no plan."""
    import shutil

    from codegen.build import build_runtime, runtime_folder
    from planner.target.detect import detect

    build_runtime()
    root = Path(tempfile.mkdtemp(prefix="bench-first-step-")) / "planner"
    root.mkdir()
    (root / runtime_folder().name).symlink_to(runtime_folder(), target_is_directory=True)
    hosts = runtime_folder().parent / "hosts"
    if hosts.is_dir():
        shutil.copytree(hosts, root / "hosts")
    else:
        saved = os.environ.get("PLANNER_CACHE")
        os.environ["PLANNER_CACHE"] = str(root)
        try:
            detect()
        finally:
            os.environ.pop("PLANNER_CACHE") if saved is None else \
                os.environ.update(PLANNER_CACHE=saved)
    return str(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="cnn,text")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--text-steps", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--neighbours", type=int, default=0)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--new-host", action="store_true",
                        help="the planner's cache folder new but for what `planner cache "
                             "warm` leaves (the kernel library, linked in, and the host's "
                             "peaks): a host that has measured no kernel and built no plan")
    parser.add_argument("--cache", help="the planner's cache folder for the runs (default: one "
                                         "of the bench's own beside the user's, kept between "
                                         "runs of the bench; its first run builds the kernel "
                                         "library)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: fewer batches and steps")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: PyTorch on the GPU, the trainer for target='gpu'")
    parser.add_argument("--declare", action="store_true",
                        help="text: torch.compile's engines get the length range declared "
                             "(mark_dynamic up to the longest batch), as the trainer gets "
                             "shapes=")
    args = parser.parse_args()
    engines = args.engines.split(",")
    if args.device == "cuda":
        engines = [e for e in engines if e != "planner"]
    env = dict(os.environ)
    env.pop("PLANNER_COSTS", None)  # the default a user gets: measured on this host
    if args.cold:
        root = Path(tempfile.mkdtemp(prefix="bench-first-step-"))
        env["PLANNER_CACHE"] = str(root / "planner")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    elif args.new_host:
        env["PLANNER_CACHE"] = new_host()
    else:  # a cache of the bench's own: what other work builds meanwhile is not counted
        from planner.io.write import cache_root

        env["PLANNER_CACHE"] = args.cache or str(cache_root().parent / "planner-bench-first-step")
    from bench.bench_neighbours import neighbours

    busy = neighbours(args.neighbours) if args.neighbours else []
    print(f"load average before: {os.getloadavg()}; neighbours: {args.neighbours}; "
          f"cold: {args.cold}; device: {args.device}", flush=True)
    try:
        for workload in args.workloads.split(","):
            steps = args.text_steps if workload == "text" else 0
            rows = []
            for engine in engines:
                if args.new_host:  # each engine's first process on a host of its own
                    env["PLANNER_CACHE"] = new_host()
                rows.append(run_once(workload, engine, steps, args.quick, env, args.device,
                                     args.declare))
                print(f"  {workload} {engine}: {rows[-1]}", flush=True)
            print(table(f"{workload} (one process each)", rows), flush=True)
        if args.restarts > 1:
            rows = []
            for engine in engines:
                if args.new_host:
                    env["PLANNER_CACHE"] = new_host()
                runs = [run_once("cnn", engine, 0, args.quick, env, args.device)
                        for _ in range(args.restarts)]
                firsts = [f"{r['first_step_s']:.1f} ({r['after_import_s']:.1f})"
                          if "error" not in r else "error" for r in runs]
                built = [str(r.get("built", "-")) for r in runs]
                rows.append(f"| {engine} | {' / '.join(firsts)} | {' / '.join(built)} |")
                print(f"  restarts {engine}: {firsts} built {built}", flush=True)
            print(f"\ncnn, {args.restarts} fresh processes in a row\n| engine | first step (s),"
                  f" each process (after the engine's imports) | packages built, each |\n"
                  f"| --- | --- | --- |")
            print("\n".join(rows))
    finally:
        for p in busy:
            p.terminate()
    print(f"\nload average after: {os.getloadavg()}; median not taken: one run per cell "
          f"(each run is minutes on 2 cores)", flush=True)


if __name__ == "__main__":
    main()
