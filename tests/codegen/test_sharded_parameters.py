"""--shard-parameters (ZeRO-3) on the CPU executor: 2 gloo processes on this machine, each
holding 1/2 of every parameter bucket, of its gradients and of its optimizer state, gather
the buckets before their readers (tests/codegen/dp_harness.py, dp_worker.py), and end with
parameters equal to PyTorch stepping the global batch in one process; each rank holds fewer
bytes than the unsharded data-parallel plan by its share of what it no longer replicates."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from planner.step.collectives import GatherChoice
from planner.step.collectives.data_parallel import buckets
from tests.codegen.dp_harness import (
    BUCKET_BYTES,
    RANKS,
    SHARD,
    build_package,
    check_evaluation,
    check_numbers,
    launch_ranks,
    mlp_graph,
    write_data,
)
from tests.helpers.sharded import gathered


def _replicated_bytes(package) -> tuple[int, int]:
    """(bytes of the parameters, gradients and optimizer state an unsharded plan holds per
    rank, of them the parameters'): each updated parameter, its gradient and its slots."""
    graph = json.loads((package / "plan.json").read_text())["graph"]
    size = {t["name"]: 4 * int(np.prod(t["shape"], dtype=np.int64)) for t in graph["tensors"]}
    slots = {"SGD": 0, "ApplyMomentum": 1, "ApplyAdam": 2}
    params = [(n["inputs"][0], slots[n["op"]]) for n in graph["nodes"] if n["op"] in slots]
    return sum(size[p] * (2 + k) for p, k in params), sum(size[p] for p, _ in params)


def _held(outs) -> list[int]:
    return [int(json.loads(open(f"{o}.json").read())["stats"]["held_bytes"]) for o in outs]


@pytest.mark.parametrize("ranks", [pytest.param(RANKS, marks=pytest.mark.ci_sample),
                                   pytest.param(4, marks=pytest.mark.slow)])
def test_sharded_parameter_ranks_match_one_process_on_the_global_batch(tmp_path, ranks):
    """20 SGD then 20 Adam steps of --shard-parameters plans, and the unsharded plans, on 2
    and 4 ranks in one process group: the gathered shards equal PyTorch on the global batch
    (check_numbers' float32 tolerance), each rank's evaluate() equals PyTorch's forward of
    its rows, every rank's step really all-gathered and
    reduce-scattered its own shards, and each rank's held bytes are the unsharded plan's
    less (N-1)/N of the parameters, gradients and optimizer state, but for the gathered
    copies' window."""
    kinds = ("sgd", "adam")
    zero3 = {k: build_package(k, tmp_path, ranks, shard_parameters=True) for k in kinds}
    plain = {k: build_package(k, tmp_path, ranks) for k in kinds}
    data, params, x, labels = write_data(tmp_path, ranks=ranks)
    order = [(k, z) for k in kinds for z in (True, False)]
    pkgs = [(zero3 if z else plain)[k] for k, z in order]
    outs = {(k, z): [tmp_path / f"{k}{'z' if z else 'p'}{r}.npz" for r in range(ranks)]
            for k, z in order}
    runs = launch_ranks([os.pathsep.join(map(str, pkgs))] * ranks, data,
                        [os.pathsep.join(str(outs[o][r]) for o in order) for r in range(ranks)])
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    for kind in kinds:
        whole = gathered(zero3[kind], outs[kind, True], tmp_path, kind)
        check_numbers(kind, ranks, runs, whole, params, x, labels)
        # each rank's evaluate() of its rows, from the same build (its all-gathers on the
        # group), equals PyTorch's forward with the gathered parameters
        for out, w in zip(outs[kind, True], whole, strict=True):
            shutil.copy(f"{out}.json", f"{w}.json")
        check_evaluation(whole, x, labels)
        # every rank gathered and scattered through the process group, its own shard placed
        for r, out in enumerate(outs[kind, True]):
            facts = json.loads(open(f"{out}.json").read())
            for what in ("scatter", "gather"):
                calls = facts["sharded"][what]
                assert calls, what
                assert all(n == ranks * n_mine and mine - whole_at == 4 * r * n_mine
                           for whole_at, n, mine, n_mine in calls), (what, calls)
        replicated, param_bytes = _replicated_bytes(plain[kind])
        held_plain, held_zero3 = _held(outs[kind, False]), _held(outs[kind, True])
        saved = (ranks - 1) * replicated // ranks
        for h0, h3 in zip(held_plain, held_zero3, strict=True):
            assert h3 <= h0 - saved + param_bytes, (h3, h0, saved, param_bytes)


def test_every_zero3_decision_trains_as_one_process(tmp_path):
    """ZeRO-3's decisions at their extremes, as planning may choose them (GatherChoice): every
    bucket's forward copy freed and gathered again for backward, each all-gather issued right
    behind the op before its first reader (prefetch depth 0); and every forward copy kept
    for backward. 20 Adam steps on 2 ranks each end equal to PyTorch on the global batch."""
    count = len(buckets(mlp_graph("adam", SHARD), BUCKET_BYTES))
    depth0 = tuple((f"allgather/{k}{phase}", 0) for k in range(count)
                   for phase in ("", "/backward"))
    choices = {"freed": GatherChoice(keep=(False,) * count, prefetch=depth0),
               "kept": GatherChoice(keep=(True,) * count)}
    pkgs = {name: build_package("adam", tmp_path, shard_parameters=True, gathers=g,
                                tag=f"_{name}") for name, g in choices.items()}
    for name, pkg in pkgs.items():  # the decisions are the plan's
        graph = json.loads((pkg / "plan.json").read_text())["graph"]
        backward = sum(n["name"].endswith("/backward") for n in graph["nodes"])
        assert (backward > 0) == (name == "freed"), (name, backward)
    data, params, x, labels = write_data(tmp_path)
    outs = {name: [tmp_path / f"{name}{r}.npz" for r in range(RANKS)] for name in pkgs}
    runs = launch_ranks([os.pathsep.join(str(p) for p in pkgs.values())] * RANKS, data,
                        [os.pathsep.join(str(outs[n][r]) for n in pkgs) for r in range(RANKS)])
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    for name, pkg in pkgs.items():
        check_numbers("adam", RANKS, runs, gathered(pkg, outs[name], tmp_path, name), params,
                      x, labels)
