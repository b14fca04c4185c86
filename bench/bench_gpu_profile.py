"""Predicted against measured step time on this machine's GPU: each model's training step
(SGD, float32, TF32 off) planned with the analytical cost model and with the cost table that
`planner profile --target gpu` measures here first (every cuDNN algorithm of each
convolution, each generated kernel at every launch configuration, every other op alone).
Both plans are built and run; measured is the median over alternating rounds of each round's
median step, on the GPU (the executor's step events: the feeds' copy excluded, as the plan
does) and on the host's clock (feeds copied in each step).

    python bench/bench_gpu_profile.py [--models resnet50,inception_v3] [--costs-dir DIR]
                                      [--steps 20] [--rounds 3] [--json]
                                      [--precision {fp32,bf16-mixed,fp16-mixed}]

--dry-run (no GPU needed) plans each model for the h100-80gb preset with the analytical model,
builds that plan and counts the signatures a profile would measure.

Needs an NVIDIA GPU, nvcc and the cuda extra. Tables are written to --costs-dir (one per model,
`MODEL.gpu.costs.json`) and resumed from there, so a run cut short by a time limit keeps its
measurements; bench/device/gpu_profile.sh runs it on a lent GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpu import MODELS, SGD  # noqa: E402

from codegen.build import build  # noqa: E402
from codegen.gpu_profiling import GpuProfiler  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.costs import graph_signatures  # noqa: E402
from planner.costs.gpu_profile import profile_gpu  # noqa: E402
from planner.costs.records import CostTable, load_table, save_table  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.pipeline import plan  # noqa: E402
from planner.target.presets import load_target  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402


def profiled(label: str, graph, target, costs_dir: Path, steps: int) -> tuple[CostTable, float]:
    """The model's table on this GPU (resumed from costs_dir), and the seconds profiling took."""
    path = costs_dir / f"{label}.gpu.costs.json"
    table = load_table(path) if path.exists() else CostTable(target=target.name)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="profile-") as work:
        measure = GpuProfiler(target, work, steps=steps, progress=sys.stderr)
        run = profile_gpu(list(graph_signatures(graph, target.gpus[0]).values()), target, measure,
                          table=table, progress=sys.stderr,
                          checkpoint=lambda t: save_table(t, path), bytes_of=measure.bytes_of)
    save_table(run.table, path)
    for key, why in run.failures:
        print(f"not measured: {key}: {why}", file=sys.stderr)
    return run.table, time.perf_counter() - t0


def stepper(module, graph):
    """step() -> (GPU seconds of the step, host seconds of the call)."""
    ex = module.Executor()
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    ex.step(feeds)  # warm-up

    def step() -> tuple[float, float]:
        t0 = time.perf_counter()
        ex.step(feeds)
        return ex.stats()["step_seconds"], time.perf_counter() - t0
    return step


def measure(steppers: dict, steps: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Per plan, (GPU, host) seconds: the median over alternating rounds of round medians."""
    per: dict[str, list[tuple[float, float]]] = {k: [] for k in steppers}
    for _ in range(rounds):
        for k, step in steppers.items():
            times = [step() for _ in range(steps)]
            per[k].append((statistics.median(t[0] for t in times),
                           statistics.median(t[1] for t in times)))
    return {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
            for k, v in per.items()}


def bench_model(label: str, target, costs_dir: Path, steps: int, rounds: int,
                profile_steps: int, precision: str = "fp32") -> dict:
    name, size = MODELS[label]
    graph = prepare(zoo(name, **size), GraphOptions(optimizer=SGD, precision=precision))
    table, profile_s = profiled(table_name(label, precision), graph, target, costs_dir,
                                profile_steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plans = {"analytical": plan(graph, target), "profiled": plan(graph, target, table)}
    with tempfile.TemporaryDirectory() as tmp:
        steppers = {k: stepper(load(build(render(p, Path(tmp) / f"{label}_{k}")).dir), graph)
                    for k, p in plans.items()}
        measured = measure(steppers, steps, rounds)
    rows = {}
    for k, p in plans.items():
        gpu_s, host_s = measured[k]
        predicted = p.summary.step_seconds
        rows[k] = {"predicted_ms": predicted * 1e3, "gpu_ms": gpu_s * 1e3,
                   "host_ms": host_s * 1e3, "error_pct": 100 * (predicted - gpu_s) / gpu_s,
                   "analytical_signatures": p.summary.analytical_signatures,
                   "algorithms": dict(Counter(c.algorithm for c in p.memory.convs)),
                   "blocks": dict(Counter(str(op.block) for op in p.ops if op.block))}
    return {"model": label, "size": size, "precision": precision, "ops": len(graph.nodes),
            "signatures": len(table.entries), "profile_s": profile_s, "plans": rows}


def dry_run(labels: list[str], target, precision: str, costs_dir: Path | None = None,
            tiny: bool = False, no_build: bool = False) -> str:
    """What a run would profile and build, for `target` (a preset: no GPU asked): the
    signatures to profile, those a table kept in `costs_dir` already holds (a run resumes
    from them). `tiny`: bench_gpu.py's TINY sizes; `no_build`: the plan rendered, not built
    (the CUDA runtime's nvcc build takes minutes on 2 cores)."""
    from bench_gpu import TINY

    lines = [f"dry run for target {target.name}, {precision}: nothing is measured"]
    for label in labels:
        name, size = (TINY if tiny else MODELS)[label]
        graph = prepare(zoo(name, **size), GraphOptions(optimizer=SGD, precision=precision))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = plan(graph, target)
        with tempfile.TemporaryDirectory() as tmp:
            rendered = render(p, Path(tmp) / label)
            made = f"renders {len(rendered.files)} files" if no_build else \
                f"builds ({build(rendered).name})"
        signatures = {s.key for s in graph_signatures(graph, target.gpus[0]).values()}
        table = table_name(label, precision)
        path = (costs_dir or Path(".")) / f"{table}.gpu.costs.json"
        kept = (f"{len(signatures & {e.signature.key for e in load_table(path).entries})} kept "
                f"in {path.name}" if costs_dir is not None and path.exists() else "none kept")
        lines.append(f"{label} {size}: {len(signatures)} signatures to profile ({kept}); the "
                     f"analytical plan predicts {p.summary.step_seconds * 1e3:.2f} ms and "
                     f"{made}")
    return "\n".join(lines)


def table_name(label: str, precision: str) -> str:
    return label if precision == "fp32" else f"{label}-{precision}"


def report(rows: list[dict], device: str, load: tuple[str, str]) -> str:
    lines = [f"GPU {device}; load average before {load[0]}, after {load[1]}",
             f"{'model':<22}{'plan':<12}{'predicted ms':>13}{'GPU ms':>10}{'host ms':>10}"
             f"{'error %':>9}  choices"]
    for r in rows:
        for k, p in r["plans"].items():
            choices = ", ".join(f"{a} x{n}" for a, n in sorted(p["algorithms"].items()))
            if p["blocks"]:
                choices += "; block " + ", ".join(f"{b} x{n}" for b, n in
                                                  sorted(p["blocks"].items()))
            lines.append(f"{r['model'] + ' ' + r['precision']:<22}{k:<12}{p['predicted_ms']:>13.2f}"
                         f"{p['gpu_ms']:>10.2f}{p['host_ms']:>10.2f}{p['error_pct']:>+9.1f}  "
                         f"{choices}")
        lines.append(f"{'':<22}({r['ops']} ops, {r['signatures']} signatures profiled in "
                     f"{r['profile_s']:.0f} s)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,inception_v3")
    parser.add_argument("--costs-dir", default=".", type=Path)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile-steps", type=int, default=5,
                        help="executor steps per profiling batch (each op's median)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed", "fp16-mixed"])
    parser.add_argument("--dry-run", action="store_true",
                        help="plan and build for the h100-80gb preset; measure nothing")
    parser.add_argument("--tiny", action="store_true", help="--dry-run at tiny sizes")
    parser.add_argument("--no-build", action="store_true",
                        help="--dry-run: render the plan, do not build it")
    parser.add_argument("--profile-only", action="store_true",
                        help="profile into --costs-dir (resumed, checkpointed) and stop: the "
                             "table kept for the plans of bench_gpu.py --costs-dir")
    args = parser.parse_args()
    labels = args.models.split(",")
    unknown = [m for m in labels if m not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    if args.dry_run:
        print(dry_run(labels, load_target("h100-80gb"), args.precision,
                      args.costs_dir if args.costs_dir != Path(".") else None, args.tiny,
                      args.no_build))
        return
    target = load_target("gpu")  # this machine's GPU; one line and exit 2 without one
    args.costs_dir.mkdir(parents=True, exist_ok=True)
    before = os.getloadavg()
    rows = []
    for label in labels:
        if args.profile_only:
            name, size = MODELS[label]
            graph = prepare(zoo(name, **size), GraphOptions(optimizer=SGD,
                                                            precision=args.precision))
            table, seconds = profiled(table_name(label, args.precision), graph, target,
                                      args.costs_dir, args.profile_steps)
            print(f"{label} {args.precision}: {len(table.entries)} signatures in the table, "
                  f"{seconds:.0f} s", flush=True)
            continue
        rows.append(bench_model(label, target, args.costs_dir, args.steps, args.rounds,
                                args.profile_steps, args.precision))
        print(report(rows[-1:], target.gpus[0].name, ("", "")), file=sys.stderr, flush=True)
    if args.profile_only:
        return
    after = os.getloadavg()
    load = (" ".join(f"{x:.2f}" for x in before), " ".join(f"{x:.2f}" for x in after))
    if args.json:
        print(json.dumps({"device": target.gpus[0].name, "load": load, "models": rows},
                         indent=2, sort_keys=True))
    else:
        print(report(rows, target.gpus[0].name, load))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - a UserError (no GPU) in one line, as the CLI does
        from planner.errors import UserError

        if not isinstance(e, UserError):
            raise
        raise SystemExit(f"bench_gpu_profile: {e}") from None
