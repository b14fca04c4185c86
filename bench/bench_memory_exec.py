"""Memory plans carried out on the CPU: step time and measured peak of the generated executor at
four memory budgets against PyTorch (eager) plain, with activation checkpointing over every
block / layer (torch.utils.checkpoint, what a user would wrap: ResNet's residual blocks, GPT's
transformer layers, Inception's mixed blocks, LSTM layers) and with
torch.autograd.graph.save_on_cpu.

    python bench/bench_memory_exec.py [--models resnet50,inception_v3,gpt,lstm] [--rounds 5]
                                      [--no-torch]

Budgets: "free" (no budget: the unconstrained arena), "mid" (halfway between the per-op bound
and the unconstrained arena, the issue's midpoint), "low" (halfway between mid and the
smallest) and "smallest" (the smallest feasible budget the planner reports); then "rc mid" and
"rc smallest", recompute only (no offload) at mid and at the smallest budget recompute alone
reaches: on a CPU the host store is the same memory as the arena, so only recompute lowers the
process's peak. PyTorch runs the
zoo graph translated node by node (tests/torch_translator.py).

Each configuration runs in a process of its own, warm (3 steps), OpenMP threads waiting as the
generated package's do on both sides (codegen/backends.py: CPU_LOAD_ENVIRONMENT), and the
configurations of a model take turns step by step for `rounds` rounds (the machine is shared:
alternating rounds see the same load); printed: the median step, its ratio to the unconstrained
step ("x free": the median over rounds of the ratio of the two steps of one round), and the
process's peak resident memory above what it held before it built its model (params, arena, host
store, library scratch, torch's saved tensors: everything the step needs), measured the same way
on both sides, with the executor's own count (arena + host store) beside it, and the load
average.

At equal measured peak: for each PyTorch technique, our fastest run whose measured peak is at
or below the technique's (a measured run, no interpolation); none if no budget of ours got
that low.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codegen.backends import CPU_LOAD_ENVIRONMENT  # noqa: E402

# Reduced sizes (a 2-core machine shared with other work), large enough that activations, not
# the processes' fixed memory (libraries, parameters), set the peak.
MODELS = {
    "resnet50": ("resnet", {"batch": 4, "image": 128, "depth": 50}),
    "inception_v3": ("inception_v3", {"batch": 8, "image": 139, "width": 0.5}),
    "gpt": ("gpt", {"batch": 8, "seq": 128, "dim": 128, "heads": 4, "layers": 4,
                    "vocab": 1000}),
    "lstm": ("lstm", {"batch": 32, "seq": 64, "hidden": 256, "layers": 2, "vocab": 1000}),
}
LR = 0.01

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
spec = json.loads(sys.argv[1])
def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key + ":"))
# Both sides import the same modules before the baseline (torch, the planner, the loader,
# the translator): the peak counts what the step needs, not a module one side imports.
import torch, torch.utils.checkpoint
from planner.graph.interpret import init_params, random_feeds
from planner.graph import Graph
from planner.zoo import build
from codegen.load import load
from bench.bench_memory_exec import torch_ops, torch_step
torch_ops()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to what is resident now
base = status("VmRSS")
if spec["kind"] == "ours":
    module = load(spec["package"])
    graph = Graph.model_validate(json.loads(module.plan)["graph"])
    ex = module.Executor()
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    run = lambda: ex.step(feeds)
    held = lambda: ex.stats()["held_bytes"]
else:
    run = torch_step(spec)
    held = lambda: 0
for _ in range(3):
    run()
if spec.get("steady"):
    # The peak of the steady steps: freed warm-up memory (torch.compile's tracing and
    # partitioning) handed back to the system first, then the peak reset to what is resident.
    import ctypes
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
print("ready", flush=True)
for _ in sys.stdin:
    t0 = time.perf_counter()
    run()
    print(time.perf_counter() - t0, flush=True)
peak = status("VmHWM") - base
print(json.dumps({"peak": peak, "held": held()}), flush=True)
"""


# The blocks a user wraps in torch.utils.checkpoint: ResNet's residual blocks, GPT's
# transformer layers, LSTM layers, Inception's mixed blocks (not the stem, head or loss).
WRAPPED = re.compile(r"layer\d+/block\d+|block\d+|layer\d+|mixed\w+")


def block_of(name: str) -> str:
    """The block a forward node belongs to: `layer1/block2` (ResNet), else its first scope
    (`block3` of a GPT, `layer1` of an LSTM, `mixed6b` of Inception)."""
    parts = name.split("/")
    if len(parts) > 2 and parts[1].startswith("block"):
        return "/".join(parts[:2])
    return parts[0]


def torch_ops() -> dict:
    """The torch translation of each forward op (tests/torch_translator.py's, plus
    the transformer's ops; torch's own dropout RNG: timing, not numerics)."""
    import torch

    from tests.torch_translator import TORCH_OPS

    F = torch.nn.functional

    def layer_norm(xs, a):
        x = xs[0]
        axis = a["axis"] % x.dim()
        dims = tuple(range(axis, x.dim()))
        y = F.layer_norm(x, x.shape[axis:], xs[1], xs[2] if len(xs) > 2 else None,
                         a["epsilon"])
        # The statistics outputs, as the graph has them (nothing reads them in forward).
        return [y, x.mean(dims, keepdim=True), x.var(dims, keepdim=True, unbiased=False)]

    def lstm_cell(xs, a):
        # nn.LSTMCell's pointwise part on the graph's pre-activations (the gate GEMM is the
        # graph's MatMul): the tests' translation through torch.lstm_cell adds a 4H x 4H
        # identity GEMM per step, there for numerics, which would time torch's LSTM slower.
        gates, c = xs[0], xs[1]
        z = gates + xs[2] if len(xs) > 2 else gates
        blocks = dict(zip(a["order"], torch.split(z, c.shape[1], 1), strict=True))
        act = {k: torch.tanh(b) if k == "g" else torch.sigmoid(b) for k, b in blocks.items()}
        c = act["f"] * c + act["i"] * act["g"]
        return [act["o"] * torch.tanh(c), c, torch.cat([act[k] for k in a["order"]], 1)]

    def causal_mask(xs, a):
        n, m = xs[0].shape[-2:]
        above = torch.ones(n, m, dtype=torch.bool).triu(1)
        return [xs[0].masked_fill(above, -math.inf if a["value"] is None else a["value"])]

    return {**TORCH_OPS, "LayerNorm": layer_norm, "CausalMask": causal_mask,
            "Dropout": lambda xs, a: [F.dropout(xs[0], a["rate"], training=True)],
            "Gelu": lambda xs, a: [F.gelu(xs[0], approximate=a["approximate"])],
            "Scale": lambda xs, a: [xs[0] * a["factor"]],
            "Softmax": lambda xs, a: [torch.softmax(xs[0], a["axis"])],
            "Transpose": lambda xs, a: [xs[0].permute(a["perm"])],
            "LSTMCell": lstm_cell,
            # math.prod, not numpy's, over the shape: torch.compile traces it without a break.
            "Flatten": lambda xs, a: [xs[0].reshape(math.prod(xs[0].shape[:a["axis"]]), -1)]}


def torch_step(spec: dict):
    """One eager PyTorch SGD step of the zoo model, plain or under a memory technique."""
    import torch
    from torch.utils.checkpoint import checkpoint

    from planner.graph.interpret import init_params, random_feeds
    from planner.ops import get_op
    from planner.zoo import build

    ops = torch_ops()
    torch.set_num_threads(spec["threads"])
    name, kwargs = spec.get("build") or MODELS[spec["model"]]
    forward = build(name, **kwargs)
    state = init_params(forward, seed=0)
    feeds = random_feeds(forward, seed=1)
    params = {t.name: torch.tensor(state[t.name], requires_grad=True)
              for t in forward.by_role("param")}
    values = {**{k: torch.tensor(v) for k, v in state.items()},
              # Indices as int64, what torch code feeds (compile's decompositions of
              # embedding and cross-entropy build aranges in the index dtype: none for uint16).
              **{k: torch.tensor(v if v.dtype.kind == "f" else v.astype("int64"))
                 for k, v in feeds.items()}, **params}
    opt = torch.optim.SGD(list(params.values()), lr=LR)
    # Consecutive nodes of one block; what each block reads from before it and what is read
    # after it (only those leave a checkpointed block: the rest is recomputed in backward).
    blocks: list[list] = []
    for n in forward.nodes:
        if blocks and block_of(blocks[-1][0].name) == block_of(n.name):
            blocks[-1].append(n)
        else:
            blocks.append([n])
    later: set[str] = set(forward.outputs)
    needs = []
    for nodes in reversed(blocks):
        made = {o for n in nodes for o in n.outputs}
        needs.append(sorted(t for t in made if t in later))
        later |= {i for n in nodes for i in n.inputs}
    needs.reverse()

    # Normalized once, outside the step: torch.compile traces the step, not the planner's code.
    attrs = {n.name: get_op(n.op).normalize_attrs(n.attrs) for n in forward.nodes}

    # Each forward value dropped after its last forward read, as a module's locals are: what
    # stays alive is what autograd saved (kept in `env`, a step's forward peak would count
    # every value the forward made).
    last = {i: k for k, n in enumerate(forward.nodes) for i in n.inputs}
    kept = set(values) | set(forward.outputs)
    dead = [sorted(({i for i in n.inputs if last[i] == k} | set(n.outputs) - set(last))
                   - kept) for k, n in enumerate(forward.nodes)]
    index = {n.name: k for k, n in enumerate(forward.nodes)}

    def run_nodes(nodes, env):
        for n in nodes:
            env.update(zip(n.outputs, ops[n.op]([env[i] for i in n.inputs], attrs[n.name]),
                           strict=True))
            for t in dead[index[n.name]]:
                env.pop(t, None)

    def loss():
        env = dict(values)
        for nodes, out in zip(blocks, needs, strict=True):
            if spec["mode"] != "checkpoint" or not WRAPPED.fullmatch(block_of(nodes[0].name)):
                run_nodes(nodes, env)
                continue
            reads = sorted({i for n in nodes for i in n.inputs}
                           - {o for n in nodes for o in n.outputs})

            def block(*xs, nodes=nodes, reads=reads, out=out):
                inner = dict(zip(reads, xs, strict=True))
                run_nodes(nodes, inner)
                return tuple(inner[t] for t in out)

            env.update(zip(out, checkpoint(block, *[env[r] for r in reads],
                                           use_reentrant=False), strict=True))
        return env["loss"]

    if spec["mode"] == "budget":
        # torch.compile's activation-memory budget (the min-cut partitioner's knapsack over
        # what forward saves); aten ops run eagerly, no generated kernels: memory comparable.
        import torch._functorch.config as functorch_config

        functorch_config.activation_memory_budget = spec["budget"]
        loss = torch.compile(loss, backend="aot_eager_decomp_partition")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        if spec["mode"] == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu():
                value = loss()
        else:
            value = loss()
        value.backward()
        opt.step()

    return step


def torch_lacks(model: str) -> list[str]:
    """The forward ops of `model` torch_step cannot translate."""
    from planner.zoo import build

    name, kwargs = MODELS[model]
    return sorted({n.op for n in build(name, **kwargs).nodes} - set(torch_ops()))


def plans(model: str, work: Path, target) -> list[tuple[str, Path, int]]:
    """Build the executor at the four budgets, then recompute-only at the midpoint and the
    smallest budget recompute alone reaches: (label, package, arena bytes)."""
    from codegen.build import build as build_package
    from codegen.render import render
    from planner.errors import InfeasibleBudget
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.optimizer import Optimizer
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions, plan
    from planner.zoo import build

    name, kwargs = MODELS[model]
    graph = prepare(build(name, **kwargs), GraphOptions(optimizer=Optimizer(kind="sgd", lr=LR)))

    def at(budget, offload=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return plan(graph, target, options=PlanOptions(
                memory=MemoryOptions(budget_bytes=budget, offload=offload)))

    def smallest(offload):
        try:
            at(64, offload)
        except InfeasibleBudget as e:
            return e.smallest_bytes
        raise SystemExit(f"{model}: 64 bytes fit")

    free = at(None)
    arena = free.summary.memory.arena_bytes
    small, small_rc = smallest(True), smallest(False)
    mid = max((free.summary.memory.per_op_bound_bytes + arena) // 2, small)
    runs = [("free", None, True), ("mid", mid, True), ("low", (mid + small) // 2, True),
            ("smallest", small, True)]
    runs += [("rc mid", mid, False)] if mid > small_rc else []
    runs += [("rc smallest", small_rc, False)] if small_rc < arena else []
    out = []
    for k, (label, budget, offload) in enumerate(runs):
        p = free if budget is None else at(budget, offload)
        tree = render(p, work / f"{model}_{k}")
        out.append((label, build_package(tree).dir, p.summary.memory.arena_bytes))
    return out


def paired(times: list[float], free: list[float]) -> float:
    """The median over rounds of a run's step over the unconstrained run's step in the same
    round (two steps close in time: a ratio the machine's changing load moves less)."""
    return statistics.median(t / f for t, f in zip(times, free, strict=True))


def at_equal_peak(ours: dict[str, dict], peak: int) -> tuple[str, dict] | None:
    """Our fastest run whose measured peak is at or below `peak` (a run measured, not an
    interpolation), or None where no budget of ours got that low."""
    fits = [(r["median"], label) for label, r in ours.items() if r["peak"] <= peak]
    return (min(fits)[1], ours[min(fits)[1]]) if fits else None


def measure(configs: list[tuple[str, dict]], rounds: int) -> dict[str, dict]:
    procs = {}
    for label, spec in configs:
        procs[label] = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec),
                                         str(ROOT)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                        env={**os.environ, **CPU_LOAD_ENVIRONMENT})
    try:
        for label, p in procs.items():
            if p.stdout.readline().strip() != "ready":
                raise SystemExit(f"{label}: the child failed to start")
        times: dict[str, list[float]] = {label: [] for label in procs}
        for r in range(rounds):
            order = list(procs) if r % 2 == 0 else list(reversed(procs))
            for label in order:
                procs[label].stdin.write("\n")
                procs[label].stdin.flush()
                times[label].append(float(procs[label].stdout.readline()))
        out = {}
        for label, p in procs.items():
            p.stdin.close()
            last = json.loads(p.stdout.readline())
            out[label] = {"median": statistics.median(times[label]), "times": times[label],
                          **last}
        return out
    finally:
        for p in procs.values():
            if not p.stdin.closed:
                p.stdin.close()  # a child still reading steps ends (one failed: the rest end)
            p.wait(timeout=600)


def main() -> None:
    from planner.target.detect import detect
    from planner.target.records import Target

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-torch", action="store_true", help="our executor's runs only")
    ap.add_argument("--target", help="a target JSON file (default: this host, detected)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-memory-exec-"))
    print(f"load average before: {os.getloadavg()}")
    comparisons = []
    print(f"{'model':<13} {'run':<22} {'budget MiB':>10} {'step ms':>9} {'x free':>7} "
          f"{'peak MiB':>9} {'held MiB':>9}")
    # One detection for every model (under load, each would measure other peaks).
    target = detect() if args.target is None else Target.model_validate_json(
        Path(args.target).read_text())
    for model in args.models.split(","):
        built = plans(model, work, target)
        configs = [(f"ours {label}", {"kind": "ours", "package": str(pkg)})
                   for label, pkg, _ in built]
        lacks = torch_lacks(model)
        if args.no_torch:
            pass
        elif lacks:
            print(f"{model:<13} torch: the translator lacks {', '.join(lacks)}", flush=True)
        else:
            configs += [(f"torch {mode}", {"kind": "torch", "mode": mode, "model": model,
                                           "threads": args.threads})
                        for mode in ("plain", "checkpoint", "save_on_cpu")]
        budgets = {f"ours {label}": arena for label, _, arena in built}
        results = measure(configs, args.rounds)
        for label, r in results.items():
            b = f"{budgets[label] / 2**20:10.1f}" if label in budgets else f"{'':>10}"
            held = f"{r['held'] / 2**20:9.1f}" if r["held"] else f"{'':>9}"
            print(f"{model:<13} {label:<22} {b} {r['median'] * 1e3:9.1f} "
                  f"{paired(r['times'], results['ours free']['times']):7.2f} "
                  f"{r['peak'] / 2**20:9.1f} {held}", flush=True)
        ours = {k: v for k, v in results.items() if k in budgets}
        for mode in ("checkpoint", "save_on_cpu"):
            if f"torch {mode}" in results:
                comparisons.append((model, mode, results[f"torch {mode}"], ours))
    if comparisons:
        print("\nat equal measured peak: our fastest run whose peak is at or below torch's")
        print(f"{'model':<13} {'torch':<12} {'peak MiB':>9} {'step ms':>9}   {'ours':<9} "
              f"{'peak MiB':>9} {'step ms':>9} {'torch/ours':>10}")
        for model, mode, theirs, ours in comparisons:
            mine = at_equal_peak(ours, theirs["peak"])
            row = (f"{model:<13} {mode:<12} {theirs['peak'] / 2**20:9.1f} "
                   f"{theirs['median'] * 1e3:9.1f}   ")
            if mine is None:
                print(row + "(no budget of ours reaches this peak)")
                continue
            label, r = mine
            print(row + f"{label.removeprefix('ours '):<9} {r['peak'] / 2**20:9.1f} "
                  f"{r['median'] * 1e3:9.1f} {theirs['median'] / r['median']:10.2f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
