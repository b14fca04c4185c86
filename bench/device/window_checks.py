"""What the device tests leave out, in one process on a lent GPU (about 2-4 minutes once the
CUDA runtime is built; call 1 of bench/device/README.md): per case, the plan made for this
GPU, built and run

  variants    the plan's streams, one stream, CUDA graph on the plan's streams and on one
              (and for a budgeted plan: the same graph planned without the budget, the
              reference its results must match)
  numerics    loss and every updated parameter after one step, each variant against the
              one-stream run (max rel. error per tensor); the streams run repeated 3 times
              from the same state: a spread larger than the one-stream run's own is a race
  memory      cudaMemGetInfo before load, after load, after a step (bytes taken) against the
              plan's arena; what lies outside it (the streams' library handles, cuDNN's and
              cuBLAS's first-use allocations, unplanned scratch)
  time        median step (ms) of each variant over --steps after 2 warm-ups (events, the
              executor's own step_seconds) and host wall clock

Cases: resnet-18 b64 fp32 (one stream); the same under a memory budget (offloads and
prefetches on copy streams), and under one with offload off (recomputes); lstm b20 (several
compute streams); resnet-18 b64 bf16-mixed and fp16-mixed (against the fp32 run's loss);
gpt (a decoder, its MatMuls on cuBLAS). Writes a JSON line per case to --out and prints each
case's lines as it ends (a call cut short keeps the cases it finished).

    python bench/device/window_checks.py --out $OUT/window_checks.json [--cases ...]
    python bench/device/window_checks.py --dry-run [--no-build] --out /tmp/wc.json

--dry-run plans (and unless --no-build, builds) every case for the h100-80gb preset, no GPU
needed: what would run, so that no device minute goes to a planning or build error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from codegen.build import build  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.frontend.autodiff import make_training_graph  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.memory import InfeasibleBudget, MemoryOptions  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.target.presets import load_target  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

SGD = Optimizer(kind="sgd", lr=0.01)
CASES = {  # most informative first: a call cut short keeps these
    "r18_budget": ("resnet", dict(batch=64, depth=18), "fp32", 0.62),  # x the free arena
    "lstm": ("lstm", dict(batch=20), "fp32", None),
    "r18_bf16": ("resnet", dict(batch=64, depth=18), "bf16-mixed", None),
    "r18_bf16_budget": ("resnet", dict(batch=64, depth=18), "bf16-mixed", 0.62),
    "r18_recompute": ("resnet", dict(batch=64, depth=18), "fp32", (0.75, dict(offload=False))),
    "r18_fp16": ("resnet", dict(batch=64, depth=18), "fp16-mixed", None),
    "gpt": ("gpt", dict(batch=8, seq=256, dim=512, heads=8, layers=4, vocab=8192), "fp32", None),
    "r18": ("resnet", dict(batch=64, depth=18), "fp32", None),
}


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def worst(got: dict, ref: dict) -> tuple[float, str]:
    errs = [(rel(got[k], ref[k]), k) for k in ref if k in got]
    return max(errs) if errs else (float("nan"), "")


def one_step(module, graph, **options):
    """(loss, params after one step, stats) from the seed-0 state and seed-1 feeds."""
    rt = getattr(module, "_rt", None)
    free0 = rt.device_memory(0)[0] if rt else None
    ex = module.Executor(**options)
    ex.load_params(init_params(graph, seed=0))
    free1 = rt.device_memory(0)[0] if rt else None
    out = ex.step(random_feeds(graph, seed=1))
    free2 = rt.device_memory(0)[0] if rt else None
    s = ex.stats()
    mem = None if free0 is None else {"load": free0 - free1, "after_step": free0 - free2}
    return float(np.asarray(out["loss"]).ravel()[0]), ex.params(), s, mem, ex


def timed(ex, graph, steps: int) -> dict:
    feeds = random_feeds(graph, seed=1)
    for _ in range(2):
        ex.step(feeds)
    dev, host = [], []
    for _ in range(steps):
        t = time.perf_counter()
        ex.step(feeds)
        host.append(time.perf_counter() - t)
        dev.append(ex.stats()["step_seconds"])
    return {"device_ms": 1e3 * statistics.median(dev), "host_ms": 1e3 * statistics.median(host),
            "spread_ms": 1e3 * (max(dev) - min(dev))}


def make_plan(case: str, target):
    name, size, precision, budget = CASES[case]
    graph = make_training_graph(zoo(name, **size), SGD, precision=precision)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        free = plan(graph, target)
        if budget is None:
            return graph, free, None
        first, extra = budget if isinstance(budget, tuple) else (budget, {})
        for f in (first, 0.7, 0.8, 0.9):
            try:
                b = int(free.summary.memory.arena_bytes * f)
                return graph, plan(graph, target, options=PlanOptions(
                    memory=MemoryOptions(budget_bytes=b, **extra))), free
            except InfeasibleBudget:
                continue
    raise RuntimeError(f"{case}: no feasible budget under the free arena")


def same_algorithms(free, budgeted):
    """`free` with each convolution on `budgeted`'s algorithm where that one's workspace fits
    the bytes `free` gave it; None when the two already agree."""
    theirs = {c.node: c for c in budgeted.memory.convs}
    convs = tuple(c.model_copy(update={"algorithm": theirs[c.node].algorithm})
                  if c.node in theirs and theirs[c.node].workspace_bytes <= c.workspace_bytes
                  else c for c in free.memory.convs)
    if convs == free.memory.convs:
        return None
    return free.model_copy(update={"memory": free.memory.model_copy(update={"convs": convs})})


def run_case(case: str, target, tmp: Path, steps: int, dry: bool, fp32_loss: dict,
             build_it: bool = True) -> dict:
    graph, p, free = make_plan(case, target)
    row = {"case": case, "ops": len(p.ops), "streams": sorted({o.stream for o in p.ops}),
           "inserted": [o.kind for o in p.memory.ops] if p.memory else [],
           "arena_mib": p.summary.memory.arena_bytes / 2**20,
           "predicted_ms": p.summary.step_seconds * 1e3}
    same = None
    if free is not None:
        row["unbudgeted_arena_mib"] = free.summary.memory.arena_bytes / 2**20
        same = same_algorithms(free, p)
        row["algos_differ"] = 0 if same is None else sum(
            a.algorithm != b.algorithm for a, b in zip(free.memory.convs, same.memory.convs,
                                                   strict=True))
    if not build_it:
        return row
    t0 = time.perf_counter()
    module = load(build(render(p, tmp / case)).dir)
    row["build_s"] = time.perf_counter() - t0
    if dry:
        return row
    loss1, ref, s1, mem1, ex1 = one_step(module, graph, streams=False)
    row["loss"] = loss1
    row["memory"] = mem1
    if mem1 is not None:  # device memory taken beyond the arena: handles, libraries, overflow
        mem1["outside_arena"] = mem1["after_step"] - p.summary.memory.arena_bytes
    row["held_mib"] = s1.get("held_bytes", 0) / 2**20
    row["unplanned_scratch"] = s1.get("unplanned_scratch_bytes")
    row["time"] = {"1 stream": timed(ex1, graph, steps)}
    del ex1
    # one-stream run-to-run spread (cuDNN's non-deterministic algorithms), then streams x3
    rerun = one_step(module, graph, streams=False)
    base = worst(rerun[1], ref)[0]
    runs = [one_step(module, graph) for _ in range(3)]
    # The handles of the plan's extra kernel streams: what the target's stream_library_bytes
    # holds (both executors made after the process's first, which paid the libraries' loading).
    kernel_streams = len([s for s in row["streams"] if s.startswith("compute") or s == "comm"])
    if kernel_streams > 1 and rerun[3] is not None:
        row["stream_library_bytes"] = (runs[0][3]["after_step"] - rerun[3]["after_step"]) \
            // (kernel_streams - 1)
    del rerun
    row["err"] = {"1 stream rerun": base,
                  "streams": max(worst(r[1], ref)[0] for r in runs),
                  "streams loss": max(rel(r[0], loss1) for r in runs)}
    row["time"]["streams"] = timed(runs[-1][4], graph, steps)
    del runs
    g = one_step(module, graph, cuda_graph=True)
    row["err"]["graph"] = worst(g[1], ref)[0]
    row["time"]["graph"] = timed(g[4], graph, steps)
    del g
    g1 = one_step(module, graph, streams=False, cuda_graph=True)  # graph effect apart from streams
    row["err"]["graph 1 stream"] = worst(g1[1], ref)[0]
    row["time"]["graph 1 stream"] = timed(g1[4], graph, steps)
    del g1
    if free is not None:  # the unbudgeted plan: what offload / recompute must reproduce
        mfree = load(build(render(free, tmp / f"{case}_free")).dir)
        f = one_step(mfree, graph, streams=False)
        row["err"]["vs unbudgeted"] = worst(f[1], ref)[0]
        row["time"]["unbudgeted"] = timed(f[4], graph, steps)
        row["unbudgeted_memory"] = f[3]
        del f
        # The same unbudgeted plan on the budget plan's convolution algorithms (where their
        # workspace fits the unbudgeted one's): what is left of `vs unbudgeted` is then the
        # offloads, prefetches and recomputes alone, not cuDNN's other summation orders.
        if same is not None:
            ms = load(build(render(same, tmp / f"{case}_free_same")).dir)
            s_ = one_step(ms, graph, streams=False)
            row["err"]["vs unbudgeted, same algos"] = worst(s_[1], ref)[0]
            del s_
    if CASES[case][2] == "fp32":
        fp32_loss[CASES[case][0]] = loss1
    elif CASES[case][0] in fp32_loss:
        row["err"]["loss vs fp32"] = rel(loss1, fp32_loss[CASES[case][0]])
    return row


def table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        if "error" in r:
            out.append(f"{r['case']}: FAILED {r['error']}")
            continue
        head = (f"{r['case']}: {r['ops']} ops, streams {','.join(r['streams'])}, "
                f"inserted {len(r['inserted'])}, arena {r['arena_mib']:.0f} MiB, "
                f"predicted {r['predicted_ms']:.2f} ms"
                + (f", build {r['build_s']:.0f} s" if "build_s" in r else "")
                + (f" (unbudgeted arena {r['unbudgeted_arena_mib']:.0f} MiB, "
                   f"{r['algos_differ']} convolutions on other algorithms)"
                   if "unbudgeted_arena_mib" in r else ""))
        out.append(head)
        if "time" not in r:
            continue
        m = r["memory"] or {}
        out.append(f"  memory taken at load {m.get('load', 0) / 2**20:.0f} MiB, after a step "
                   f"{m.get('after_step', 0) / 2**20:.0f} MiB, of it outside the arena "
                   f"{m.get('outside_arena', 0) / 2**20:.0f} MiB (held {r['held_mib']:.0f}, "
                   f"unplanned scratch {r['unplanned_scratch']})"
                   + (f"; unbudgeted plan took {r['unbudgeted_memory']['after_step'] / 2**20:.0f}"
                      " MiB" if r.get("unbudgeted_memory") else ""))
        if "stream_library_bytes" in r:
            out.append(f"  stream_library_bytes (each extra kernel stream's handles): "
                       f"{r['stream_library_bytes']} ({r['stream_library_bytes'] / 2**20:.1f} MiB)")
        out.append("  errors: " + ", ".join(f"{k} {v:.1e}" for k, v in r["err"].items()))
        out.append("  step ms (device / host / spread): " + "; ".join(
            f"{k} {v['device_ms']:.2f}/{v['host_ms']:.2f}/{v['spread_ms']:.2f}"
            for k, v in r["time"].items()))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default="window_checks.json")
    ap.add_argument("--dry-run", action="store_true",
                    help="plan and build for the h100-80gb preset; run nothing (no GPU needed)")
    ap.add_argument("--no-build", action="store_true", help="with --dry-run: plan only")
    a = ap.parse_args()
    unknown = [c for c in a.cases.split(",") if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if a.no_build and not a.dry_run:
        raise SystemExit("--no-build is for --dry-run")
    target = load_target("h100-80gb" if a.dry_run else "gpu")
    failed = 0
    rows, fp32_loss = [], {}
    with tempfile.TemporaryDirectory() as tmp, open(a.out, "w") as log:
        for case in a.cases.split(","):
            try:
                row = run_case(case, target, Path(tmp), a.steps, a.dry_run, fp32_loss,
                               not a.no_build)
            except Exception as e:  # noqa: BLE001 - one case's failure must not lose the rest
                traceback.print_exc()
                row = {"case": case, "error": f"{type(e).__name__}: {str(e)[:300]}"}
                failed += 1
            rows.append(row)
            log.write(json.dumps(row, default=str) + "\n")
            log.flush()
            print(table([row]), flush=True)  # as each case ends: a call cut short keeps them
    if failed:
        raise SystemExit(f"{failed} case(s) failed")


if __name__ == "__main__":
    main()
