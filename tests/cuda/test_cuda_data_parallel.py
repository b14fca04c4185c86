"""Data-parallel plans on the CUDA executor: the gradient all-reduces (and with
--shard-optimizer, ZeRO-1's reduce-scatters and sharded updates) on the plan's comm stream,
run through torch.distributed on a CUDA view of the device arena (planner/runtime/distributed.py,
templates/cuda/runtime/kernels/collective.cu).

Without a GPU (CI): a GPU data-parallel plan verifies (planner verify re-derives every pair
of ops that must be ordered, so an event covers each dependency that crosses to or from the
comm stream), renders with the comm stream as a lane of its own, and compiles for sm_80 and
sm_90, sharded or not. On a GPU: two ranks train the MLP of tests/codegen/dp_harness.py
and match PyTorch stepping the global batch with every rank holding the same bits, as the
same model planned for the CPU does on gloo there: NCCL with a GPU per rank; on a machine of
one GPU, where NCCL refuses two ranks on one device, the two ranks share it over gloo's CUDA
collectives (the same executor path: a CUDA tensor, ordered on the comm stream)."""

from __future__ import annotations

import re

import pytest

from codegen.build import build
from codegen.render import render
from planner.pipeline import PlanOptions, plan
from planner.schedule.options import ScheduleOptions
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset
from planner.verify import verify_plan
from tests.codegen.helpers import gpu_test_target

pytest.importorskip("torch.distributed")
from tests.codegen.dp_harness import (  # noqa: E402 - needs torch.distributed
    BUCKET_BYTES,
    RANKS,
    SHARD,
    build_package,
    check_numbers,
    check_own_shards,
    launch_ranks,
    mlp_graph,
    write_data,
)


def _plan(kind: str, target, strategy: str = "optimized", shard: bool = False):
    return plan(mlp_graph(kind, SHARD), target, options=PlanOptions(
        schedule=ScheduleOptions(strategy=strategy),
        data_parallel=DataParallelOptions(ranks=RANKS, bucket_bytes=BUCKET_BYTES,
                                          shard_optimizer=shard)))


@pytest.mark.parametrize("strategy,shard", [("uniform", False), ("optimized", False),
                                            ("optimized", True)])
def test_a_gpu_data_parallel_plan_renders_with_its_comm_stream(strategy, shard, tmp_path):
    p = _plan("adam", preset("a100-80gb"), strategy, shard)
    assert verify_plan(p) == []
    comm = ("ReduceScatter", "ShardedUpdate") if shard else ("AllReduce",)
    ars = [op for op in p.ops if op.op in comm]
    assert len(ars) >= 2 and {op.stream for op in ars} == {"comm"}
    tree = render(p, tmp_path / f"mlp_dp_{strategy}", layout="plan")
    lanes = int(re.search(r"on (\d+) lane\(s\)", tree.files["schedule.cpp"]).group(1))
    assert lanes == len({op.stream for op in p.ops})  # the comm stream is a lane of its own
    assert comm[0] in tree.files["plan.json"] and "join(ex, plan" in tree.files["__init__.py"]


@pytest.mark.nvcc
@pytest.mark.parametrize("target", [pytest.param("a100-80gb", marks=pytest.mark.slow),  # sm_80
                                    "h100-80gb"])  # sm_90: the one CUDA runtime CI builds
def test_gpu_data_parallel_plans_compile(target, tmp_path):
    # The runtime (its collective kernels and set_collective among them) once per
    # architecture; an all-reduce plan and a ZeRO-1 one (Adam: the sharded state) against it.
    arch = {"a100-80gb": "sm80", "h100-80gb": "sm90"}[target]
    for name, p in [("mlp_dp", _plan("sgd", preset(target))),
                    ("mlp_zero1", _plan("adam", preset(target), shard=True))]:
        result = build(render(p, tmp_path / name))
        assert result.runtime.parent.parent.name.startswith(f"cuda-{arch}-runtime-")


@pytest.mark.gpu
def test_two_ranks_match_one_process_on_the_global_batch(tmp_path):
    import torch

    gpus = torch.cuda.device_count()
    backend = "nccl" if gpus >= RANKS else "gloo"
    package = build(render(_plan("sgd", gpu_test_target()), tmp_path / "mlp_dp_sgd")).dir
    data, params, x, labels = write_data(tmp_path)
    outs = [tmp_path / f"rank{r}.npz" for r in range(RANKS)]
    local = [{"DP_BACKEND": backend, "DP_DEVICE": str(r % gpus)} for r in range(RANKS)]
    runs = launch_ranks([package] * RANKS, data, outs, local=local, timeout_s=120.0)
    check_numbers("sgd", RANKS, runs, outs, params, x, labels)
    # The same model planned for the CPU, its ranks on gloo: both within the float32 bound of the
    # global batch's step, so within twice it of each other.
    cpu = build_package("sgd", tmp_path)
    cpu_outs = [tmp_path / f"cpu{r}.npz" for r in range(RANKS)]
    check_numbers("sgd", RANKS, launch_ranks([cpu] * RANKS, data, cpu_outs), cpu_outs, params, x,
                  labels)


@pytest.mark.gpu
def test_sharded_optimizer_ranks_match_one_process_on_the_global_batch(tmp_path):
    """--shard-optimizer (ZeRO-1) on the GPU, 20 SGD then 20 Adam steps (two plans, one
    process group), as tests/codegen/test_data_parallel.py's CPU test: each rank
    reduce-scatters every gradient bucket on the comm stream, updates its shard of the
    parameters with its shard of the optimizer state, and all-gathers the parameters; they
    equal PyTorch on the global batch within _check_numbers' float32 bound and are
    bit-identical on every rank; each rank reduce-scattered into and all-gathered from its own
    shard of each bucket in the device arena; each rank's optimizer state is its own."""
    import os

    import numpy as np
    import torch

    gpus = torch.cuda.device_count()
    backend = "nccl" if gpus >= RANKS else "gloo"
    target = gpu_test_target()
    kinds = ("sgd", "adam")
    packages = [build(render(_plan(kind, target, shard=True), tmp_path / f"mlp_zero1_{kind}")).dir
                for kind in kinds]
    data, params, x, labels = write_data(tmp_path)
    outs = {kind: [tmp_path / f"{kind}{r}.npz" for r in range(RANKS)] for kind in kinds}
    local = [{"DP_BACKEND": backend, "DP_DEVICE": str(r % gpus)} for r in range(RANKS)]
    runs = launch_ranks([os.pathsep.join(map(str, packages))] * RANKS, data,
                        [os.pathsep.join(str(outs[k][r]) for k in kinds) for r in range(RANKS)],
                        local=local, timeout_s=120.0)
    for kind, package in zip(kinds, packages, strict=True):
        check_numbers(kind, RANKS, runs, outs[kind], params, x, labels)
        check_own_shards(package, outs[kind])
    m = [dict(np.load(o))["shard/0/m"] for o in outs["adam"]]
    assert not np.array_equal(m[0], m[1])
