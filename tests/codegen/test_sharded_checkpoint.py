"""state_dict() / load_state_dict() of sharded data-parallel plans (ZeRO-3 --shard-parameters,
ZeRO-1 --shard-optimizer; planner/runtime/sharded_checkpoint.py): every rank's state_dict() is
the whole state, all-gathered from the ranks' shards, equal to PyTorch's parameters and Adam
state after stepping the global batch in one process; and a run stopped halfway, its
checkpoint pickled and loaded into a new executor, ends bit for bit where the uninterrupted
run does (tests/codegen/resume_worker.py)."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from tests.codegen.dp_harness import (
    LR,
    RANKS,
    SHARD,
    STEPS,
    build_package,
    check_numbers,
    launch_ranks,
    torch_reference,
    write_data,
)

# (optimizer, ZeRO stage)
RUNS = (("sgd", 3), ("adam", 3), ("adam", 1))


def _same(a, b, where: str = "") -> None:
    """a and b hold the same keys and the same bits (nested dicts and lists of arrays)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (where, list(a), list(b))
        for k in a:
            _same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{k}]")
    else:
        x, y = np.asarray(a), np.asarray(b)
        assert x.dtype == y.dtype and np.array_equal(x, y), where


@pytest.mark.parametrize("ranks", [pytest.param(RANKS, marks=pytest.mark.ci_sample),
                                   pytest.param(4, marks=pytest.mark.slow)])
def test_a_sharded_run_resumes_bit_for_bit_and_its_state_is_pytorchs(tmp_path, ranks):
    pkgs = [build_package(kind, tmp_path, ranks, shard=zero == 1, shard_parameters=zero == 3)
            for kind, zero in RUNS]
    data, params, x, labels = write_data(tmp_path, ranks=ranks)
    outs = [[tmp_path / f"{kind}{zero}_{r}.pkl" for r in range(ranks)] for kind, zero in RUNS]
    runs = launch_ranks([os.pathsep.join(map(str, pkgs))] * ranks, data,
                        [os.pathsep.join(str(o[r]) for o in outs) for r in range(ranks)],
                        worker="tests.codegen.resume_worker", timeout_s=60.0)
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    eps = float(np.finfo(np.float32).eps)
    for (kind, zero), files in zip(RUNS, outs, strict=True):
        got = [pickle.loads(f.read_bytes()) for f in files]
        for g in got:  # every rank: the whole state, the same bits, resumed or not
            _same(got[0]["straight"], g["straight"], f"{kind} ZeRO-{zero}")
            _same(got[0]["straight"], g["resumed"], f"{kind} ZeRO-{zero} resumed")
        whole = got[0]["straight"]
        # the parameters: PyTorch's on the global batch (check_numbers' tolerance)
        paths = []
        for r in range(ranks):
            paths.append(tmp_path / f"{kind}{zero}_model{r}.npz")
            np.savez(paths[-1], **whole["model"])
        check_numbers(kind, ranks, runs, paths, params, x, labels)
        groups = whole["optimizer"]["param_groups"]
        assert len(groups) == 1 and groups[0]["lr"] == pytest.approx(LR[kind])
        assert sorted(groups[0]["params"]) == sorted(params)
        state = whole["optimizer"]["state"]
        if kind == "sgd":
            assert state == {}
            continue
        want: dict[str, dict[str, np.ndarray]] = {}
        _, gmax = torch_reference(kind, params, x, labels, state=want)
        assert sorted(state) == sorted(params)
        # Adam's state from gradients that differ from PyTorch's by the reduction order
        # (gamma of the largest gradient, as check_numbers) and by the parameters' own drift
        # (at most check_numbers' bound, through a Hessian of norm below 1): m by their sum,
        # v = mean g^2 by twice the largest gradient times that.
        gamma = 2 * (ranks * SHARD + 16) * eps
        drift = STEPS * LR[kind] * 4 * gamma * np.exp(STEPS * LR[kind])
        dg = gamma * gmax + drift
        for name, slots in state.items():
            assert float(slots["step"]) == STEPS
            np.testing.assert_allclose(slots["exp_avg"], want[name]["exp_avg"], rtol=0,
                                       atol=dg)
            np.testing.assert_allclose(slots["exp_avg_sq"], want[name]["exp_avg_sq"], rtol=0,
                                       atol=2 * gmax * dg + dg * dg)
            assert np.abs(want[name]["exp_avg"]).max() > 100 * dg  # the state did move
