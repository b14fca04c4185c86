"""A training step of the generated executor and of PyTorch eager on the same cores, with N
neighbour processes each running a 2-thread BLAS loop (issue 36: steady under load).

    python bench/bench_neighbours.py [--models lstm,resnet-50,gpt,mobilenet_v2,resnet18,
                                              transformer_encoder]
                                     [--neighbours 0,2,4,6,loader2] [--compile]
                                     [--costs in-step|analytical|measured]
                                     [--rounds 3] [--steps 5] [--json out.json]

bench/bench_under_load.py compares OpenMP wait policies against spinning neighbours; this one
counts neighbours doing what a machine's other jobs do: numpy float32 512x512 matmuls under
threadpoolctl limits=2; `loaderW` is a torch DataLoader of W worker processes preparing image
batches (crop, flip, blur, normalise in numpy), one drawn before each step as a training loop
does (the batches are not the model's inputs: the bench feeds its own). mobilenet_v2 and
transformer_encoder are nn.Modules (bench/cpu_modules.py) that planner.torch imports, plans
and builds, against the module itself in eager; the other models are zoo graphs, whose eager
column is their torch translation (bench/torch_baseline.py). Neighbours start before and stop
after each measurement; in each round every N is measured, the engines interleaved, each in a
process of its own (in one process PyTorch and the executor share one libgomp, and beside the
executor's OpenMP teams libgomp cut every team's spinning short: PyTorch's eager mobilenet_v2
step went from 32 to 80 ms, bench/results/2026-11-25-vectorized-loops.md): ours
(the adaptive executor, `set_variant(None)`: it chooses between the plan's main schedule and
its variants for fewer free cores by what it measures, so it gets ADAPT_STEPS steps under the
new neighbours first), ours main (the default executor since issue 51: the main schedule
whatever the load, the same bits every run) and eager. The table shows medians over rounds of
each round's median step and the 1-minute load average at each measurement, and which
schedule the adaptive executor ran and why. Plans are priced by an in-step profile taken on the
quiet machine before the neighbours start (what `planner profile --in-step` measures;
planner.torch's `costs="in-step"`), with `--costs measured` as a plan of this host is by
default (each signature measured once per host and kept: codegen.profiling.host_measured), or
with `--costs analytical` by the analytical cost model. Progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cpu_strategies import SGD  # noqa: E402
from cpu_modules import FRESH, MODULES  # noqa: E402
from step_process import StepProcess  # noqa: E402
from torch_baseline import torch_trainer  # noqa: E402

from codegen.profiling import profile_in_step, warmed_executor  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.pipeline import plan  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

# The eager column runs the zoo graph through the torch translator (bench/torch_baseline.py).
# Steps the adaptive executor runs under new neighbours before it is timed: enough to notice
# them (3 measured steps) and to measure a variant or two (choice.h).
ADAPT_STEPS = 12

MODELS = {
    "lstm": ("lstm", dict(batch=16, seq=20, hidden=128, layers=2, vocab=1000)),
    "resnet-50": ("resnet", dict(depth=50, batch=4, image=64, width=0.25, classes=100)),
    # the strategies table's ResNet-50 (bench_cpu_strategies.py), issue 60's roofline line
    "resnet-50-b32": ("resnet", dict(depth=50, batch=32, image=64, width=0.25, classes=100)),
    "gpt": ("gpt", dict(batch=8, seq=64, dim=128, heads=4, layers=2, vocab=512)),
    # the strategies table's DCGAN (bench_cpu_strategies.py): its roofline and variants
    "dcgan": ("dcgan", dict(batch=32)),
}
LOADER_BATCH = 16


def blas_loop() -> None:
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    with threadpool_limits(limits=2):
        while True:
            a = (a @ a) * np.float32(1e-3)


def neighbours(n: int) -> list[mp.Process]:
    procs = [mp.Process(target=blas_loop, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs


class Images:
    """A map-style dataset whose items cost what image decoding and augmentation cost: a
    random 3x96x96 image cropped to 64x64, maybe flipped, blurred and normalised."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, k: int):
        rng = np.random.default_rng(k)
        img = rng.random((3, 96, 96), dtype=np.float32)
        top, left = rng.integers(0, 32, 2)
        img = img[:, top:top + 64, left:left + 64]
        if k % 2:
            img = img[:, :, ::-1]
        for _ in range(4):  # a separable 3-tap blur, four times
            img = (img[:, :, :-2] + img[:, :, 1:-1] + img[:, :, 2:]) / 3
            img = (img[:, :-2, :] + img[:, 1:-1, :] + img[:, 2:, :]) / 3
        return ((img - img.mean()) / (img.std() + 1e-6)).astype(np.float32), k % 10


def loader(workers: int):
    """An iterator over batches from a DataLoader of `workers` processes (torch's own)."""
    from torch.utils.data import DataLoader

    return iter(DataLoader(Images(), batch_size=LOADER_BATCH, shuffle=True, num_workers=workers,
                           persistent_workers=True, prefetch_factor=2))


def load(spec: str) -> tuple[list[mp.Process], object]:
    """The neighbour processes of `spec` (N: BLAS loops; loaderW: a DataLoader's W workers)
    and the batch iterator a step draws from first (None for BLAS loops)."""
    if spec.startswith("loader"):
        batches = loader(int(spec.removeprefix("loader")))
        next(batches)  # the workers are up
        return [], batches
    return neighbours(int(spec)), None


def engine_names(compiled: bool) -> tuple[str, ...]:
    return ("ours", "ours main", "eager") + (("compile",) if compiled else ())


def module_engine(label: str, folder: Path, engine: str, costs: str):
    """One engine of an nn.Module (bench/cpu_modules.py): planner.torch's executor of it (the
    default, or pinned to the main schedule), or the module itself in PyTorch eager or under
    torch.compile. Returns (step, executor or None)."""
    import torch
    from cpu_modules import eager_step, example

    if engine not in ("ours", "ours main"):
        module, inputs, y, loss = example(label)
        torch.set_num_threads(os.cpu_count() or 1)
        return eager_step(module, inputs, y, loss, SGD.lr, compiled=engine == "compile"), None
    t, inputs, y = module_trainer(label, folder, costs)
    if engine == "ours":
        t.executor.set_variant(None)  # adaptive: switches by load
    return (lambda: t.step(*inputs, y)), t.executor


def module_trainer(label: str, folder: Path, costs: str):
    """planner.torch's trainer of an nn.Module (bench/cpu_modules.py), SGD, priced by `costs`
    (in-step: one profile in `folder`, taken by the first trainer there and read by the
    others; analytical; or measured, the trainer's default), with the batch it steps on:
    (trainer, inputs, labels)."""
    import torch
    from cpu_modules import example

    from planner.torch import trainer

    module, inputs, y, loss = example(label)
    torch.set_num_threads(os.cpu_count() or 1)
    priced = costs
    if costs == "in-step":
        priced = folder / "costs.json" if (folder / "costs.json").exists() else "in-step"
    t = trainer(module, inputs, loss=loss, labels=y, optimizer="sgd", lr=SGD.lr,
                out_dir=folder, costs=priced)
    return t, inputs, y


def zoo_engine(label: str, folder: Path, engine: str, costs: str):
    """One engine of a zoo graph: the generated executor (default or pinned to the main
    schedule), or its torch translation (bench/torch_baseline.py) eager or compiled."""
    name, params = MODELS[label]
    forward = zoo(name, **params)
    if engine not in ("ours", "ours main"):
        return torch_trainer(forward, SGD.lr, os.cpu_count() or 1,
                             compiled=engine == "compile"), None
    from planner.costs.records import CostTable

    graph = prepare(forward, GraphOptions(optimizer=SGD))
    target = detect()
    table = None
    if costs == "in-step":
        path = folder / "costs.json"
        if path.exists():
            table = CostTable.model_validate_json(path.read_text())
        else:
            table = profile_in_step(graph, target, folder / "profile")
            path.write_text(table.to_json())
    elif costs == "measured":
        from codegen.profiling import host_measured

        table = host_measured(graph, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, target, table)  # the default plan, with its variants for fewer cores
    feeds = random_feeds(graph, seed=1)
    ex = warmed_executor(p, folder, init_params(graph, seed=0), feeds)
    if engine == "ours" and hasattr(ex, "set_variant"):
        ex.set_variant(None)  # adaptive: switches by load
    return (lambda: ex.step(feeds)), ex


def engine(label: str, folder: Path, name: str, costs: str):
    """(step, report) of one engine, for a StepProcess: report() says which schedule the
    adaptive executor ran and why ("" for PyTorch)."""
    make = module_engine if label in MODULES or label in FRESH else zoo_engine
    step, ex = make(label, folder, name, costs)

    def report() -> str:
        sched = ex.stats().get("schedule") if ex is not None else None
        return (f"ran {sched['running']} ({sched['switches']} switches so far): "
                f"{sched['reason']}" if sched else "")

    return step, report


def measure(label: str, folder: Path, counts: list[str], rounds: int, steps: int,
            compiled: bool = False, costs: str = "in-step") -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    # One after another: the first executor's build and profile serve the second.
    runs = {e: StepProcess(engine, label, folder, e, costs, what=f"{label}: {e}")
            for e in engine_names(compiled)}
    times = {(n, e): [] for n in counts for e in runs}
    loads = {n: [] for n in counts}
    ran = {}
    try:
        for r in range(rounds):
            for n in counts:
                procs, batches = load(n)
                try:
                    time.sleep(0.5 if n != "0" else 0.0)
                    for e, run in runs.items():
                        # Warm-up under these neighbours: the adaptive executor notices them
                        # and measures its schedules (choice.h) before the timed steps.
                        for _ in range(ADAPT_STEPS if e == "ours" else 1):
                            if batches is not None:
                                next(batches)
                            run.step()
                        t = []
                        for _ in range(steps):
                            if batches is not None:
                                next(batches)  # the loop's next batch, not timed
                            t.append(run.step())
                        times[n, e].append(float(np.median(t)))
                    loads[n].append(os.getloadavg()[0])
                    ran[n] = runs["ours"].report()
                finally:
                    for p in procs:
                        p.kill()
                        p.join()
                    del batches  # a DataLoader's workers stop with its iterator
                print(f"{label}: round {r + 1}/{rounds}, {n} neighbours done", file=sys.stderr,
                      flush=True)
    finally:
        for run in runs.values():
            run.close()
    return [{"model": label, "neighbours": n,
             **{e: float(np.median(times[n, e])) for e in runs},
             "load": float(np.median(loads[n])), "schedule": ran.get(n, "")}
            for n in counts]


def table(rows: list[dict]) -> str:
    has_main = any("ours main" in r for r in rows)
    has_compile = any("compile" in r for r in rows)
    head = (f"{'model':<20}{'N':>8}{'ours ms':>10}"
            + (f"{'main ms':>10}" if has_main else "")
            + f"{'eager ms':>10}{'eager/ours':>12}"
            + (f"{'compile ms':>12}{'compile/ours':>14}" if has_compile else "")
            + f"{'load':>7}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['model']:<20}{r['neighbours']:>8}{r['ours'] * 1e3:>10.1f}"
                     + (f"{r['ours main'] * 1e3:>10.1f}" if has_main else "")
                     + f"{r['eager'] * 1e3:>10.1f}{r['eager'] / r['ours']:>12.2f}"
                     + (f"{r['compile'] * 1e3:>12.1f}{r['compile'] / r['ours']:>14.2f}"
                        if has_compile else "")
                     + f"{r['load']:>7.2f}" + (f"  {r['schedule']}" if r["schedule"] else ""))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="lstm")
    ap.add_argument("--neighbours", default="0,2,4",
                    help="per row: N BLAS-loop neighbours, or loaderW (a DataLoader of W "
                         "workers feeding the loop)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compile", action="store_true",
                    help="also PyTorch under torch.compile (inductor), compiled before timing")
    ap.add_argument("--costs", choices=("in-step", "analytical", "measured"), default="in-step",
                    help="what plans are priced with: an in-step profile on this machine "
                         "(default), the host's kept measurements (the planner's default) or "
                         "the analytical cost model")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    labels = args.models.split(",")
    for label in labels:
        if label not in MODELS and label not in MODULES:
            sys.exit(f"--models: unknown model {label!r} (one of "
                     f"{', '.join([*MODELS, *MODULES])})")
    counts = args.neighbours.split(",")
    for n in counts:
        if not (n.isdigit() or (n.startswith("loader") and n[6:].isdigit())):
            sys.exit(f"--neighbours: {n!r} is neither a count nor loaderW")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-neighbours-") as tmp:
        for label in labels:
            print(f"{label}: planning and building", file=sys.stderr, flush=True)
            rows += measure(label, Path(tmp) / label.replace("-", "_"), counts, args.rounds,
                            args.steps, args.compile, args.costs)
    print(f"{os.cpu_count()} logical CPUs; neighbours: N 2-thread numpy 512x512 matmul loops, or "
          f"loaderW: a DataLoader's W workers (batch {LOADER_BATCH} of 64x64 augmented images); "
          f"median of {args.rounds} rounds x {args.steps} steps")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
