"""Transformer (and BiLSTM) training steps: the generated CPU executor against PyTorch eager and
torch.compile (issues 12, 25).

    python bench/bench_transformer.py [--rounds 15] [--threads N] [--models gpt,bert,vit,bilstm]
                                      [--no-compile] [--min-team-us 50] [--lanes 1] [--apart]
                                      [--ops]
                                      [--costs in-step|analytical]
                                      [--strategy measured|uniform|optimized]
                                      [--pinning measured|plan|os] [--before analytical/uniform]

One SGD step (forward, backward, update) of each model at the size below, the executor (on
every logical CPU, or the first N with --threads) against the
same model as an nn.Module in PyTorch eager (float32, torch.optim.SGD, as many threads) and the
same nn.Module under torch.compile (what a user runs; "n/a" with the reason where it does not
compile):
- gpt: zoo:gpt against a GPT-2 style module (pre-LN, causal attention, GELU MLP, tied head);
- bert: zoo:bert against nn.TransformerEncoder over nn.TransformerEncoderLayer (post-LN, GELU)
  with embeddings and a tied head (the numerics of these two pairs are checked against each
  other in tests/codegen/test_transformer_vs_torch.py);
- vit: a small ViT nn.Module (patch convolution, class token, pre-LN nn.TransformerEncoder)
  brought in through planner.torch (torch.export) with F.cross_entropy;
- bilstm: an embedding, a bidirectional nn.LSTM, mean over time and a linear head, through its
  ONNX export (planner.torch has no aten.flip yet) with `--loss cross-entropy`; the import
  unrolls it into ~670 training ops (an LSTMCell per step), so it is the model that --min-team-us
  matters most to. --lanes 2 runs the uniform plan as two lanes of threads / 2 cores each (ops
  in graph order, as TensorFlow's inter-op pool): the BiLSTM's two directions side by side.
  --ops prints where our step goes instead (per op type, from stats()' timeline). Its
  step graph is planned for the host's cores (the step graph's for_cores pass, as `planner
  plan --train` plans it for its target): one weight-gradient GEMM per direction where no core
  is left to overlap chunks (the runtime packs the recurrent weights once per step).
Our plan (the table's `plan` column) is priced by the model's in-step profile on this host
(`--costs in-step`, the default: every op timed inside the step at each thread count, as
`planner profile --in-step` does, kept in bench/.costs/ like bench_cpu_strategies.py's tables:
delete the file to profile again; one lacking some of the graph's ops is profiled again) or by
the analytical model (`--costs analytical`), and is
- uniform: one op at a time on every core, except that an op the costs give under
  --min-team-us on one thread, or no faster on the team than alone, runs on one (as PyTorch
  runs an intra-op loop under 32768 elements inline; 0: every op on every core);
- optimized: the planner's default search (co-running lanes, per-op thread counts);
- measured (the default): both built, stepped in turns and the faster kept, as a user who
  tries both would; a table profiled under other load need not predict which wins (with
  --apart the pick runs first in a process of its own, and only the kept plan is served).
Its teams' threads are pinned to the plan's CPUs (`--pinning plan`), left where the OS puts
them (`os`: Executor.set_pinning(False)), or by default (`measured`) each plan is tried both
ways with the rest: `plan` reads e.g. "optimized/os". (`--before` runs pinned, as before.)
`--before COSTS/STRATEGY` adds our executor planned that way as one more contender in the same
rounds (`before ms`, and the ratio of ours to it): a change measured against what it replaced
on the same machine at the same time.
Rounds alternate (an executor step, an eager step, a compiled step) so load changes hit all
alike; the table gives medians over rounds. With --apart each contender steps in a process of
its own (the order rotating per round): in one process PyTorch and the executor share one
OpenMP runtime (torch's libgomp.so.1 is loaded first and serves both), which changes
PyTorch's multi-threaded step under load (bench/results/2026-11-23-transformer-issue25.md).
"""

from __future__ import annotations

import argparse
import copy
import functools
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cpu_strategies import profiled_costs  # noqa: E402

from codegen.build import build  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import random_feeds  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

CONFIG = dict(batch=8, seq=64, dim=128, heads=4, layers=2, vocab=512)
LR = 0.01


def torch_model(kind: str):
    import torch
    from torch import nn

    c = CONFIG
    dim, heads, seq, vocab = c["dim"], c["heads"], c["seq"], c["vocab"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.register_buffer("future", torch.ones(seq, seq, dtype=torch.bool).triu(1))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(dim, dim=2)
            q, k, v = (z.view(b, t, heads, dim // heads).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-1, -2) / math.sqrt(dim // heads))
            y = (s.masked_fill(self.future, float("-inf")).softmax(-1) @ v)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, dim))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocab, dim)
            self.positions = nn.Parameter(torch.randn(seq, dim) * 0.02)
            if kind == "gpt":
                self.blocks = nn.Sequential(*(Block() for _ in range(c["layers"])))
                self.norm = nn.LayerNorm(dim)
            else:
                self.norm = nn.LayerNorm(dim)  # BERT's embedding LayerNorm
                layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0,
                                                   activation="gelu", batch_first=True)
                self.blocks = nn.TransformerEncoder(layer, c["layers"],
                                                    enable_nested_tensor=False)

        def forward(self, tokens, labels):
            x = self.tokens(tokens) + self.positions
            x = self.norm(self.blocks(x)) if kind == "gpt" else self.blocks(self.norm(x))
            logits = (x @ self.tokens.weight.T).reshape(-1, vocab)
            return nn.functional.cross_entropy(logits, labels)

    return Model()


VIT = dict(batch=8, image=32, patch=4, dim=128, heads=4, layers=2, classes=10)
BILSTM = dict(batch=8, seq=32, vocab=512, dim=128, hidden=128, classes=10)


def vit_module():
    """A small ViT: 4x4 patches by a strided convolution, a class token, learned positions,
    pre-LN nn.TransformerEncoder (GELU), a linear head on the class token."""
    import torch
    from torch import nn

    c = VIT

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dim = c["dim"]
            self.patch = nn.Conv2d(3, dim, c["patch"], stride=c["patch"])
            self.cls = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos = nn.Parameter(torch.randn(1, (c["image"] // c["patch"]) ** 2 + 1, dim) * 0.02)
            layer = nn.TransformerEncoderLayer(dim, c["heads"], 4 * dim, dropout=0.0,
                                               activation="gelu", batch_first=True,
                                               norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, c["classes"])

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            return self.head(self.norm(self.blocks(x))[:, 0])

    images = torch.randn(c["batch"], 3, c["image"], c["image"])
    return ViT(), (images,), torch.randint(0, c["classes"], (c["batch"],))


def bilstm_module():
    """Embedding, bidirectional nn.LSTM, mean over time, linear head."""
    import torch
    from torch import nn

    c = BILSTM

    class BiLSTM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(c["vocab"], c["dim"])
            self.lstm = nn.LSTM(c["dim"], c["hidden"], batch_first=True, bidirectional=True)
            self.head = nn.Linear(2 * c["hidden"], c["classes"])

        def forward(self, tokens):
            y, _ = self.lstm(self.embed(tokens))
            return self.head(y.mean(1))

    tokens = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    return BiLSTM(), (tokens,), torch.randint(0, c["classes"], (c["batch"],))


def case(kind: str, target):
    """(training graph for a step on `target`, its parameters or None for the planner's init,
    the nn.Module, the module's inputs, the labels, the loss function)."""
    import io

    import torch
    import torch.nn.functional as F

    sgd = Optimizer(kind="sgd", lr=LR)
    if kind in ("gpt", "bert"):
        graph = prepare(zoo(kind, **CONFIG), GraphOptions(optimizer=sgd))
        feeds = random_feeds(graph, seed=1)
        tokens, labels = torch.from_numpy(feeds["tokens"]), torch.from_numpy(feeds["labels"])
        return graph, None, torch_model(kind), (tokens, labels), None, None
    if kind == "vit":
        from planner.importers.torch.convert import convert
        from planner.torch.training import export

        module, inputs, labels = vit_module()
        imported = convert(export(module, inputs, F.cross_entropy, labels), name="vit")
        return (prepare(imported.graph, GraphOptions(optimizer=sgd)), imported.params(), module,
                inputs, labels, F.cross_entropy)
    if kind == "bilstm":
        from planner.frontend.loss import attach_loss
        from planner.importers.onnx import import_onnx

        module, inputs, labels = bilstm_module()
        buf = io.BytesIO()
        torch.onnx.export(module, inputs, buf, dynamo=False, input_names=["tokens"],
                          output_names=["logits"])
        imported = import_onnx(buf.getvalue(), name="bilstm")
        graph = prepare(attach_loss(imported.graph, "cross-entropy"), GraphOptions(optimizer=sgd))
        return graph, imported.params(), module, inputs, labels, F.cross_entropy
    raise SystemExit(f"unknown model {kind!r}: gpt, bert, vit or bilstm")


def torch_step(model, opt, inputs, labels, loss) -> None:
    opt.zero_grad()
    out = model(*inputs) if loss is None else loss(model(*inputs), labels)
    out.backward()
    opt.step()


class Planning(NamedTuple):
    """How the executor's plan is made and run: the cost table (in-step or analytical), the
    strategy (uniform, optimized, or `measured`: the faster of those two), the uniform plan's
    min_team_seconds, and the teams' threads pinned to the plan's CPUs ("plan"), left to the
    OS ("os") or `measured`."""

    costs: str = "in-step"
    strategy: str = "measured"
    min_team_seconds: float = 50e-6
    pinning: str = "measured"
    lanes: int = 1  # the uniform plan's concurrent lanes, threads / lanes cores each

    def args(self) -> list[str]:
        return ["--costs", self.costs, "--strategy", self.strategy,
                "--min-team-us", str(self.min_team_seconds * 1e6), "--pinning", self.pinning,
                "--lanes", str(self.lanes)]


def cost_table(kind: str, graph, target, how: Planning):
    """The model's in-step profile on this host (profiled once, kept in bench/.costs/), or None
    for the analytical model."""
    if how.costs == "analytical":
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return profiled_costs(f"transformer-{kind}", graph, target)


def our_plan(kind: str, graph, target, how: Planning, strategy: str):
    threads = len(target.logical_cpus)
    options = (ScheduleOptions(strategy="uniform", min_team_seconds=how.min_team_seconds,
                               intra=max(1, threads // how.lanes), inter=how.lanes)
               if strategy == "uniform" else ScheduleOptions(strategy=strategy))
    table = cost_table(kind, graph, target, how)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, target, table, PlanOptions(schedule=options))


# Steps each candidate plan of `--strategy measured` takes, in turns, before the faster stays,
# and the rest before each (the previous candidate's team threads spin a while after its step).
TRIAL_STEPS = 15
TRIAL_SETTLE_SECONDS = 0.05


def our_step(kind: str, graph, params, target, tmp: Path, how: Planning):
    """(one warm step of the executor, its plan's strategy and pinning). `measured`: the
    uniform and the optimized plan of the same cost table, and each with its teams pinned and
    not (`set_pinning`), built and stepped in turns (TRIAL_STEPS each, settled), the one with the
    shorter median step kept: what runs faster on this machine now, which a cost table taken
    under other load may not predict."""
    feeds = random_feeds(graph, seed=1)
    strategies = ("uniform", "optimized") if how.strategy == "measured" else (how.strategy,)
    pinnings = ("plan", "os") if how.pinning == "measured" else (how.pinning,)
    names = tuple(f"{a}/{b}" for a in strategies for b in pinnings)
    steps = {}
    for strategy in strategies:
        module = load(build(render(our_plan(kind, graph, target, how, strategy),
                                   tmp / f"{kind}-{strategy}")).dir)
        for pinning in pinnings:
            ex = module.Executor(init=True)
            ex.set_pinning(pinning == "plan")
            if params is not None:
                ex.load_params(params)
            ex.step(feeds)
            steps[f"{strategy}/{pinning}"] = functools.partial(ex.step, feeds)
    if len(steps) == 1:
        return steps[names[0]], names[0]
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(TRIAL_STEPS):
        for name in names:
            time.sleep(TRIAL_SETTLE_SECONDS)
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    kept = min(names, key=lambda name: np.median(times[name]))
    return steps[kept], kept


def op_times(kind: str, target, tmp: Path, how: Planning, steps: int) -> None:
    """Where our step goes (--ops): per op type, the count and the summed median seconds over
    `steps` steps (stats()), and of the fastest step the span from the first op's start to the
    last op's end, the time inside ops and the gaps between them (the plan: --strategy, uniform
    for `measured`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph, params, *_ = case(kind, target)
    strategy = "uniform" if how.strategy == "measured" else how.strategy
    ex = load(build(render(our_plan(kind, graph, target, how, strategy), tmp / kind)).dir
              ).Executor(init=True)
    ex.set_pinning(how.pinning != "os")
    if params is not None:
        ex.load_params(params)
    feeds = random_feeds(graph, seed=1)
    ex.step(feeds)
    op_of = {n.name: n.op for n in graph.nodes}
    per_step = []
    for _ in range(steps):
        ex.reset_stats()
        ex.step(feeds)
        per_step.append(sorted(ex.stats()["ops"], key=lambda o: o["start"]))
    fastest = min(per_step, key=lambda ops: ops[-1]["end"] - ops[0]["start"])
    span = fastest[-1]["end"] - fastest[0]["start"]
    busy = sum(o["end"] - o["start"] for o in fastest)
    by_type: dict[str, list[float]] = {}
    for k, o in enumerate(per_step[0]):
        seconds = float(np.median([ops[k]["end"] - ops[k]["start"] for ops in per_step]))
        by_type.setdefault(op_of[o["name"]], []).append(seconds)
    total = sum(sum(v) for v in by_type.values())
    print(f"{kind}: {len(graph.nodes)} ops; fastest of {steps} steps: span {span * 1e3:.2f} ms, "
          f"in ops {busy * 1e3:.2f} ms, between ops {(span - busy) * 1e3:.2f} ms; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'op':<24}{'count':>6}{'ms':>9}{'%':>7}{'us/op':>8}")
    for op, times in sorted(by_type.items(), key=lambda kv: -sum(kv[1])):
        print(f"{op:<24}{len(times):>6}{sum(times) * 1e3:>9.3f}"
              f"{100 * sum(times) / total:>7.1f}{sum(times) / len(times) * 1e6:>8.2f}")


def contenders(kind: str, target, tmp: Path, names: tuple[str, ...], how: Planning):
    """(ops, {name: one step}, why torch.compile is missing, our plan's strategy) of one
    model, for the contenders in `names` ("ours", "eager", "compiled"), each warmed up."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph, params, model, inputs, labels, loss = case(kind, target)
    steps, note, kept = {}, "skipped", ""
    if "ours" in names:
        steps["ours"], kept = our_step(kind, graph, params, target, tmp, how)
    if "eager" in names:
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        steps["eager"] = lambda: torch_step(model, opt, inputs, labels, loss)
    if "compiled" in names:
        twin = copy.deepcopy(model)
        twin_opt = torch.optim.SGD(twin.parameters(), lr=LR)
        fast = torch.compile(twin)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch_step(fast, twin_opt, inputs, labels, loss)
            steps["compiled"] = lambda: torch_step(fast, twin_opt, inputs, labels, loss)
        except Exception as e:  # report it in the table, go on with the other models
            note = f"n/a ({type(e).__name__})"
    for step in steps.values():
        step()
    return len(graph.nodes), steps, note, kept


def measure(kind: str, target, tmp: Path, rounds: int, names: tuple[str, ...], how: Planning):
    """(model, ops, median seconds per contender, why torch.compile is missing, our plan's
    strategy) of one model, the contenders taking turns in this process."""
    ops, steps, note, kept = contenders(kind, target, tmp, names, how)
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    return kind, ops, {k: float(np.median(v)) for k, v in times.items()}, note, kept


def measure_apart(kind: str, target, rounds: int, names: tuple[str, ...], how: Planning,
                  before: Planning | None = None, settle: float = 0.0):
    """As `measure`, each contender in a process of its own (this script with --serve), as a
    user runs one framework: a step of each per round, the order rotating from round to
    round. (In one process the executor and PyTorch share one OpenMP runtime, and PyTorch's
    2-thread step then depends on what our teams left behind.) `before`: one more contender,
    our executor on a plan made that way ("before"). `settle`: seconds of rest before each
    step (--settle-ms)."""
    for planning in (how, before or how):  # profiled here, before the contenders run
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cost_table(kind, case(kind, target)[0], target, planning)
    if "ours" in names and "measured" in (how.strategy, how.pinning):
        # The pick among plans and pinnings runs alone, in a process of its own: executors
        # tried and dropped in the serving process were seen to slow every contender's step
        # (eager's 2-thread ViT 11.9 -> 25.3 ms), and nothing else is stepping meanwhile.
        trial = subprocess.run(
            [sys.executable, __file__, "--trial", "--models", kind, "--threads",
             str(len(target.logical_cpus)), *how.args()],
            stdout=subprocess.PIPE, text=True, check=True)
        strategy, pinning = trial.stdout.split()[-1].split("/")
        how = how._replace(strategy=strategy, pinning=pinning)
    plans = {"ours": how} | ({"before": before} if before else {})
    names = names + (("before",) if before else ())
    procs = {name: subprocess.Popen(
        [sys.executable, __file__, "--serve", "ours" if name == "before" else name, "--models",
         kind, "--threads", str(len(target.logical_cpus)), *plans.get(name, how).args()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for name in names}
    try:
        ready = {name: p.stdout.readline().split() for name, p in procs.items()}
        live = [n for n in names if ready[n] and ready[n][0] == "ready"]
        note = next((" ".join(ready[n][1:]) for n in names if ready[n] and ready[n][0] == "n/a"),
                    "skipped")
        ops = int(ready[live[0]][1])
        kept = ready["ours"][2] if "ours" in live else ""
        times: dict[str, list[float]] = {n: [] for n in live}
        for r in range(rounds):
            for name in live[r % len(live):] + live[:r % len(live)]:
                # The previous contender's threads spin a while after its step (OpenMP's wait
                # policy, on both sides): they are let settle, so no step pays for another's.
                time.sleep(settle)
                procs[name].stdin.write("step\n")
                procs[name].stdin.flush()
                times[name].append(float(procs[name].stdout.readline()))
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    return kind, ops, {k: float(np.median(v)) for k, v in times.items()}, note, kept


def trial(kind: str, target, how: Planning) -> None:
    """The --trial child: prints the strategy/pinning `our_step` keeps for `kind`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph, params, *_ = case(kind, target)
    with tempfile.TemporaryDirectory() as tmp:
        print(our_step(kind, graph, params, target, Path(tmp), how)[1], flush=True)


def serve(name: str, kind: str, target, how: Planning) -> None:
    """The --serve child: one contender of one model, a step per line read."""
    with tempfile.TemporaryDirectory() as tmp:
        ops, steps, note, kept = contenders(kind, target, Path(tmp), (name,), how)
        if name not in steps:
            print(note, flush=True)
            return
        print("ready", ops, kept, flush=True)
        for _ in sys.stdin:
            t0 = time.perf_counter()
            steps[name]()
            print(time.perf_counter() - t0, flush=True)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="0: every logical CPU")
    parser.add_argument("--models", default="gpt,bert,vit,bilstm")
    parser.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    parser.add_argument("--min-team-us", type=float, default=50.0,
                        help="ops predicted under this on one thread, or no faster on the team, "
                             "run on one (0: none)")
    parser.add_argument("--costs", choices=["in-step", "analytical"], default="in-step",
                        help="the plan's cost table: this host's in-step profile (default) or "
                             "the analytical model")
    parser.add_argument("--strategy", choices=["uniform", "optimized", "measured"],
                        default="measured",
                        help="our plan: uniform, optimized, or the faster of the two when "
                             "measured here (default)")
    parser.add_argument("--pinning", choices=["plan", "os", "measured"], default="measured",
                        help="our teams' threads on the plan's CPUs, where the OS puts them, or "
                             "the faster of the two when measured here (default)")
    parser.add_argument("--lanes", type=int, default=1,
                        help="concurrent lanes of the uniform plan, threads / lanes cores each")
    parser.add_argument("--apart", action="store_true",
                        help="each contender in a process of its own (see measure_apart)")
    parser.add_argument("--settle-ms", type=float, default=0.0,
                        help="with --apart: rest before each step, so the previous contender's "
                             "spinning threads have stopped (default 0)")
    parser.add_argument("--ops", action="store_true",
                        help="instead: where our step goes, per op type (stats() timeline)")
    parser.add_argument("--before", metavar="COSTS/STRATEGY",
                        help="with --apart: our executor planned this way too (e.g. "
                             "analytical/uniform, with --min-team-us), in the same rounds")
    parser.add_argument("--serve", choices=["ours", "eager", "compiled"],
                        help=argparse.SUPPRESS)  # measure_apart's children
    parser.add_argument("--trial", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    target = detect()
    if args.threads:
        target = target.model_copy(update={"logical_cpus": target.logical_cpus[:args.threads]})
    threads = len(target.logical_cpus)
    torch.set_num_threads(threads)
    how = Planning(args.costs, args.strategy, args.min_team_us * 1e-6, args.pinning,
                   args.lanes)
    before = (Planning(*args.before.split("/"), how.min_team_seconds, "plan", args.lanes)
              if args.before else None)
    if before and (not args.apart or before.costs not in ("in-step", "analytical")
                   or before.strategy not in ("uniform", "optimized", "measured")):
        parser.error("--before takes COSTS/STRATEGY as --costs and --strategy do, with --apart")
    if args.serve:
        serve(args.serve, args.models, target, how)
        return
    if args.trial:
        trial(args.models, target, how)
        return
    if args.ops:
        with tempfile.TemporaryDirectory() as tmp:
            for kind in args.models.split(","):
                op_times(kind, target, Path(tmp), how, args.rounds)
        return
    names = ("ours", "eager") if args.no_compile else ("ours", "eager", "compiled")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.models.split(","):
            rows.append(measure_apart(kind, target, args.rounds, names, how, before,
                                      args.settle_ms * 1e-3)
                        if args.apart
                        else measure(kind, target, Path(tmp), args.rounds, names, how))
    load_avg = os.getloadavg()[0]
    config = "; ".join(f"{name} " + ",".join(f"{k}={v}" for k, v in c.items())
                       for name, c in (("gpt/bert", CONFIG), ("vit", VIT), ("bilstm", BILSTM)))
    where = "a process each" if args.apart else "one process"
    team = {"uniform": f"uniform plans, ops under {args.min_team_us:g} us or no faster on the "
                       "team on one thread",
            "optimized": "optimized plans",
            "measured": f"the faster of the uniform plan (ops under {args.min_team_us:g} us or "
                        "no faster on the team on one thread) and the optimized one, measured"
            }[args.strategy]
    print(f"host: {target.name}; {threads} threads in {args.lanes} lane(s); {args.costs} costs; "
          f"{team}; "
          f"teams pinned: {args.pinning}; "
          f"{args.rounds} alternating rounds, {where}; load average {load_avg:.2f}\n"
          f"{config}")
    print(f"{'model':<8}{'ops':>6}{'plan':>16}{'executor ms':>13}{'eager ms':>10}{'ratio':>7}"
          f"{'compiled ms':>13}{'ratio':>7}" + (f"{'before ms':>11}{'/before':>8}" if before
                                                else ""))
    for kind, ops, med, note, kept in rows:
        ours, eager = med["ours"] * 1e3, med["eager"] * 1e3
        line = f"{kind:<8}{ops:>6}{kept:>16}{ours:>13.2f}{eager:>10.2f}{ours / eager:>7.2f}"
        if "compiled" in med:
            line += f"{med['compiled'] * 1e3:>13.2f}{ours / (med['compiled'] * 1e3):>7.2f}"
        else:
            line += f"{note:>20}"
        if "before" in med:
            line += f"{med['before'] * 1e3:>11.2f}{ours / (med['before'] * 1e3):>8.2f}"
        print(line)


if __name__ == "__main__":
    main()
