"""nn.Modules trained by planner.torch's executor, by PyTorch eager, under torch.compile (Inductor)
and under torch.compile(backend="planner"), each engine in a process of its own (issue 36:
ahead of torch.compile on real modules; issue 59: the backend beside them).

    python bench/bench_vs_compile.py [--models mobilenet_v2,resnet18,transformer_encoder]
                                     [--rounds 3] [--steps 15] [--costs in-step|measured]
                                     [--loop-work]
    python bench/bench_vs_compile.py --models fresh   # the seven of issue 46

Why a process each: in one process the executor and PyTorch share one libgomp (torch's, loaded
first), and once the executor's lanes have started their OpenMP teams the process holds more
libgomp threads than CPUs, so libgomp cuts every team's spinning short and each parallel region
wakes sleeping workers: on a 2-core VM PyTorch's eager mobilenet_v2 step went from 32 to 80 ms
and ours from 27 to 35 (bench/RESULTS.md). bench/bench_neighbours.py measures the engines
beside neighbour processes; this bench on the quiet machine, each run in a process of its own.

Each round runs every model's engines one after another (ours, eager, compile, backend,
backend+step: the optimizer step compiled by the backend too; the
next round in the reverse order), each in a fresh process (bench/step_process.py) that builds
(or, for compile and backend, compiles) it, warms it up and times --steps steps; the table
gives medians over rounds of each run's median step, and the 1-minute load average before,
after each round and after. Our executor runs its plan's main schedule, priced by an in-step
profile of the module (planner.torch's `costs="in-step"`) taken in the first round and
kept for the others, or with `--costs measured` by planner.torch's default (each signature
measured once per host and kept in $PLANNER_CACHE). Models: bench/cpu_modules.py (SGD, lr 0.01,
2 threads on the 2-core hosts); `fresh` names its FRESH seven (tests/importers/fresh_models.py
at bench sizes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from step_process import StepProcess  # noqa: E402

ENGINES = ("ours", "eager", "compile", "backend", "backend+step")


def engine_step(label: str, engine: str, folder: Path, costs: str = "in-step",
                loop_work: bool = False, threads: int | None = None,
                backend_costs: str | None = None):
    """One engine of one module, warmed up, for a StepProcess, with a report of its first
    step's seconds and for ours its step's work (engine_parts)."""
    step, first, work, _ = engine_parts(label, engine, folder, costs, loop_work, threads,
                                        backend_costs)
    return step, lambda: f"{first:.3f} {work}"


def engine_parts(label: str, engine: str, folder: Path, costs: str = "in-step",
                 loop_work: bool = False, threads: int | None = None,
                 backend_costs: str | None = None):
    """One engine of one module, warmed up: (its step, its first step's seconds, for ours
    step_work of its plan and its trainer; "" and None for the others). The first step's
    seconds: building or compiling included (for ours the trainer's planning, building
    and first step; for compile Inductor's compile and first step; for backend
    torch.compile(backend="planner")'s, priced by the planner's default measured costs).
    Ours is bench_neighbours.module_trainer's executor on its plan's main schedule,
    priced by `costs`; eager, compile and backend are the user's own loop (SGD, zero_grad,
    backward, step: cpu_modules.eager_step), the last two with `torch.compile(loss_fn)` and
    `torch.compile(loss_fn, backend="planner")`; backend+step compiles `opt.step` by the
    backend too (PyTorch's compiled-optimizer pattern). With `loop_work` every engine's step
    begins with a PyTorch op of a user's loop: the batch scaled (a DataLoader's normalisation),
    which PyTorch runs on its OpenMP team where the batch exceeds its grain size (32768
    elements: the nn.Module table's batches). `threads`: PyTorch's team (torch.set_num_threads)
    for every engine but ours; None: the host's CPUs, PyTorch's default. `backend_costs`: the
    backend's options={"costs": ...}; None: its default (what this host kept, the rest
    measured by a child in the background and planned again between steps)."""
    import time

    start = time.perf_counter()
    work = ""
    if engine == "ours":
        from bench_neighbours import module_trainer

        t, inputs, y = module_trainer(label, folder, costs)  # its plan's main schedule
        step = lambda: t.step(*inputs, y)  # noqa: E731
        step()
        work = step_work(t.plan)
    else:  # the module's own loop, after one step (torch.compile's compile in it)
        import torch
        from bench_neighbours import SGD
        from cpu_modules import eager_step, example

        import planner.torch  # noqa: F401  (the backend, where the entry point is not installed)

        module, inputs, y, loss = example(label)
        torch.set_num_threads(threads or os.cpu_count() or 1)
        step = eager_step(module, inputs, y, loss, SGD.lr, compiled=engine != "eager",
                          backend="planner" if engine.startswith("backend") else "inductor",
                          warm=1, compiled_step=engine == "backend+step",
                          options=({"costs": backend_costs} if backend_costs
                                   and engine.startswith("backend") else None))
    if loop_work:
        import torch

        batch, planned = inputs[0], step

        def step():
            torch.mul(batch, 2)  # the user's loop: the next batch prepared by PyTorch
            planned()
    first = time.perf_counter() - start
    # The backend's first calls measure its two ways of running (planner/torch/lane_choice.py:
    # a warm-up and MEASURED calls each): its steady state starts after them.
    from planner.torch.lane_choice import MEASURED

    for _ in range(3 + (2 * (MEASURED + 1) if engine.startswith("backend") else 0)):
        step()
    return step, first, work, t if engine == "ours" else None


def step_work(plan) -> str:
    """'FLOPs compute-seconds' of a step's plan on this host (planner.report.roofline): the
    step's FLOPs, and the seconds they take at the host's peak of each op's math type. Every
    engine of a module computes the same step, so one plan prices the work of all four."""
    from planner.report.roofline import roofline
    from planner.target.presets import load_target

    r = roofline(plan, load_target("host"))
    return f"{r.flops:.6g} {r.compute_seconds:.6g}"


def measure(label: str, engine: str, steps: int, folder: Path, costs: str = "in-step",
            loop_work: bool = False) -> tuple[float, float, list[float]]:
    """(median step, first step) in seconds, of `steps` steps in a fresh process, and for ours
    the step's [FLOPs, compute seconds at peak] (step_work)."""
    run = StepProcess(engine_step, label, engine, folder, costs, loop_work,
                      what=f"{label} {engine}")
    try:
        first, *work = (float(v) for v in run.report().split())
        return statistics.median(run.step() for _ in range(steps)), first, work
    finally:
        run.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mobilenet_v2,resnet18,transformer_encoder")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--costs", choices=("in-step", "measured"), default="in-step",
                    help="what our plans are priced with: an in-step profile of the module, or "
                         "planner.torch's default (measured per signature, kept per host)")
    ap.add_argument("--loop-work", action="store_true",
                    help="every engine's step begins with a PyTorch op of a user's loop (the "
                         "batch scaled), timed with it")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help=f"which engines to run (of {', '.join(ENGINES)})")
    args = ap.parse_args()
    engines = tuple(e for e in ENGINES if e in args.engines.split(","))
    if not engines or set(args.engines.split(",")) - set(ENGINES):
        sys.exit(f"--engines: a comma-separated subset of {', '.join(ENGINES)}")
    from cpu_modules import FRESH, MODULES

    models = [m for label in args.models.split(",")
              for m in (FRESH if label == "fresh" else (label,))]
    for label in models:
        if label not in MODULES and label not in FRESH:
            sys.exit(f"--models: unknown model {label!r} (one of {', '.join(MODULES)}, "
                     f"{', '.join(FRESH)} or fresh)")
    load_before = os.getloadavg()[0]
    runs: dict[tuple[str, str], list[float]] = {}
    firsts: dict[tuple[str, str], list[float]] = {}
    works: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-vs-compile-") as work:
        for r in range(args.rounds):
            for label in models:
                # alternating: each round's engines in the other order
                for engine in engines if r % 2 == 0 else engines[::-1]:
                    step, first, flops = measure(label, engine, args.steps,
                                                 Path(work) / label, args.costs,
                                                 args.loop_work)
                    if flops:
                        works[label] = flops
                    runs.setdefault((label, engine), []).append(step)
                    firsts.setdefault((label, engine), []).append(first)
                print(f"round {r + 1}/{args.rounds}: {label} done, load average "
                      f"{os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    ms = {k: statistics.median(v) * 1e3 for k, v in runs.items()}
    print(f"{os.cpu_count()} logical CPUs; load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; medians of {args.rounds} rounds of {args.steps} "
          f"steps, each engine in its own process; ours priced by {args.costs} costs; "
          f"{'a PyTorch op of the loop before each step; ' if args.loop_work else ''}"
          f"backend: torch.compile(backend='planner'), measured costs")
    ratios = [(a, b) for a, b in (("eager", "ours"), ("compile", "ours"), ("compile", "backend"))
              if a in engines and b in engines]
    print(f"{'module':22s} " + " ".join(f"{e + ' ms':>13s}" for e in engines) + " " +
          " ".join(f"{a + '/' + b:>16s}" for a, b in ratios))
    for label in models:
        print(f"{label:22s} " + " ".join(f"{ms[label, e]:13.1f}" for e in engines) + " " +
              " ".join(f"{ms[label, a] / ms[label, b]:16.2f}" for a, b in ratios))
    if works:  # the step's FLOPs come from ours' plan
        print("achieved GFLOP/s (the step's FLOPs / its median step) and share of the host's "
              "peak (the FLOPs' seconds at the peak of each op's math type / the step):")
        print(f"{'module':22s} {'GFLOP':>7s} " + " ".join(f"{e:>14s}" for e in engines))
        for label in models:
            flops, at_peak = works[label]
            print(f"{label:22s} {flops / 1e9:7.4g} " + " ".join(
                f"{flops / ms[label, e] / 1e6:7.1f} {at_peak * 1e3 / ms[label, e]:6.1%}"
                for e in engines))
    print("first step, s (building or compiling included; median of rounds; the first round "
          "also measures kernels and builds the runtime where nothing is cached):")
    print(f"{'module':22s} " + " ".join(f"{e:>12s}" for e in engines))
    for label in models:
        print(f"{label:22s} " + " ".join(
            f"{statistics.median(firsts[label, e]):12.2f}" for e in engines))
    print("each run's median step, ms, in round order:")
    for (label, engine), times in runs.items():
        print(f"  {label:22s} {engine:8s} " + " ".join(f"{t * 1e3:6.1f}" for t in times))

if __name__ == "__main__":
    main()
