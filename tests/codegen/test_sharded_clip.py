"""clip_grad_norm_ under sharding (--shard-parameters, --shard-optimizer): each rank holds its
shards of the averaged gradients, so the plan clips them with a ShardedClipGradNorm
(planner/ops/collective.py) whose global norm sums every rank's squares (one float
all-reduced); 2 and 4 gloo ranks end with the parameters of PyTorch clipping the global batch's
gradients in one process (SGD and AdamW)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.codegen.dp_harness import (
    RANKS,
    build_package,
    check_numbers,
    launch_ranks,
    torch_reference,
    write_data,
)
from tests.helpers.sharded import gathered

MAX_NORM = 0.5
# (optimizer, ZeRO stage)
RUNS = (("sgd", 3), ("adamw", 3), ("adamw", 1))


@pytest.mark.parametrize("ranks", [pytest.param(RANKS, marks=pytest.mark.ci_sample),
                                   pytest.param(4, marks=pytest.mark.slow)])
def test_sharded_clipping_takes_the_global_norm_of_the_averaged_gradients(tmp_path, ranks):
    pkgs = [build_package(kind, tmp_path, ranks, shard=zero == 1, shard_parameters=zero == 3,
                          clip=MAX_NORM) for kind, zero in RUNS]
    for pkg in pkgs:
        graph = json.loads((pkg / "plan.json").read_text())["graph"]
        clip = [n for n in graph["nodes"] if n["op"] == "ShardedClipGradNorm"]
        assert len(clip) == 1 and all(i.startswith("shard/") for i in clip[0]["inputs"])
    data, params, x, labels = write_data(tmp_path, ranks=ranks)
    outs = [[tmp_path / f"{kind}{zero}_{r}.npz" for r in range(ranks)] for kind, zero in RUNS]
    runs = launch_ranks([os.pathsep.join(map(str, pkgs))] * ranks, data,
                        [os.pathsep.join(str(o[r]) for o in outs) for r in range(ranks)])
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    for (kind, zero), pkg, files in zip(RUNS, pkgs, outs, strict=True):
        whole = gathered(pkg, files, tmp_path, f"{kind}{zero}") if zero == 3 else files
        check_numbers(kind, ranks, runs, whole, params, x, labels, clip=MAX_NORM)
        for f in files:  # every rank summed its squares with the others (one float)
            facts = json.loads(open(f"{f}.json").read())
            assert any(n == 1 for _, n in facts["summed"]), facts["summed"]
    # The clip matters: PyTorch without it (or a rank clipping by its own shard's norm, which
    # is smaller) ends elsewhere, far beyond check_numbers' float32 tolerance.
    clipped, _ = torch_reference("sgd", params, x, labels, clip=MAX_NORM)
    free, _ = torch_reference("sgd", params, x, labels)
    assert max(float(np.abs(clipped[n] - free[n]).max()) for n in params) > 1e-2
