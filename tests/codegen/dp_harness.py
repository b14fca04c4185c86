"""The data-parallel tests' harness (tests/codegen/test_data_parallel.py on CPU executors,
tests/cuda/test_cuda_data_parallel.py on GPU ones): the MLP the ranks train, its plan built as
a package, the batches and start written for the workers (tests/codegen/dp_worker.py), the
ranks launched as processes on this machine, and their results checked against PyTorch stepping
the global batch in one process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from codegen.build import build
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params
from planner.graph.optimizer import Optimizer, parse_hyperparameter_tensor
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import DataParallelOptions
from planner.step.collectives import GatherChoice
from planner.target.detect import detect
from planner.zoo import build as zoo

RANKS, SHARD, STEPS = 2, 8, 20     # 2 processes x 8 rows: a global batch of 16
MLP = dict(hidden=[16, 12], in_features=10, classes=4)
LR = {"sgd": 0.1, "adam": 0.01, "adamw": 0.01}  # adamw: weight decay 0.01 (both defaults)
# Small buckets, so the plan has several all-reduces that overlap the rest of backward.
BUCKET_BYTES = 256
ROOT = Path(__file__).resolve().parents[2]


def mlp_graph(kind: str, batch: int, clip: float | None = None, accumulate: int = 1,
              precision: str = "fp32"):
    """The ranks' MLP training graph (`batch` rows per rank and micro-batch) with optimizer
    `kind`, one optimizer step per `accumulate` micro-batches, in `precision`."""
    return make_training_graph(zoo("mlp", batch=batch, **MLP),
                               Optimizer(kind=kind, lr=LR[kind], clip_grad_norm=clip),
                               precision=precision, accumulate=accumulate)


def build_package(kind: str, folder: Path, ranks: int = RANKS, per_host: int = 1,
                  shard: bool = False, clip: float | None = None, accumulate: int = 1,
                  shard_parameters: bool = False, precision: str = "fp32",
                  gathers: GatherChoice | None = None, tag: str = "") -> Path:
    """Plan the MLP (per-rank batch SHARD) for `ranks` processes, `per_host` of them sharing
    a host (`shard`: with --shard-optimizer; `shard_parameters`: --shard-parameters, with
    ZeRO-3's decisions `gathers` if given, else planning's; `clip`: clip_grad_norm_;
    `accumulate`: micro-batches per optimizer step; `precision`), render and build it (its
    folder's name ending in `tag`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = mlp_graph(kind, SHARD, clip, accumulate, precision)
        p = plan(graph, detect(), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=ranks, bucket_bytes=BUCKET_BYTES,
                                              ranks_per_host=per_host,
                                              shard_optimizer=shard,
                                              shard_parameters=shard_parameters,
                                              gathers=gathers)))
    sharded = shard or shard_parameters
    assert sum(op.op == ("ReduceScatter" if sharded else "AllReduce") for op in p.ops) >= 2
    name = f"mlp_dp_{kind}_{ranks}_{per_host}" + ("_zero1" if shard else "") + (
        "_zero3" if shard_parameters else "") + (
        "_clip" if clip else "") + (f"_acc{accumulate}" if accumulate > 1 else "") + (
        f"_{precision.replace('-', '_')}" if precision != "fp32" else "") + tag
    return build(render(p, folder / name)).dir


def write_data(folder: Path, seed: int = 0, ranks: int = RANKS
               ) -> tuple[Path, dict[str, np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((STEPS, ranks * SHARD, MLP["in_features"])).astype(np.float32)
    labels = rng.integers(0, MLP["classes"], (STEPS, ranks * SHARD)).astype(np.int64)
    # the model's parameters only: each optimizer's plan holds its own learning rate (state
    # the workers take from the plan's init, Executor(init=True))
    params = {k: v for k, v in init_params(mlp_graph("sgd", SHARD), seed=seed).items()
              if parse_hyperparameter_tensor(k) is None}
    path = folder / "data.npz"
    np.savez(path, x=x, labels=labels, **{f"param:{k}": v for k, v in params.items()})
    return path, params, x, labels


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(packages: list[Path] | list[str], data: Path, outs: list[Path] | list[str],
                 die_after: int | None = None, world: int | None = None, timeout_s: float = 30.0,
            group: str = "",
            local: list[dict[str, str]] | None = None,
            worker: str = "tests.codegen.dp_worker",
            extra: tuple[str, ...] | list[str] = ()) -> list[subprocess.CompletedProcess]:
    """Run one worker per package (rank = position) and wait for all, bounded; `local`: per
    rank, more environment (torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE; the worker's
    DP_BACKEND and DP_DEVICE); `worker`: the worker's module; `extra`: more arguments for
    every rank's worker, after its package, data and output."""
    port, world = free_port(), world or len(packages)
    procs = []
    for rank, (pkg, out) in enumerate(zip(packages, outs, strict=True)):
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_")}
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    "RANK": str(rank), "WORLD_SIZE": str(world), "DP_TIMEOUT": str(timeout_s),
                    "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "DP_GROUP": group,
                    **(local[rank] if local else {})})
        args = [sys.executable, "-m", worker, str(pkg), str(data), str(out), *extra]
        if die_after is not None and rank == len(packages) - 1:
            args.append(str(die_after))
        procs.append(subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        try:
            stdout, _ = p.communicate(timeout=timeout_s * 4 + 60)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a rank hung past the process group's timeout")
        results.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, ""))
    return results


def torch_reference(kind: str, params: dict[str, np.ndarray], x: np.ndarray,
                     labels: np.ndarray, clip: float | None = None, accumulate: int = 1,
                     state: dict[str, dict[str, np.ndarray]] | None = None
                     ) -> tuple[dict[str, np.ndarray], float]:
    """PyTorch stepping the global batch in one process (clip_grad_norm_ with `clip`): with
    `accumulate` K, one optimizer step on K consecutive batches of x as one batch of K times
    the rows; also the largest gradient seen. `state`, if given, receives the optimizer's
    final state per parameter name (torch's slot names)."""
    if accumulate > 1:
        x = x.reshape(x.shape[0] // accumulate, accumulate * x.shape[1], *x.shape[2:])
        labels = labels.reshape(labels.shape[0] // accumulate, -1)
    import torch

    names = [n for n in params if n.endswith("/weight") or n.endswith("/bias")]
    ts = {n: torch.tensor(params[n], requires_grad=True) for n in names}
    layers = sorted({n.rsplit("/", 1)[0] for n in names}, key=lambda s: int(s[2:]))
    opt = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind](
        ts.values(), lr=LR[kind])
    gmax = 0.0
    for step in range(x.shape[0]):
        h = torch.from_numpy(x[step])
        for k, layer in enumerate(layers):
            h = h @ ts[f"{layer}/weight"] + ts[f"{layer}/bias"]
            if k < len(layers) - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, torch.from_numpy(labels[step]))
        opt.zero_grad()
        loss.backward()
        gmax = max(gmax, max(float(t.grad.abs().max()) for t in ts.values()))
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(list(ts.values()), clip)
        opt.step()
    if state is not None:
        state.update({n: {k: np.asarray(v) for k, v in opt.state[t].items()}
                      for n, t in ts.items()})
    return {n: t.detach().numpy() for n, t in ts.items()}, gmax


def check_numbers(kind, ranks, runs, outs, params, x, labels, clip=None, accumulate=1):
    """Every rank ran, holds the same bits, and they equal PyTorch on the global batch (of
    `accumulate` micro-batches per rank)."""
    for r in runs:
        assert r.returncode == 0, r.stdout[-2000:]
    got = [dict(np.load(o)) for o in outs]
    # Every rank holds the same bits, but its own optimizer state shards and its own sums of
    # its micro-batches' gradients (reduced once per optimizer step, into a copy).
    for name in got[0]:
        if not name.startswith("shard/") and not name.endswith("/grad_sum"):
            assert all(np.array_equal(got[0][name], g[name]) for g in got[1:]), name
    want, gmax = torch_reference(kind, params, x, labels, clip, accumulate)
    # Float32 error: each step's gradient is a sum over the global batch of n = ranks x 8 rows
    # (and the layers' inner dimensions, at most 16), which the ranks and PyTorch add in
    # different orders: each side is within gamma = 2 (n + 16) eps of the exact sum, relative
    # to the largest gradient gmax. SGD moves a parameter by lr * g per step, so 20 steps
    # differ by at most steps * lr * 2 * gamma * gmax, times the growth a perturbation sees
    # through 20 steps of a contraction-free map (<= e^(steps * lr) for Hessian norms below 1
    # here).
    # Adam divides by sqrt(v): a relative gradient error gamma moves the step lr * m / sqrt(v)
    # by at most about 2 * gamma * lr where |g| dominates its rounding; we allow that per step.
    eps = float(np.finfo(np.float32).eps)
    # With accumulation: STEPS / K optimizer steps, each over K times the rows.
    gamma = 2 * (accumulate * ranks * SHARD + 16) * eps
    lr, steps = LR[kind], STEPS // accumulate
    tol = (steps * lr * 2 * gamma * gmax * np.exp(steps * lr) if kind == "sgd"
           else steps * lr * 4 * gamma * np.exp(steps * lr))
    worst = max(float(np.max(np.abs(got[0][n] - want[n]))) for n in want)
    moved = max(float(np.max(np.abs(want[n] - params[n]))) for n in want)
    assert moved > 100 * tol  # the steps did move the parameters
    assert worst <= tol, (worst, tol)


def check_own_shards(package: Path, outs: list[Path]) -> None:
    """Rank r reduce-scattered into, and all-gathered from, floats [r s, (r + 1) s) of each
    bucket, s its shard: the bucket's first member's place in the arena plus r x s (one plan
    on every rank; a shard offset that ignored the rank fails here), the whole padded bucket
    handed to the process group."""
    data = json.loads((package / "plan.json").read_text())
    offset = {t["name"]: t["offset"] for t in data["tensors"]}
    size = {t["name"]: t["shape"] for t in data["graph"]["tensors"]}
    buckets: dict[str, set[tuple[int, int]]] = {"scatter": set(), "gather": set()}
    for n in data["graph"]["nodes"]:
        # (the bucket's first member's offset, its shard's floats: the gradient shard's)
        grad = next((t for t in [*n["inputs"], *n["outputs"]] if t.endswith("/grad")
                     and t.startswith("shard/")), None)
        if n["op"] == "ReduceScatter":
            buckets["scatter"].add((offset[n["inputs"][0]], size[grad][0]))
        elif n["op"] == "ShardedUpdate":
            buckets["gather"].add((offset[n["inputs"][0]], size[grad][0]))
    ranks = len(outs)
    for r, out in enumerate(outs):
        facts = json.loads(Path(f"{out}.json").read_text())
        base = facts["stats"]["arena_address"]
        for kind in ("scatter", "gather"):
            calls = facts["sharded"][kind]
            assert calls, kind
            got = {(whole - base, n_mine) for whole, n, mine, n_mine in calls}
            assert got <= buckets[kind], (kind, got, buckets[kind])
            for whole, n, mine, n_mine in calls:
                assert n == ranks * n_mine and mine - whole == 4 * r * n_mine, (r, kind)


def check_evaluation(outs: list[Path], x: np.ndarray, labels: np.ndarray) -> None:
    """Each rank's evaluate() of its rows of the first batch (dp_worker) equals PyTorch's
    forward of the MLP with that rank's trained parameters: the plan's evaluation schedule,
    from the same build, on every rank."""
    import torch

    ranks = len(outs)
    shard = x.shape[1] // ranks
    eps = float(np.finfo(np.float32).eps)
    for r, out in enumerate(outs):
        got = json.loads(Path(f"{out}.json").read_text())["evaluate"]
        assert got is not None, "the data-parallel plan carries no evaluation"
        params = {k: torch.tensor(v, dtype=torch.float64) for k, v in np.load(out).items()}
        layers = sorted({n.rsplit("/", 1)[0] for n in params
                         if n.endswith("/weight") and n.startswith("fc")},
                        key=lambda s: int(s[2:]))
        h = torch.tensor(x[0, r * shard:(r + 1) * shard], dtype=torch.float64)
        for k, layer in enumerate(layers):
            h = h @ params[f"{layer}/weight"] + params[f"{layer}/bias"]
            if k < len(layers) - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(
            h, torch.from_numpy(labels[0, r * shard:(r + 1) * shard]))
        # float32 sums of at most 16 products per logit, relative to their magnitude
        tol = 2 * 16 * eps * (1 + float(h.abs().max()))
        np.testing.assert_allclose(np.asarray(got["logits"]), h.numpy(), rtol=0, atol=tol)
        assert abs(float(np.asarray(got["loss"])) - float(loss)) <= tol
