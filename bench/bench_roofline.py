"""How close each model's measured training step comes to this host's limits (issue 60): the
executor's main schedule run, timed, and held against the host's peaks with
planner.report.roofline fed the measured times.

    PYTHONPATH=. python bench/bench_roofline.py [--models resnet-50,mobilenet_v2,...]
                                                [--rounds 5] [--steps 10] [--costs measured]
                                                [--variants]

Per model (bench_neighbours.py's zoo graphs and bench/cpu_modules.py's nn.Modules, SGD), in a
process of its own (bench/step_process.py's reason: one libgomp per process): the plan the
trainer makes by default (`--costs measured`: each signature measured on this host and kept) or
from an in-step profile, built, warmed up, then `--rounds` rounds of `--steps` steps; the step
(the executor's default, adaptive: --variants prints which schedule it ran) is the median of
the rounds' medians, and each op's measured seconds (the executor's `stats()`
over the timed steps) give the per-family figures. Printed per model:

    GFLOP        the step's FLOPs (the op registry's rules, planner.costs.analytical.op_work)
    ms           the measured step
    GFLOP/s      FLOPs / step
    %peak        the FLOPs' seconds at the peak of each op's math type / the step (the host's
                 kept, measured float32 peak: `planner target detect`)
    %sheet       the same against the datasheet-style estimate (cores x clock x SIMD x 2 x 2)
    roof ms      the roofline bound: max(FLOPs at peak, bytes at the measured bandwidth)
    convs/GEMMs/pointwise   each family's share of the peak of the threads its ops ran on

With --variants, each schedule the plan carries (its main one, then the one-lane variants for
fewer cores, planner/memory/variants.py) is also timed, forced with `set_variant`, and the
executor's default (the adaptive rule) beside them, the order alternating round by round:
issue 60's check that no variant beats the main schedule, and that the default runs the
fastest measured.

The machine's load average is printed before and after each model: a number taken at a load
above ~1 per core measures the other jobs too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

DEFAULT = "resnet-50-b32,resnet-50,mobilenet_v2,resnet18,transformer_encoder,lstm,gpt"
FAMILIES = ("convs", "GEMMs", "pointwise")


def _made(label: str, folder: Path, costs: str):
    """(plan, executor, step) of one model's main schedule, priced by `costs`."""
    from bench_cpu_strategies import SGD
    from bench_neighbours import MODELS, module_trainer

    if label not in MODELS:
        t, inputs, y = module_trainer(label, folder, costs)
        return t.plan, t.executor, lambda: t.step(*inputs, y)
    from codegen.profiling import host_measured, profile_in_step, warmed_executor
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.interpret import init_params, random_feeds
    from planner.pipeline import plan
    from planner.target.detect import detect
    from planner.zoo import build as zoo

    name, params = MODELS[label]
    graph = prepare(zoo(name, **params), GraphOptions(optimizer=SGD))
    target = detect()
    table = (profile_in_step(graph, target, folder / "profile") if costs == "in-step"
             else host_measured(graph, target))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, target, table)
    feeds = random_feeds(graph, seed=1)
    ex = warmed_executor(p, folder, init_params(graph, seed=0), feeds)
    return p, ex, lambda: ex.step(feeds)


def _median_step(step, steps: int) -> float:
    import time

    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def schedules_measured(ex, step, rounds: int, steps: int) -> tuple[dict[str, float], list[str]]:
    """Each schedule the executor holds (its main one and the variants for fewer cores: issue
    60's "never slower than its own alternatives"), and the executor's default (adaptive: the
    rule of templates/cpu/runtime/choice.h, its trial of every schedule behind it) -> the
    median over rounds of its median step, the order alternating round by round; and which
    schedule the default ran at the end of each of its rounds. The executor is left on the
    rule."""
    names = [v["name"] for v in ex.variants()] + ["default"]
    runs: dict[str, list[float]] = {n: [] for n in names}
    ran: list[str] = []
    for k in range(rounds):
        for name in names if k % 2 == 0 else names[::-1]:
            ex.set_variant(None if name == "default" else name)
            for _ in range(2):  # the first steps after a switch: the new teams start
                step()
            runs[name].append(_median_step(step, steps))
            if name == "default":
                ran.append(ex.stats()["schedule"]["running"])
    ex.set_variant(None)
    return {n: statistics.median(v) for n, v in runs.items()}, ran


def measure_one(label: str, folder: str, costs: str, rounds: int, steps: int,
                variants: bool = False) -> dict:
    """The measured step and roofline figures of one model (run in a child process)."""
    from planner.report.roofline import roofline
    from planner.target.detect import detect

    warnings.simplefilter("ignore")
    p, ex, step = _made(label, Path(folder), costs)
    for _ in range(2):
        step()
    ex.reset_stats()
    medians = [_median_step(step, steps) for _ in range(rounds)]
    stats = ex.stats()
    ops = {o["name"]: o["seconds"] for o in stats["ops"]}
    target = detect()
    seconds = statistics.median(medians)
    r = roofline(p, target, measured=ops, step_seconds=seconds)
    predicted = roofline(p, target)
    sheet = detect(measure=False).cpu.peak_flops  # the datasheet-style estimate
    return {"flops": r.flops, "seconds": seconds, "predicted": predicted.step_seconds,
            "peak": r.peak_flops, "sheet": sheet, "share": r.peak_share,
            "sheet_share": r.flops / sheet / seconds if seconds else 0.0,
            "bound": r.bound_seconds,
            "families": {f.family: f.peak_share for f in r.families},
            "ran": stats["schedule"]["running"],
            "schedules": schedules_measured(ex, step, rounds, steps) if variants else ({}, [])}


def _child(conn, *args) -> None:
    conn.send(measure_one(*args))


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    import multiprocessing as mp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--costs", choices=("measured", "in-step"), default="measured")
    ap.add_argument("--variants", action="store_true",
                    help="also time each schedule variant against the main schedule")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    print(f"{'model':20s} {'GFLOP':>7s} {'ms':>8s} {'pred ms':>8s} {'GFLOP/s':>8s} "
          f"{'%peak':>6s} {'%sheet':>6s} {'roof ms':>8s} " +
          " ".join(f"{f:>9s}" for f in FAMILIES) + "   load before/after", flush=True)
    peak = sheet = 0.0
    for label in args.models.split(","):
        before = load()
        with tempfile.TemporaryDirectory() as d:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child, args=(child, label, d, args.costs, args.rounds,
                                                    args.steps, args.variants))
            proc.start()
            r = parent.recv()
            proc.join()
        peak, sheet = r["peak"], r["sheet"]
        fam = " ".join(f"{r['families'].get(f, 0.0):9.1%}" for f in FAMILIES)
        print(f"{label:20s} {r['flops'] / 1e9:7.3f} {r['seconds'] * 1e3:8.2f} "
              f"{r['predicted'] * 1e3:8.2f} {r['flops'] / r['seconds'] / 1e9:8.1f} "
              f"{r['share']:6.1%} {r['sheet_share']:6.1%} {r['bound'] * 1e3:8.2f} {fam}   "
              f"{before} / {load()}", flush=True)
        schedules, default_ran = r["schedules"]
        if schedules:
            main_ms = schedules["main"]
            forced = ", ".join(f"{n} {v * 1e3:.2f} ({v / main_ms:.2f})"
                               for n, v in schedules.items())
            print(f"    the default ran {r['ran']}; each schedule forced and the default, "
                  f"alternating (ms, / main): {forced}; the default's rounds ended on "
                  f"{', '.join(default_ran)}", flush=True)
    print(f"host float32 peak {peak / 1e9:.1f} GFLOP/s kept (measured, `planner target "
          f"detect`), datasheet-style estimate {sheet / 1e9:.1f}")


if __name__ == "__main__":
    main()
