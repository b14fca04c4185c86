"""The generated CUDA executor against PyTorch on one GPU: step time of a training step (SGD)
for zoo models, the executor on the plan's streams, on one stream and replayed as a CUDA graph,
and the one-stream plan (strategy uniform) where the planner kept co-running streams,
against PyTorch eager, PyTorch with the whole step captured as a CUDA graph, and torch.compile
(inductor). Float32 everywhere, TF32 off in both, unless --precision says otherwise: in
bf16-mixed (fp16-mixed) our training graph gets the precision policy's planned casts
(planner/frontend/passes/precision.py; fp16-mixed with its dynamic loss scaling) and PyTorch runs
the forward under torch.autocast(device_type="cuda", dtype=torch.bfloat16 (float16)), its mixed
precision (fp16 without a GradScaler: the timing of the kernels, not the update's skip). In
tf32 our graph is marked for TF32 math and PyTorch runs with allow_tf32 on (cuBLAS and cuDNN).
Medians of alternating rounds, with each variant's spread (fastest and slowest step) and, for
ours, the device time of the step (its events) beside the host's clock.

Feeds stay on the device on both sides: ours are CUDA tensors (DLPack), copied device to device
into the arena each step as PyTorch's inputs are read where they lie; "ours host feeds" is the
row with numpy feeds (a pageable host copy of the batch inside the step). --out writes each
model's row as a JSON line as soon as it is measured, so a run cut short keeps the models done.

    python bench/bench_gpu.py [--models inception_v3,resnet50,lstm,wide_deep] [--json]
                              [--out rows.jsonl]
    python bench/bench_gpu.py --models resnet50,inception_v3,lstm,bert --precision bf16-mixed
    python bench/bench_gpu.py --modules tv_resnet50,tv_inception_v3,bert_block,gpt_block
    python bench/bench_gpu.py --modules ... --dry-run      # what it would run; no GPU needed
    python bench/bench_gpu.py --models ... --precision {bf16-mixed,tf32} --dry-run

--models compares with the zoo graph translated node by node to torch calls; --modules with
the models a PyTorch user has (bench/torch_modules.py: torchvision's resnet50 and
inception_v3, BERT and GPT blocks as nn.Modules), exported through ONNX for our side and
trained by PyTorch as they are: eager, the whole step as one CUDA graph, and
torch.compile(mode="max-autotune"). --dry-run exports, imports and plans each module (for
--target, by default the h100-80gb preset) and prints the runs it would time, measuring
nothing; with --models, each zoo model's training graph at --precision is planned likewise.

Needs an NVIDIA GPU, nvcc and the cuda extra (cuDNN, cuBLAS); PyTorch with CUDA for the
baselines. Plans are made for this machine's GPU (`--target gpu`, detected: the executor
refuses a plan for another architecture) unless --target names a preset or target file.
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

from torch_baseline import torch_trainer  # noqa: E402
from torch_modules import MODULES  # noqa: E402

from codegen.build import build  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.schedule.streams import is_compute  # noqa: E402
from planner.target.presets import load_target  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

# The sizes: inception_v3 batch 16, resnet-50 batch 64, lstm batch 20, wide_deep.
MODELS = {
    "inception_v3": ("inception_v3", dict(batch=16)),
    "resnet50": ("resnet", dict(batch=64, depth=50)),
    "lstm": ("lstm", dict(batch=20)),
    "wide_deep": ("wide_deep", dict(batch=256)),
    # BERT-base's encoder (the mixed-precision list: resnet-50, inception_v3, lstm, bert)
    "bert": ("bert", dict(batch=32, seq=128, dim=768, heads=12, layers=12, vocab=30522)),
    # GPT-2 small's decoder at 8 x 512 tokens (the acceptance list: "a gpt")
    "gpt": ("gpt", dict(batch=8, seq=512, dim=768, heads=12, layers=12, vocab=32768)),
}
DEFAULT_MODELS = "inception_v3,resnet50,lstm,wide_deep"
# --tiny (with --dry-run): each model at a size a 2-core machine plans, renders and compiles
# PyTorch's side of in seconds (bench/device/call1.sh --dry-run).
TINY = {
    "inception_v3": ("inception_v3", dict(batch=2, image=75, width=0.125, classes=10)),
    "resnet50": ("resnet", dict(batch=2, depth=50, image=32, width=0.125, classes=10)),
    "lstm": ("lstm", dict(batch=2, seq=4, hidden=32, layers=1, vocab=64)),
    "wide_deep": ("wide_deep", dict(batch=8)),
    "bert": ("bert", dict(batch=1, seq=16, dim=32, heads=2, layers=1, vocab=64)),
    "gpt": ("gpt", dict(batch=1, seq=16, dim=32, heads=2, layers=1, vocab=64)),
}
SGD = Optimizer(kind="sgd", lr=0.01)
# The low type PyTorch's autocast runs for each mixed policy (None: float32).
AUTOCAST = {"fp32": None, "tf32": None, "bf16-mixed": "bfloat16", "fp16-mixed": "float16"}


def on_device(feeds: dict) -> dict:
    """The feeds as CUDA tensors (bfloat16 through its bits: torch reads no ml_dtypes array)."""
    import torch

    out = {}
    for k, v in feeds.items():
        if v.dtype.name == "bfloat16":
            out[k] = torch.from_numpy(v.view("uint16")).to("cuda").view(torch.bfloat16)
        else:
            out[k] = torch.from_numpy(v).to("cuda")
    return out


def executor_runner(module, graph, host_feeds: bool = False, **options):
    """A step of our executor returning its device seconds (the step's events); feeds on the
    device unless `host_feeds`. Two warm-up steps: the eager one and the graph's capture."""
    ex = module.Executor(**options)
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    if not host_feeds:
        feeds = on_device(feeds)
    for _ in range(2):
        ex.step(feeds)

    def run() -> float:
        ex.step(feeds)  # returns the loss: the host waits for the step there
        return ex.stats()["step_seconds"]
    return run


def measure(runners: dict, steps: int, rounds: int) -> dict[str, dict[str, float]]:
    """Per runner, over alternating rounds: the median of the round medians of the host's
    step time (ms), the fastest and slowest step, and the device time's median where the
    runner returns one."""
    host: dict[str, list[float]] = {k: [] for k in runners}
    every: dict[str, list[float]] = {k: [] for k in runners}
    device: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                dev = run()
                times.append(time.perf_counter() - t0)
                if dev is not None:
                    device[name].append(dev)
            host[name].append(statistics.median(times))
            every[name] += times
    out = {}
    for k in runners:
        out[k] = {"ms": 1e3 * statistics.median(host[k]), "min_ms": 1e3 * min(every[k]),
                  "max_ms": 1e3 * max(every[k])}
        if device[k]:
            out[k]["device_ms"] = 1e3 * statistics.median(device[k])
    return out


def op_type_times(module, graph, steps: int = 5) -> dict[str, float]:
    """Per op type, the summed mean time of its ops in a step (each op timed with events on
    one stream), largest first; a convolution type also names the algorithms that ran."""
    ex = module.Executor(streams=False, op_timing=True)
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    for _ in range(steps):
        ex.step(feeds)
    totals: dict[str, float] = {}
    for op in ex.stats()["ops"]:
        key = op["op"] + (f" [{op['algorithm']}]" if "algorithm" in op else "")
        totals[key] = totals.get(key, 0.0) + op["seconds"] * 1e3
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def compile_key(mode: str) -> str:
    """The row's name of torch.compile in `mode` ("default": plain torch.compile)."""
    return "torch.compile" if mode == "default" else f"torch.compile {mode}"


def costs_table(costs_dir: Path | None, label: str, precision: str, as_target: str = ""):
    """The profiled table of `label` at `precision` kept in `costs_dir` (bench_gpu_profile.py's
    name: MODEL[-PRECISION].gpu.costs.json) and its name, or None: ours then plans with the
    modelled algorithms. `as_target`: the table read as that target's (a dry run plans the
    detected GPU's table for a preset)."""
    if costs_dir is None:
        return None, "modelled"
    from planner.costs.records import load_table

    path = costs_dir / f"{label if precision == 'fp32' else f'{label}-{precision}'}.gpu.costs.json"
    if not path.exists():
        return None, "modelled"
    table = load_table(path)
    if as_target:
        table = table.model_copy(update={"target": as_target})
    return table, f"{path.name} ({len(table.entries)} signatures)"


def ours(label: str, graph, target, table, folder: Path) -> tuple[dict, dict, dict]:
    """Our executor's runners (the plan's streams, one stream, the one-stream plan where it
    differs, CUDA graphs, host feeds), the row's plan fields, and the per-op-type times."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, target, table)
        # The one-stream plan (strategy uniform) the co-running guard compared with.
        one = plan(graph, target, table, PlanOptions(schedule=ScheduleOptions(
            strategy="uniform")))
    module = load(build(render(p, folder / label)).dir)
    runners = {"ours streams": executor_runner(module, graph),
               "ours 1 stream": executor_runner(module, graph, streams=False)}
    if one.to_json() != p.to_json():
        single = load(build(render(one, folder / f"{label}_one")).dir)
        runners["1-stream plan"] = executor_runner(single, graph)
    runners["ours graph"] = executor_runner(module, graph, cuda_graph=True)
    # a graph apart from the streams: launch-overhead gains told from stream gains
    runners["ours graph 1 stream"] = executor_runner(module, graph, cuda_graph=True,
                                                     streams=False)
    runners["ours host feeds"] = executor_runner(module, graph, host_feeds=True)
    fields = {"streams": len(p.target.streams), "arena_mib": p.summary.memory.arena_bytes / 2**20,
              "predicted_ms": p.summary.step_seconds * 1e3,
              "predicted_one_stream_ms": one.summary.step_seconds * 1e3,
              "compute_streams": len({o.stream for o in p.ops if is_compute(o.stream)}),
              "algorithms": dict(Counter(c.algorithm for c in p.memory.convs))}
    return runners, fields, lambda: op_type_times(module, graph)


def theirs(forward, precision: str, device: str, baselines: dict) -> tuple[dict, dict, dict]:
    """PyTorch's runners by name, the failed ones' reasons, and each one's seconds until it
    was ready: torch.compile's compile time (with two warm-up steps) reported apart."""
    runners, failed, ready = {}, {}, {}
    for key, options in baselines.items():
        t0 = time.perf_counter()
        try:
            runners[key] = torch_trainer(forward, SGD.lr, 1, device=device,
                                         autocast=AUTOCAST[precision],
                                         tf32=precision == "tf32", **options)
        except Exception as e:  # noqa: BLE001 - a baseline's failure must not lose the table
            failed[key] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        ready[key] = round(time.perf_counter() - t0, 1)
    return runners, failed, ready


def baselines_of(torch_graph: bool, modes: list[str]) -> dict[str, dict]:
    out = {"torch eager": {}}
    if torch_graph:
        out["torch graph"] = dict(cuda_graph=True)
    for mode in modes:
        out[compile_key(mode)] = dict(compiled=True, compile_mode=mode)
    return out


def bench_model(label: str, target, steps: int, rounds: int, modes: list[str],
                torch_graph: bool = False, precision: str = "fp32",
                costs_dir: Path | None = None, with_ours: bool = True) -> dict:
    """One zoo model's row: ours (planned with the profiled table in `costs_dir` when there
    is one) against PyTorch eager (under autocast for a mixed precision) and torch.compile in
    each of `modes`."""
    name, size = MODELS[label]
    forward = zoo(name, **size)
    graph = prepare(forward, GraphOptions(optimizer=SGD, precision=precision))
    # The step returns the loss alone, as PyTorch's loop does: a graph output comes back to the
    # host every step (GPT's logits are 512 MiB), work the eager step never does.
    graph = type(graph).model_validate(graph.model_dump() | {"outputs": ["loss"]})
    table, costs = costs_table(costs_dir, label, precision)
    row = {"model": label, "precision": precision, "ops": len(graph.nodes), "size": size,
           "costs": costs}
    with tempfile.TemporaryDirectory() as tmp:
        runners, by_type = {}, None
        if with_ours:
            runners, fields, by_type = ours(label, graph, target, table, Path(tmp))
            row |= fields
        torch_runners, failed, ready = theirs(forward, precision, "cuda",
                                              baselines_of(torch_graph, modes))
        measured = measure(runners | torch_runners, steps, rounds)
        row["op_types_ms"] = by_type() if by_type else {}
    return row | {"measured_ms": {k: v["ms"] for k, v in measured.items()},
                  "measured": measured, "failed": failed, "ready_s": ready}


def _plan_head(r: dict) -> str:
    """What the row's plan says (the modules' rows and the zoo rows without ours say less)."""
    if "predicted_ms" not in r:
        return "ours not run"
    head = (f"{r['streams']} streams, arena {r['arena_mib']:.0f} MiB, predicted "
            f"{r['predicted_ms']:.2f} ms")
    if "compute_streams" in r:
        head += (f" on {r['compute_streams']} compute stream(s), "
                 f"{r['predicted_one_stream_ms']:.2f} ms on one")
    if "costs" in r:
        head += f"; costs {r['costs']}"
    return head


def report(rows: list[dict], device: str, load: tuple[str, str]) -> str:
    lines = [f"GPU {device}; load average before {load[0]}, after {load[1]}"]
    for r in rows:
        m = r["measured_ms"]
        eager = m.get("torch eager")
        lines.append(f"\n{r['model']} {r['size']} {r.get('precision', 'fp32')} "
                     f"({r['ops']} ops, {_plan_head(r)})")
        spread = r.get("measured", {})
        lines.append(f"  {'variant':<38}{'host ms':>10}{'device ms':>11}{'min-max ms':>16}"
                     f"{'eager/x':>9}")
        for k, ms in m.items():
            ratio = f"{eager / ms:>9.2f}" if eager else ""
            sp = spread.get(k, {})
            dev = f"{sp['device_ms']:>11.3f}" if "device_ms" in sp else f"{'':>11}"
            lo_hi = (f"{sp['min_ms']:>8.2f}-{sp['max_ms']:<7.2f}" if "min_ms" in sp
                     else f"{'':>16}")
            lines.append(f"  {k:<38}{ms:>10.3f}{dev}{lo_hi}{ratio}")
        for k, why in r["failed"].items():
            lines.append(f"  {k:<38} failed: {why}")
        if r.get("ready_s"):  # compile time apart from the step: seconds until the first step
            lines.append("  ready in (s; compile and two warm-up steps): " +
                         ", ".join(f"{k} {v:.1f}" for k, v in r["ready_s"].items()))
        if r.get("algorithms"):
            lines.append("  convolution algorithms: " + ", ".join(
                f"{a} x{n}" for a, n in sorted(r["algorithms"].items())))
        top = list(r.get("op_types_ms", {}).items())[:10]
        if top:
            lines.append("  one stream, per op type (ms): " +
                         ", ".join(f"{k} {v:.2f}" for k, v in top))
    return "\n".join(lines)


def bench_module(label: str, target, steps: int, rounds: int, compiled: bool) -> dict:
    """One nn.Module (bench/torch_modules.py): our executor on its ONNX export against
    PyTorch training the module itself."""
    from torch_modules import module_trainer, onnx_graph

    with tempfile.TemporaryDirectory() as tmp:
        graph = onnx_graph(label, Path(tmp))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = plan(graph, target)
        module = load(build(render(p, Path(tmp) / label)).dir)
        runners = {"ours streams": executor_runner(module, graph),
                   "ours 1 stream": executor_runner(module, graph, streams=False),
                   "ours graph": executor_runner(module, graph, cuda_graph=True)}
        failed = {}
        modes = {"torch eager": "eager", "torch graph": "graph"}
        if compiled:
            modes["torch.compile"] = "compile"
        for key, mode in modes.items():
            try:
                runners[key] = module_trainer(label, mode)
            except Exception as e:  # noqa: BLE001 - a baseline's failure must not lose the table
                failed[key] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        measured = measure(runners, steps, rounds)
        by_type = op_type_times(module, graph)
    return {"model": label, "op_types_ms": by_type, "ops": len(graph.nodes),
            "size": {"input": list(MODULES[label].input_shape)},
            "streams": len(p.target.streams), "arena_mib": p.summary.memory.arena_bytes / 2**20,
            "measured_ms": {k: v["ms"] for k, v in measured.items()}, "measured": measured,
            "predicted_ms": p.summary.step_seconds * 1e3, "failed": failed}


def dry_run(labels: list[str], target, compiled: bool) -> str:
    """What --modules would run, each module exported, imported and planned here."""
    lines = [f"dry run for target {target.name}: nothing is measured"]
    for label in labels:
        from torch_modules import onnx_graph

        spec = MODULES[label]
        head = f"{label} input {list(spec.input_shape)}, loss {spec.loss}"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                graph = onnx_graph(label, Path(tmp))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = plan(graph, target)
        except Exception as e:  # noqa: BLE001 - say which module cannot run, and go on
            lines.append(f"{head}: cannot run: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(
            Counter(n.op for n in graph.nodes).items(), key=lambda kv: -kv[1])[:6])
        lines.append(f"{head}: {len(graph.nodes)} ops in the training step ({ops}, ...); "
                     f"plan predicts {p.summary.step_seconds * 1e3:.2f} ms, arena "
                     f"{p.summary.memory.arena_bytes / 2**20:.0f} MiB")
        variants = ["ours streams", "ours 1 stream", "ours graph", "torch eager",
                    "torch graph"] + (["torch.compile max-autotune"] if compiled else [])
        lines.append("  would time: " + ", ".join(variants))
    return "\n".join(lines)


def _torch_on_cpu(forward, precision: str, modes: list[str]) -> str:
    """PyTorch's side of a tiny dry run, on the CPU (no GPU here): eager and torch.compile in
    each of `modes` made ready and stepped once, each one's ready seconds (the compile time
    reported apart, as on the GPU); Inductor's C++ kernels, not the GPU's Triton ones."""
    runners, failed, ready = theirs(forward, precision, "cpu", baselines_of(False, modes))
    parts = []
    for key, seconds in ready.items():
        if key in failed:
            parts.append(f"{key} failed: {failed[key]}")
            continue
        t0 = time.perf_counter()
        runners[key]()
        step_ms = 1e3 * (time.perf_counter() - t0)
        parts.append(f"{key} ready in {seconds:.1f} s, a step {step_ms:.1f} ms")
    return "  torch on the CPU at this size (no GPU here): " + "; ".join(parts)


def dry_run_models(labels: list[str], target, precision: str, modes: list[str],
                   costs_dir: Path | None = None, tiny: bool = False) -> str:
    """What --models would run at `precision`, each zoo model's training graph planned here
    (with the kept profiled table where `costs_dir` has one). `tiny`: at TINY's sizes, the
    plan also rendered for the GPU target and PyTorch's side made ready on the CPU."""
    lines = [f"dry run for target {target.name}, precision {precision}: nothing is measured"]
    for label in labels:
        name, size = TINY[label] if tiny else MODELS[label]
        forward = zoo(name, **size)
        graph = prepare(forward, GraphOptions(optimizer=SGD, precision=precision))
        table, costs = costs_table(costs_dir, label, precision, as_target=target.name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = plan(graph, target, table)
        if table is not None:
            costs += f", {p.summary.analytical_signatures} of the plan's priced by the model"
        low = Counter(t.dtype for t in graph.tensors if t.dtype in ("bfloat16", "float16"))
        casts = sum(n.op == "Cast" for n in graph.nodes)
        lines.append(f"{label} {size}: {len(graph.nodes)} ops ({casts} casts; "
                     + (", ".join(f"{v} {k} tensors" for k, v in sorted(low.items()))
                        or "float32 tensors")
                     + ("; TF32 math" if graph.math == "tf32" else "")
                     + f"); plan predicts {p.summary.step_seconds * 1e3:.2f} ms, arena "
                     f"{p.summary.memory.arena_bytes / 2**20:.0f} MiB"
                     + (f"; costs {costs}" if costs_dir is not None else ""))
        torch_side = ("torch eager" + (f" under autocast({AUTOCAST[precision]})"
                                       if AUTOCAST[precision] else "")
                      + (" with allow_tf32" if precision == "tf32" else ""))
        variants = ["ours streams", "ours 1 stream", "ours graph", "ours graph 1 stream",
                    "ours host feeds", torch_side] + [compile_key(m) for m in modes]
        lines.append("  would time: " + ", ".join(variants))
        if tiny:
            with tempfile.TemporaryDirectory() as tmp:
                files = len(render(p, Path(tmp) / label).files)
            lines.append(f"  rendered for {target.name}: {files} files (not built here: "
                         "prepare.sh's CUDA checks build the runtime with nvcc)")
            lines.append(_torch_on_cpu(forward, precision, modes))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"of {','.join(MODELS)}")
    parser.add_argument("--modules", default="",
                        help=f"nn.Modules instead of zoo graphs: {','.join(MODULES)}")
    parser.add_argument("--dry-run", action="store_true",
                        help="plan each (--modules: export and import it first) and print what "
                             "would run; no GPU needed")
    parser.add_argument("--precision", choices=list(AUTOCAST), default="fp32",
                        help="--models: our precision policy, PyTorch's autocast of that type")
    parser.add_argument("--target", default=None,
                        help="default: this machine's GPU (`gpu`); h100-80gb for --dry-run")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--compile-modes", default="default",
                        help="torch.compile's modes, comma-separated (default, "
                             "max-autotune-no-cudagraphs, ...): a row each, its compile time "
                             "apart")
    parser.add_argument("--no-ours", action="store_true",
                        help="PyTorch's rows only (a later stage's torch.compile modes)")
    parser.add_argument("--costs-dir", type=Path, default=None,
                        help="plan ours with MODEL[-PRECISION].gpu.costs.json kept here "
                             "(bench_gpu_profile.py's profiled algorithms) where it exists")
    parser.add_argument("--tiny", action="store_true",
                        help="with --dry-run: tiny sizes, the plan rendered, PyTorch's side "
                             "compiled and stepped on the CPU")
    parser.add_argument("--torch-graph", action="store_true",
                        help="also PyTorch's step captured whole as one CUDA graph (its replay "
                             "of the translated models hit a device-side assert on an H100: "
                             "off by default, since that ends the process's CUDA context)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None,
                        help="append each model's row to this file as a JSON line when done")
    args = parser.parse_args()
    modules = [m for m in args.modules.split(",") if m]
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        raise SystemExit(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    if args.precision != "fp32" and modules:
        raise SystemExit("--precision is for --models (zoo graphs)")
    labels = [m for m in args.models.split(",") if m]
    unknown = [m for m in labels if m not in MODELS]
    if unknown and not modules:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    modes = [] if args.no_compile else [m for m in args.compile_modes.split(",") if m]
    if args.dry_run:
        target = load_target(args.target or "h100-80gb")
        if modules:
            print(dry_run(modules, target, not args.no_compile))
        else:
            print(dry_run_models(labels, target, args.precision, modes, args.costs_dir,
                                 args.tiny), flush=True)
        return
    target = load_target(args.target or "gpu")
    import torch

    device = torch.cuda.get_device_name(0)
    before = os.getloadavg()
    rows = []
    for label in modules or args.models.split(","):
        if modules:
            rows.append(bench_module(label, target, args.steps, args.rounds,
                                     not args.no_compile))
        else:
            if label not in MODELS:
                raise SystemExit(f"unknown model {label!r}; known: {', '.join(MODELS)}")
            rows.append(bench_model(label, target, args.steps, args.rounds, modes,
                                    args.torch_graph, args.precision, args.costs_dir,
                                    not args.no_ours))
        print(report(rows[-1:], device, ("", "")), file=sys.stderr, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({"device": device, **rows[-1]}, sort_keys=True) + "\n")
    after = os.getloadavg()
    load = (" ".join(f"{x:.2f}" for x in before), " ".join(f"{x:.2f}" for x in after))
    if args.json:
        print(json.dumps({"device": device, "load": load, "models": rows}, indent=2,
                         sort_keys=True))
    else:
        print(report(rows, device, load))


if __name__ == "__main__":
    main()
