"""Gradient accumulation under sharding (--accumulate K with --shard-parameters or
--shard-optimizer): each rank sums its K micro-batches' gradients in its own sums, and the
reduce-scatters (a copy of the sums laid out as the bucket in their scratch area, `in_place` 0),
the clip and the updates run once per optimizer step, as FSDP's no_sync(); 2 and 4 gloo ranks
of 2 micro-batches equal PyTorch stepping the global batch of 2 x ranks x 8 rows."""

from __future__ import annotations

import json
import os

import pytest

from tests.codegen.dp_harness import (
    RANKS,
    build_package,
    check_numbers,
    launch_ranks,
    write_data,
)
from tests.helpers.sharded import gathered

K = 2
# (optimizer, ZeRO stage, clip_grad_norm)
RUNS = (("sgd", 3, None), ("adam", 1, None), ("adamw", 3, 0.5))


@pytest.mark.parametrize("ranks", [pytest.param(RANKS, marks=pytest.mark.ci_sample),
                                   pytest.param(4, marks=pytest.mark.slow)])
def test_sharded_ranks_accumulating_match_one_process_on_the_global_batch(tmp_path, ranks):
    pkgs = [build_package(kind, tmp_path, ranks, shard=zero == 1, shard_parameters=zero == 3,
                          clip=clip, accumulate=K) for kind, zero, clip in RUNS]
    for pkg in pkgs:
        graph = json.loads((pkg / "plan.json").read_text())["graph"]
        scatters = [n for n in graph["nodes"] if n["op"] == "ReduceScatter"]
        assert scatters and all(n["attrs"]["in_place"] == 0 for n in scatters)
    data, params, x, labels = write_data(tmp_path, ranks=ranks)
    outs = [[tmp_path / f"{kind}{zero}_{r}.npz" for r in range(ranks)] for kind, zero, _ in RUNS]
    runs = launch_ranks([os.pathsep.join(map(str, pkgs))] * ranks, data,
                        [os.pathsep.join(str(o[r]) for o in outs) for r in range(ranks)])
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    for (kind, zero, clip), pkg, files in zip(RUNS, pkgs, outs, strict=True):
        whole = gathered(pkg, files, tmp_path, f"{kind}{zero}") if zero == 3 else files
        check_numbers(kind, ranks, runs, whole, params, x, labels, clip=clip, accumulate=K)
