"""Data-parallel training through generated CPU executors on a gloo process group of 2 (and
4) processes on this machine (127.0.0.1, bounded timeouts): the parameters after 20 SGD and 20
Adam steps equal PyTorch stepping the global batch in one process, every rank holds
bit-identical parameters, and a group of the wrong size, ranks with different plans and a
killed rank each fail with a clear error on every surviving rank instead of hanging. The
buckets are summed in place in the arena (no copy), and two ranks sharing this host run on
disjoint CPUs. With --shard-optimizer (ZeRO-1) the same numbers, each rank reduce-scattering
and all-gathering its own shard of every bucket in place.

The ranks are separate processes (tests/codegen/dp_worker.py) rendezvousing through the
environment (MASTER_ADDR/PORT, RANK, WORLD_SIZE)."""

from __future__ import annotations

import json
import os
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
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import DataParallelOptions
from planner.target.detect import detect
from planner.target.shares import rank_cpus
from planner.zoo import build as zoo

dist = pytest.importorskip("torch.distributed")
torch = pytest.importorskip("torch")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from tests.codegen.dp_harness import (  # noqa: E402 - needs torch.distributed
    BUCKET_BYTES,
    LR,
    MLP,
    RANKS,
    ROOT,
    SHARD,
    STEPS,
    build_package,
    check_evaluation,
    check_numbers,
    check_own_shards,
    free_port,
    launch_ranks,
    torch_reference,
    write_data,
)


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    # SGD's two ranks share this host, each on its own core (one host of two cores or more);
    # Adam's take the whole host each.
    folder = tmp_path_factory.mktemp("dp")
    per_host = RANKS if detect(measure=False).cores >= RANKS else 1
    return {"sgd": build_package("sgd", folder, per_host=per_host),
            "adam": build_package("adam", folder)}


@pytest.mark.parametrize("kind,ranks",
                         [("adam", 2), pytest.param("sgd", 4, marks=pytest.mark.slow)])
def test_ranks_match_one_process_on_the_global_batch(packages, tmp_path, kind, ranks):
    # (SGD on 2 ranks: the test below.)
    package = packages[kind] if ranks == RANKS else build_package(kind, tmp_path, ranks)
    data, params, x, labels = write_data(tmp_path, ranks=ranks)
    outs = [tmp_path / f"rank{r}.npz" for r in range(ranks)]
    # Adam's ranks get their group passed explicitly (Executor(process_group=...)).
    runs = launch_ranks([package] * ranks, data, outs, group="new" if kind == "adam" else "")
    check_numbers(kind, ranks, runs, outs, params, x, labels)
    _check_summed_in_place(package, outs)
    check_evaluation(outs, x, labels)


def test_clipping_takes_the_norm_of_the_averaged_gradients(tmp_path):
    # clip_grad_norm_ after the all-reduce, as after DDP's backward: every rank scales by the
    # norm of the global batch's gradient (clipping each rank's own and averaging those
    # equals no single process). max_norm 0.5 clips most of the 20 steps.
    package = build_package("sgd", tmp_path, clip=0.5)
    graph = json.loads((package / "plan.json").read_text())["graph"]
    clip = next(n for n in graph["nodes"] if n["op"] == "ClipGradNorm")
    assert all(i.startswith("allreduce/") for i in clip["inputs"])
    data, params, x, labels = write_data(tmp_path)
    outs = [tmp_path / f"rank{r}.npz" for r in range(RANKS)]
    runs = launch_ranks([package] * RANKS, data, outs)
    check_numbers("sgd", RANKS, runs, outs, params, x, labels, clip=0.5)


@pytest.mark.slow  # CI's 20 minutes: make test-all runs it
def test_ranks_sharing_a_host_run_on_disjoint_cpus(packages, tmp_path):
    # Two ranks of one host (torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE, numbered against
    # their global ranks, so the placement follows LOCAL_RANK): every thread of each rank,
    # the process group's included, may run only on that rank's share of the cores, the
    # shares are disjoint, and the numbers are those of the global batch (SGD, 2 ranks).
    host = detect(measure=False)
    if host.cores < 2 or len(os.sched_getaffinity(0)) < len(host.logical_cpus):
        pytest.skip("needs two cores this process may use")
    package = packages["sgd"]
    data, params, x, labels = write_data(tmp_path)
    outs = [tmp_path / f"rank{r}.npz" for r in range(RANKS)]
    local = [{"LOCAL_RANK": str(RANKS - 1 - r), "LOCAL_WORLD_SIZE": str(RANKS)}
             for r in range(RANKS)]
    runs = launch_ranks([package] * RANKS, data, outs, local=local)
    check_numbers("sgd", RANKS, runs, outs, params, x, labels)
    _check_summed_in_place(package, outs)
    core_of = tuple(c.core for c in host.logical_cpus)
    used = []
    for r, out in enumerate(outs):
        threads = json.loads(Path(f"{out}.json").read_text())["threads"]
        mine = rank_cpus(core_of, RANKS, RANKS - 1 - r)
        assert len(threads) > 2  # the lanes, OpenMP's and gloo's threads
        cpus = {c for t in threads.values() for c in t}
        assert cpus <= set(mine.compute) | set(mine.comm), (r, threads)
        used.append(cpus)
    assert not used[0] & used[1], used


def _check_summed_in_place(package: Path, outs: list[Path]) -> None:
    """The buckets were summed where backward wrote them (the plan laid each out side by
    side in the arena): every view handed to the process group starts at a bucket's first
    gradient in the arena, not in a scratch copy, and spans the bucket."""
    data = json.loads((package / "plan.json").read_text())
    offset = {t["name"]: t["offset"] for t in data["tensors"]}
    size = {t["name"]: t["bytes"] for t in data["tensors"]}
    spans = {(offset[n["inputs"][0]], offset[n["inputs"][-1]] + size[n["inputs"][-1]])
             for n in data["graph"]["nodes"] if n["op"] == "AllReduce"}
    for out in outs:
        facts = json.loads(Path(f"{out}.json").read_text())
        stats = facts["stats"]
        base = stats["arena_address"]
        assert facts["summed"]
        assert {(a - base, a - base + 4 * n) for a, n in facts["summed"]} <= spans
        assert {o["impl"] for o in stats["ops"] if o["op"] == "AllReduce"} == {"in place"}


@pytest.mark.slow  # CI's 20 minutes: make test-all runs it
def test_ranks_with_different_plans_are_refused_on_every_rank(packages, tmp_path):
    data = write_data(tmp_path)[0]
    runs = launch_ranks([packages["sgd"], packages["adam"]], data,
                        [tmp_path / "a.npz", tmp_path / "b.npz"])
    for rank, r in enumerate(runs):
        assert r.returncode == 3, r.stdout[-2000:]
        line = next(s for s in r.stdout.splitlines() if s.startswith(f"rank {rank} error:"))
        assert "run different plans" in line and "ranks [0]" in line and "ranks [1]" in line


def test_a_group_of_the_wrong_size_is_refused(packages, tmp_path):
    data = write_data(tmp_path)[0]
    (r,) = launch_ranks([packages["sgd"]], data, [tmp_path / "a.npz"])
    assert r.returncode == 3, r.stdout[-2000:]
    assert ("rank 0 error: rank 0: the plan was made for 2 processes (--data-parallel 2) but "
            "the process group has 1") in r.stdout


@pytest.mark.ci_sample  # the slow tier's robustness cases: this one runs in CI
def test_a_killed_rank_fails_the_others_within_the_timeout(packages, tmp_path):
    data = write_data(tmp_path)[0]
    runs = launch_ranks([packages["sgd"]] * RANKS, data, [tmp_path / "a.npz", tmp_path / "b.npz"],
                        die_after=3, timeout_s=10.0)
    assert runs[1].returncode == 9
    assert runs[0].returncode == 3, runs[0].stdout[-2000:]
    line = next(s for s in runs[0].stdout.splitlines() if s.startswith("rank 0 error:"))
    assert "allreduce/" in line, line  # the step's error names the all-reduce op


@pytest.mark.slow  # CI's 20 minutes: make test-all runs it
@pytest.mark.parametrize("nodes", [1, 2])
def test_train_digits_ddp_example_runs_under_torchrun(tmp_path, nodes):
    # One node of 2 processes (each on its own core), or 2 nodes of one process each
    # rendezvousing over loopback (two torchrun launchers, as on two hosts).
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    port = str(free_port())
    procs = [subprocess.Popen(
        [str(torchrun), "--nnodes", str(nodes), "--node-rank", str(node), "--nproc-per-node",
         str(2 // nodes), "--master-addr", "127.0.0.1", "--master-port", port,
         "examples/train_digits_ddp.py", "--every", "0", "--out", str(tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in range(nodes)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=900)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the example hung")
    # It exits 1 unless the ranks' parameters are identical and test accuracy beats 95%.
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    assert "parameters identical on all 2 ranks" in outs[0]


def test_fp16_loss_scaling_skips_an_overflow_on_one_rank_on_every_rank(tmp_path):
    """fp16-mixed with loss scaling on 2 ranks: one rank's shard overflows float16 at step 2;
    the flag is taken from the averaged gradients, so both ranks skip that step and keep
    bit-identical parameters, optimizer state and loss scales (PyTorch's rule over the flags)."""
    from planner.graph.optimizer import LossScaling
    from tests.graph.loss_scale_cases import torch_scales

    steps, overflow = 6, 2
    graph = make_training_graph(zoo("mlp", batch=SHARD, **MLP), Optimizer(kind="momentum"),
                                precision="fp16-mixed",
                                loss_scaling=LossScaling(growth_interval=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=PlanOptions(data_parallel=DataParallelOptions(
            ranks=RANKS, bucket_bytes=BUCKET_BYTES)))
    package = build(render(p, tmp_path / "mlp_dp_fp16")).dir
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((steps, RANKS * SHARD, MLP["in_features"])) * 0.1).astype(np.float32)
    x[overflow, SHARD:] *= 1e4                    # rank 1's rows only
    labels = rng.integers(0, MLP["classes"], (steps, RANKS * SHARD)).astype(np.int64)
    params = init_params(graph, seed=0)
    data = tmp_path / "data.npz"
    np.savez(data, x=x, labels=labels, **{f"param:{k}": v for k, v in params.items()})
    outs = [tmp_path / f"rank{r}.npz" for r in range(RANKS)]
    for r in launch_ranks([package] * RANKS, data, outs):
        assert r.returncode == 0, r.stdout[-2000:]
    got = [dict(np.load(o)) for o in outs]
    for name in got[0]:
        assert np.array_equal(got[0][name], got[1][name]), name
    flags = [s == overflow for s in range(steps)]
    assert float(got[0]["optim/loss_scale"]) == torch_scales(flags, 2)[-1]
    assert not np.array_equal(got[0]["fc1/weight"], params["fc1/weight"])


@pytest.mark.parametrize("ranks", [RANKS, pytest.param(4, marks=pytest.mark.slow)])
def test_sharded_optimizer_ranks_match_one_process_on_the_global_batch(tmp_path, ranks):
    """--shard-optimizer (ZeRO-1) on 2 and 4 ranks, 20 SGD then 20 Adam steps (two plans, one
    process group): each rank reduce-scatters every gradient bucket, updates its shard of the
    parameters with its shard of the optimizer state, and all-gathers the parameters; they
    equal PyTorch on the global batch (the tolerance of _check_numbers: the same sums in
    another order) and are bit-identical on every rank; each rank's optimizer state is its
    own (the shards differ)."""
    kinds = ("sgd", "adam")
    packages = [build_package(kind, tmp_path, ranks, shard=True) for kind in kinds]
    data, params, x, labels = write_data(tmp_path, ranks=ranks)
    outs = {kind: [tmp_path / f"{kind}{r}.npz" for r in range(ranks)] for kind in kinds}
    runs = launch_ranks([os.pathsep.join(map(str, packages))] * ranks, data,
                        [os.pathsep.join(str(outs[k][r]) for k in kinds) for r in range(ranks)])
    for kind, package in zip(kinds, packages, strict=True):
        check_numbers(kind, ranks, runs, outs[kind], params, x, labels)
        check_own_shards(package, outs[kind])
        check_evaluation(outs[kind], x, labels)
    m = [dict(np.load(o))["shard/0/m"] for o in outs["adam"]]
    assert all(not np.array_equal(m[0], other) for other in m[1:])


@pytest.mark.slow  # CI's 20 minutes: make test-all runs it
def test_ranks_ending_without_destroying_the_group_exit_cleanly(packages, tmp_path):
    """Issue 32: a script that ends with a step in flight and without
    dist.destroy_process_group() aborted ("terminate called without an active exception",
    exit 134): its collective took the GIL while the interpreter finalized."""
    data = write_data(tmp_path)[0]
    runs = launch_ranks([packages["sgd"]] * RANKS, data, [tmp_path / "a.npz", tmp_path / "b.npz"],
                        local=[{"DP_END": "in-flight"}] * RANKS)
    for r in runs:
        assert r.returncode == 0 and "terminate" not in r.stdout, r.stdout[-2000:]


@pytest.mark.slow  # CI's 20 minutes: make test-all runs it
@pytest.mark.parametrize("local_ranks", [("0", "0"), ("0", "7")])
def test_a_rank_without_its_own_place_is_refused_on_every_rank(packages, tmp_path,
                                                               local_ranks):
    # Two ranks of a host given one LOCAL_RANK would pin the same CPUs; one out of range
    # has no share. Every rank refuses, not only the one whose LOCAL_RANK is wrong.
    if detect(measure=False).cores < RANKS:
        pytest.skip("the SGD package shares the host among its ranks on two cores or more")
    data = write_data(tmp_path)[0]
    local = [{"LOCAL_RANK": r, "LOCAL_WORLD_SIZE": str(RANKS)} for r in local_ranks]
    runs = launch_ranks([packages["sgd"]] * RANKS, data, [tmp_path / "a.npz", tmp_path / "b.npz"],
                        local=local)
    why = "both have LOCAL_RANK 0" if local_ranks == ("0", "0") else "LOCAL_RANK='7'"
    for rank, r in enumerate(runs):
        assert r.returncode == 3, r.stdout[-2000:]
        line = next(s for s in r.stdout.splitlines() if s.startswith(f"rank {rank} error:"))
        assert why in line, line


def test_bf16_mixed_ranks_match_one_process_on_the_global_batch(tmp_path):
    """Issue 32: bf16-mixed with --data-parallel failed to plan (an update before its bucket's
    all-reduce). 2 ranks step 4 SGD steps of the bf16-mixed MLP; every rank holds the same
    bits, and they equal PyTorch (float32) stepping the global batch to bfloat16's accuracy."""
    steps = 4
    graph = make_training_graph(zoo("mlp", batch=SHARD, **MLP),
                                Optimizer(kind="sgd", lr=LR["sgd"]), precision="bf16-mixed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Buckets of 1 KiB: two, and a bucket's last gradient cast after the update of
        # another of its gradients (smaller buckets happened to keep the order).
        p = plan(graph, detect(), options=PlanOptions(data_parallel=DataParallelOptions(
            ranks=RANKS, bucket_bytes=1024)))
    assert sum(op.op == "AllReduce" for op in p.ops) >= 2
    package = build(render(p, tmp_path / "mlp_dp_bf16")).dir
    path, params, x, labels = write_data(tmp_path)
    x, labels = x[:steps], labels[:steps]
    np.savez(path, x=x, labels=labels, **{f"param:{k}": v for k, v in params.items()})
    outs = [tmp_path / f"rank{r}.npz" for r in range(RANKS)]
    for r in launch_ranks([package] * RANKS, path, outs):
        assert r.returncode == 0, r.stdout[-2000:]
    got = [dict(np.load(o)) for o in outs]
    for name in got[0]:
        assert np.array_equal(got[0][name], got[1][name]), name
    want, gmax = torch_reference("sgd", params, x, labels)
    # Error, first order: every value rounded to bfloat16 (unit roundoff u = 2^-8) is off by
    # a factor (1 + d), |d| <= u, and a gradient's terms pass through at most one rounding per
    # node that writes bfloat16 (a path visits each node once): the ranks' gradient of a step
    # is within (low u + gamma32) gmax of the exact one, `low` that count, gamma32 the float32
    # sums' bound of _check_numbers; PyTorch's (float32 throughout) within gamma32 gmax. SGD
    # turns that into parameters as _check_numbers derives.
    low = sum(any(graph.tensor_map[t].dtype == "bfloat16" for t in n.outputs)
              for n in graph.nodes)
    gamma32 = 2 * (RANKS * SHARD + 16) * float(np.finfo(np.float32).eps)
    lr = LR["sgd"]
    tol = steps * lr * (low * 2.0 ** -8 + 2 * gamma32) * gmax * np.exp(steps * lr)
    worst = max(float(np.max(np.abs(got[0][n] - want[n]))) for n in want)
    moved = max(float(np.max(np.abs(want[n] - params[n]))) for n in want)
    # A rank stepping its own shard's gradient, or the sum of the ranks' (not their mean),
    # is off by about as much as the steps moved.
    assert moved > 2 * tol, (moved, tol, worst)
    assert worst <= tol, (worst, tol)


@pytest.mark.parametrize("kind", ["sgd", pytest.param("adam", marks=pytest.mark.slow)])
def test_accumulating_ranks_match_one_process_on_the_global_batch(tmp_path, kind):
    # 2 ranks x 2 micro-batches of 8 rows: each optimizer step equals PyTorch's on 32 rows.
    # The all-reduce reads the gradient sums once per optimizer step (no_sync() in DDP): a
    # plan reducing every micro-batch's gradient, or none, moves the parameters elsewhere.
    package = build_package(kind, tmp_path, accumulate=2)
    step = json.loads((package / "plan.json").read_text())
    reduced = {t for n in step["graph"]["nodes"] if n["op"] == "AllReduce" for t in n["inputs"]}
    assert reduced and all(t.endswith("/grad_sum") for t in reduced)
    data, params, x, labels = write_data(tmp_path)
    outs = [tmp_path / f"acc{r}.npz" for r in range(RANKS)]
    runs = launch_ranks([package] * RANKS, data, outs)
    check_numbers(kind, RANKS, runs, outs, params, x, labels, accumulate=2)
    for out in outs:  # one all-reduce call per optimizer step, none on the other micro-batches
        stats = json.loads(Path(f"{out}.json").read_text())["stats"]
        calls = {o["name"]: o["calls"] for o in stats["ops"]}
        assert {calls[n["name"]] for n in step["graph"]["nodes"]
                if n["op"] == "AllReduce"} == {STEPS // 2}
