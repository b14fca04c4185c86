"""Mixed precision under sharding (--shard-optimizer, --shard-parameters) on gloo ranks of this
machine. fp16-mixed: each rank unscales its shards of the averaged gradients and the ranks sum
their overflow flags (ShardedUnscaleGrads, planner/step/collectives/sharded_scaling.py), so a
step that overflows on one rank only is skipped by every rank, which all halve the scale alike, as
torch.amp's GradScaler with FSDP's ShardedGradScaler; bf16-mixed shards as float32 does. Held
to PyTorch stepping the global batch in one process (tests/codegen/dp_harness.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from planner.graph.interpret import INIT_LOSS_SCALE, init_params
from planner.graph.optimizer import parse_hyperparameter_tensor
from tests.codegen.dp_harness import (
    LR,
    MLP,
    RANKS,
    SHARD,
    build_package,
    launch_ranks,
    mlp_graph,
    torch_reference,
    write_data,
)
from tests.helpers.sharded import gathered

MAX_NORM = 0.5
STEPS = 8         # fp16-mixed's: few enough that float16's error, grown by e^(steps lr) over
OVERFLOW = 2      # the steps, stays well below what they move; rank 1's rows of step
                  # OVERFLOW overflow float16 once scaled
# (optimizer, ZeRO stage (0: replicated, the reference of AdamW's), clip_grad_norm_)
RUNS = (("sgd", 3, None), ("sgd", 1, None), ("adamw", 3, MAX_NORM), ("adamw", 1, MAX_NORM),
        ("adamw", 0, MAX_NORM))
EPS32 = float(np.finfo(np.float32).eps)


def _data(folder, ranks: int):
    """Batches of small inputs (gradients far below float16's range at the first scale,
    2^16), but for rank 1's rows of step OVERFLOW, 1e4 times larger: their scaled gradients
    overflow float16 there, on that rank only."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((STEPS, ranks * SHARD, MLP["in_features"])) * 0.1).astype(np.float32)
    x[OVERFLOW, SHARD:2 * SHARD] *= 1e4
    labels = rng.integers(0, MLP["classes"], (STEPS, ranks * SHARD)).astype(np.int64)
    params = {k: v for k, v in init_params(mlp_graph("sgd", SHARD), seed=0).items()
              if parse_hyperparameter_tensor(k) is None}
    path = folder / "data.npz"
    np.savez(path, x=x, labels=labels, **{f"param:{k}": v for k, v in params.items()})
    return path, params, x, labels


def _low_writers(package, dtype: str) -> int:
    """The nodes of the plan's graph that write a `dtype` tensor: the roundings a gradient's
    terms may pass through, at most one per node on a path."""
    graph = json.loads((package / "plan.json").read_text())["graph"]
    low = {t["name"] for t in graph["tensors"] if t.get("dtype") == dtype}
    return sum(bool(set(n["outputs"]) & low) for n in graph["nodes"])


def _sgd_tolerance(low: int, unit: float, rows: int, steps: int, gmax: float) -> float:
    """SGD's parameters against PyTorch (float32) after `steps` steps: every value rounded to
    the low type (unit roundoff `unit`) is off by a factor (1 + d), |d| <= unit, and a
    gradient's terms pass through at most `low` such roundings, so a step's gradient is
    within (low unit + gamma32) gmax of the exact one (gamma32: the float32 sums over the
    global batch and the layers' inner dimensions, in another order on each side, bounded
    as dp_harness.check_numbers does; `rows` of an optimizer step's global batch), PyTorch's
    within gamma32 gmax; SGD turns that into
    parameters as check_numbers derives. (Loss scaling is exact: the scales are powers of
    two, and at 2^15 or more no gradient here falls to float16's subnormals by more than
    2^-25 / 2^15 absolute.)"""
    gamma32 = 2 * (rows + 16) * EPS32
    lr = LR["sgd"]
    return steps * lr * (low * unit + 2 * gamma32) * gmax * np.exp(steps * lr)


def _same_on_every_rank(files) -> list[dict[str, np.ndarray]]:
    """Every rank's state, the same bits on every rank but its own shards and its own sums of
    its micro-batches' gradients."""
    got = [dict(np.load(f)) for f in files]
    for name in got[0]:
        if not name.startswith("shard/") and not name.endswith("/grad_sum"):
            assert all(np.array_equal(got[0][name], g[name]) for g in got[1:]), name
    return got


def _fp16_runs(tmp_path, ranks: int, runs_, k: int = 1) -> None:
    """Build `runs_` (optimizer, ZeRO stage, clip) in fp16-mixed with `k` micro-batches per
    optimizer step, run them on `ranks` gloo ranks over _data, and check them: every rank holds
    the same bits, skipped the optimizer step holding micro-batch OVERFLOW (the scale halved
    once, Adam's step count not counting it), and summed its flag with the others'. SGD ends
    where PyTorch does stepping the other steps' global batches, within float16's error
    (_sgd_tolerance). AdamW is held to the replicated plan's run (stage 0: all-reduced
    gradients, one UnscaleGrads over them, every rank doing the same float16 arithmetic on its
    rows) within float32's error (dp_harness.check_numbers' Adam bound): Adam divides each
    element's step by its own magnitude, so a float16 rounding of a gradient element nearer
    zero than its error can turn that element's step, and no float16 bound holds per element
    against PyTorch's float32."""
    pkgs = [build_package(kind, tmp_path, ranks, shard=zero == 1, shard_parameters=zero == 3,
                          clip=clip, accumulate=k, precision="fp16-mixed")
            for kind, zero, clip in runs_]
    for (_, zero, _), pkg in zip(runs_, pkgs, strict=True):
        graph = json.loads((pkg / "plan.json").read_text())["graph"]
        unscale = [n for n in graph["nodes"] if n["op"] == "ShardedUnscaleGrads"]
        shards = sorted(n["outputs"][0] for n in graph["nodes"] if n["op"] == "ReduceScatter")
        assert len(unscale) == bool(zero) and (not zero or sorted(unscale[0]["inputs"][:-1])
                                               == shards)
        assert any(n["op"] == "UnscaleGrads" for n in graph["nodes"]) == (not zero)
    data, params, x, labels = _data(tmp_path, ranks)
    outs = [[tmp_path / f"{kind}{zero}_{k}_{r}.npz" for r in range(ranks)]
            for kind, zero, _ in runs_]
    runs = launch_ranks([os.pathsep.join(map(str, pkgs))] * ranks, data,
                        [os.pathsep.join(str(o[r]) for o in outs) for r in range(ranks)])
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    kept = [s for s in range(STEPS) if s // k != OVERFLOW // k]
    steps, rows = len(kept) // k, k * ranks * SHARD
    final = {}
    for (kind, zero, _), pkg, files in zip(runs_, pkgs, outs, strict=True):
        got = _same_on_every_rank(files)
        # one overflow at the first scale: halved once, never grown (interval 2000)
        assert float(got[0]["optim/loss_scale"]) == INIT_LOSS_SCALE / 2, (kind, zero)
        if kind == "adamw":  # the skipped step is not counted
            assert float(got[0]["optim/step"]) == steps
        for f in files if zero else []:  # every rank summed its flag with the others'
            facts = json.loads(open(f"{f}.json").read())
            assert any(n == 1 for _, n in facts["summed"]), facts["summed"]
        whole = gathered(pkg, files, tmp_path, f"{kind}{zero}_{k}") if zero == 3 else files
        final[kind, zero] = dict(np.load(whole[0]))
    for (kind, zero, clip), pkg in zip(runs_, pkgs, strict=True):
        if kind == "sgd":
            want, gmax = torch_reference(kind, params, x[kept], labels[kept], clip,
                                         accumulate=k)
            tol = _sgd_tolerance(_low_writers(pkg, "float16"), 2.0 ** -11, rows, steps, gmax)
        elif zero:
            want = final[kind, 0]
            gamma32 = 2 * (rows + 16) * EPS32
            tol = steps * LR[kind] * 4 * gamma32 * np.exp(steps * LR[kind])
        else:
            continue
        mine = final[kind, zero]
        worst = max(float(np.max(np.abs(mine[n] - want[n]))) for n in params)
        moved = max(float(np.max(np.abs(want[n] - params[n]))) for n in params)
        assert moved > 2 * tol, (kind, zero, moved, tol)
        assert worst <= tol, (kind, zero, worst, tol)


@pytest.mark.parametrize("ranks", [pytest.param(RANKS, marks=pytest.mark.ci_sample),
                                   pytest.param(4, marks=pytest.mark.slow)])
def test_fp16_sharded_ranks_skip_the_step_one_rank_overflows_and_match_pytorch(tmp_path, ranks):
    """fp16-mixed, ZeRO-3 and ZeRO-1, SGD and AdamW with clip_grad_norm_: at step OVERFLOW
    only rank 1's gradients overflow; every rank skips that step and halves the scale, and
    the parameters end where one process's do on the global batch of every other step
    (_fp16_runs)."""
    _fp16_runs(tmp_path, ranks, RUNS)


def test_fp16_sharded_accumulation_skips_the_optimizer_step_one_micro_batch_overflows(tmp_path):
    """fp16-mixed with 2 micro-batches per optimizer step on 2 ranks (SGD with ZeRO-3, AdamW
    with clip_grad_norm_ and ZeRO-1): the shards of the gradient sums are unscaled and checked
    once per optimizer step, on its last micro-batch; rank 1's rows of micro-batch OVERFLOW
    overflow, so every rank skips the optimizer step holding it (_fp16_runs)."""
    _fp16_runs(tmp_path, RANKS, (("sgd", 3, None), ("adamw", 1, MAX_NORM),
                                 ("adamw", 0, MAX_NORM)), k=2)


def test_bf16_mixed_shards_match_pytorch_to_bfloat16s_accuracy(tmp_path):
    """bf16-mixed, ZeRO-3 and ZeRO-1 on 2 ranks, 4 SGD steps: the shards hold the float32
    gradients each update reads (bf16-mixed casts each low-precision gradient to float32
    before its reduce-scatter), and the gathered parameters equal PyTorch (float32) stepping
    the global batch within bfloat16's error (_sgd_tolerance with its unit roundoff, 2^-8)."""
    steps = 4
    zeros = (3, 1)
    pkgs = [build_package("sgd", tmp_path, shard=zero == 1, shard_parameters=zero == 3,
                          precision="bf16-mixed") for zero in zeros]
    data, params, x, labels = write_data(tmp_path)
    x, labels = x[:steps], labels[:steps]
    np.savez(data, x=x, labels=labels, **{f"param:{k}": v for k, v in params.items()})
    outs = [[tmp_path / f"bf16_{zero}_{r}.npz" for r in range(RANKS)] for zero in zeros]
    runs = launch_ranks([os.pathsep.join(map(str, pkgs))] * RANKS, data,
                        [os.pathsep.join(str(o[r]) for o in outs) for r in range(RANKS)])
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    want, gmax = torch_reference("sgd", params, x, labels)
    for zero, pkg, files in zip(zeros, pkgs, outs, strict=True):
        _same_on_every_rank(files)
        whole = gathered(pkg, files, tmp_path, f"bf16_{zero}") if zero == 3 else files
        mine = dict(np.load(whole[0]))
        tol = _sgd_tolerance(_low_writers(pkg, "bfloat16"), 2.0 ** -8, RANKS * SHARD, steps,
                             gmax)
        worst = max(float(np.max(np.abs(mine[n] - want[n]))) for n in want)
        moved = max(float(np.max(np.abs(want[n] - params[n]))) for n in want)
        assert moved > 2 * tol, (zero, moved, tol)
        assert worst <= tol, (zero, worst, tol)

