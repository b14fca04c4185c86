"""A checkpoint of any world size loads into any other of the same model and optimizer, by name
(issue 85, item 3; planner/runtime/checkpoint_names.py): one process, plain data parallel,
ZeRO-1 and ZeRO-3, on 1, 2 and 3 ranks (gloo, CPU). Each source trains the first half of the
global batches from the same start, its state_dict() goes through pickle, and each target
loads it on every rank: its state_dict() right after is the checkpoint's, bit for bit (the
optimizer state compared by parameter name, whatever the key), and the second half trains to
PyTorch's uninterrupted Adam run on the global batch within float32's reduction-order error
(dp_harness.check_numbers' bound: a lost step count or moment would be far outside it).
ZeRO-3 on 2 ranks into one process runs in the fast tier; the whole matrix in the slow one."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

from codegen.build import build
from codegen.render import render
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import DataParallelOptions
from planner.target.detect import detect
from tests.codegen.dp_harness import (
    BUCKET_BYTES,
    LR,
    STEPS,
    launch_ranks,
    mlp_graph,
    torch_reference,
    write_data,
)

GLOBAL = 24  # rows per step: whole on 1, 12 a rank on 2, 8 on 3
HALF = STEPS // 2
# (name, ranks, ZeRO stage: 0 plain data parallel or one process)
WORLDS = {"one": (1, 0), "dp2": (2, 0), "zero1_2": (2, 1), "zero3_2": (2, 3),
          "zero3_3": (3, 3)}


def _package(world: str, folder: Path) -> Path:
    ranks, zero = WORLDS[world]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = mlp_graph("adam", GLOBAL // ranks)
        options = PlanOptions() if ranks == 1 else PlanOptions(data_parallel=DataParallelOptions(
            ranks=ranks, bucket_bytes=BUCKET_BYTES, shard_optimizer=zero == 1,
            shard_parameters=zero == 3))
        p = plan(graph, detect(), options=options)
    return build(render(p, folder / f"mlp_adam_{world}")).dir


def _run(package: Path, ranks: int, data: Path, out: Path, first: int, last: int,
         checkpoint: Path | None = None) -> dict:
    args = [str(first), str(last)] + ([str(checkpoint)] if checkpoint else [])
    runs = launch_ranks([package] * ranks, data, [str(out)] * ranks,
                        worker="tests.codegen.world_worker", timeout_s=60.0,
                        extra=args)
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    return pickle.loads(out.read_bytes())


def _by_name(ckpt: dict) -> dict[str, dict[str, np.ndarray]]:
    """The optimizer state by parameter name, whichever way the checkpoint keys it."""
    from planner.runtime.checkpoint_names import by_name

    opt = ckpt["optimizer"]
    return by_name(opt["state"], opt["param_groups"])[0]


def _same_state(got: dict, want: dict, where: str) -> None:
    assert sorted(got["model"]) == sorted(want["model"]), where
    for name, value in want["model"].items():
        assert np.array_equal(got["model"][name], value), (where, name)
    a, b = _by_name(got), _by_name(want)
    assert sorted(a) == sorted(b), where
    for name in b:
        assert sorted(a[name]) == sorted(b[name]), (where, name)
        for slot in b[name]:
            assert np.array_equal(np.asarray(a[name][slot]), np.asarray(b[name][slot])), (
                where, name, slot)
    lrs = [g["lr"] for g in got["optimizer"]["param_groups"]]
    assert lrs == [g["lr"] for g in want["optimizer"]["param_groups"]], where


def _check_pair(tmp_path: Path, source: str, target: str, packages: dict[str, Path],
                data: Path, start: dict, x: np.ndarray, labels: np.ndarray,
                want: dict[str, np.ndarray], tol: float) -> None:
    saved = tmp_path / f"{source}.pkl"
    if not saved.exists():
        half = _run(packages[source], WORLDS[source][0], data, tmp_path / f"{source}_half.out",
                    0, HALF)
        saved.write_bytes(pickle.dumps(half["end"]))
    ckpt = pickle.loads(saved.read_bytes())
    got = _run(packages[target], WORLDS[target][0], data,
               tmp_path / f"{source}_to_{target}.out", HALF, STEPS, saved)
    _same_state(got["loaded"], ckpt, f"{source} -> {target}")
    end = got["end"]["model"]
    worst = max(float(np.max(np.abs(end[n] - want[n]))) for n in want)
    assert worst <= tol, (source, target, worst, tol)


def _matrix(tmp_path: Path, pairs: list[tuple[str, str]]) -> None:
    worlds = sorted({w for pair in pairs for w in pair})
    packages = {w: _package(w, tmp_path) for w in worlds}
    data, start, x, labels = write_data(tmp_path, ranks=GLOBAL // 8)
    want, gmax = torch_reference("adam", start, x, labels)
    moved = max(float(np.max(np.abs(want[n] - start[n]))) for n in want)
    # dp_harness.check_numbers' bound for Adam: each step's gradient a sum over GLOBAL rows
    # (and inner dimensions up to 16) in another order than PyTorch's.
    eps = float(np.finfo(np.float32).eps)
    gamma = 2 * (GLOBAL + 16) * eps
    tol = STEPS * LR["adam"] * 4 * gamma * np.exp(STEPS * LR["adam"])
    assert moved > 100 * tol
    for source, target in pairs:
        _check_pair(tmp_path, source, target, packages, data, start, x, labels, want, tol)


@pytest.mark.ci_sample
def test_a_zero3_checkpoint_of_2_ranks_loads_into_one_process_and_back(tmp_path):
    _matrix(tmp_path, [("zero3_2", "one"), ("one", "zero3_2")])


@pytest.mark.slow
def test_every_world_sizes_checkpoint_loads_into_every_other(tmp_path):
    _matrix(tmp_path, [(a, b) for a in WORLDS for b in WORLDS if a != b])


def test_an_index_keyed_checkpoint_without_names_is_refused_by_a_sharded_plan():
    from planner.runtime.checkpoint_names import by_index, by_name

    state = {0: {"step": 1.0}}
    with pytest.raises(ValueError, match="parameter group 0 gives its parameters by index "
                                         "without their param_names"):
        by_name(state, [{"lr": 0.1, "params": [0]}])
    with pytest.raises(ValueError, match="the optimizer state names 'fc9/weight', not a "
                                         "parameter this plan updates"):
        by_index({"fc9/weight": {}}, [{"lr": 0.1, "params": ["fc9/weight"]}], ["fc1/weight"])
