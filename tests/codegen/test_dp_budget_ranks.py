"""Data-parallel plans under a memory budget met by recomputing (planner.memory.cpu_budget;
tests/memory/test_dp_budget.py plans them) train as the unbudgeted plan does: 2 gloo
processes sharing this machine's cores (tests/codegen/budget_dp_worker.py; one core each,
every op on one thread) step a small GPT with ZeRO-3
(`--shard-parameters`, whose recomputes read the parameter copies gathered for backward) and
plain data parallel, each from the same parameters and batches, under no budget and under the
smallest budget the planner meets (ZeRO-3 also with matrix products recomputed,
MemoryOptions.recompute_products), and end with the same parameters bit for bit: a recompute
runs its node's kernel at the node's thread count on the same inputs, so it writes the same
bits, and the collectives sum the same buckets."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from codegen.build import build
from codegen.render import render
from planner.errors import InfeasibleBudget
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.interpret import init_params, random_feeds
from planner.graph.optimizer import Optimizer, parse_hyperparameter_tensor
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.runtime.sharded import gather_params
from planner.schedule.parallel import DataParallelOptions
from planner.step.collectives import GatherChoice
from planner.target.detect import detect
from tests.codegen.dp_harness import RANKS, launch_ranks

GPT = "zoo:gpt?batch=4&seq=32&dim=32&heads=2&layers=2&vocab=64"
STEPS = 3
KINDS = {"zero3": {"shard_parameters": True, "gathers": GatherChoice()}, "dp": {}}
# per case: its kind, and whether matrix products are recomputed too
# (MemoryOptions.recompute_products: a GEMM run again at its thread count writes the same bits)
CASES = {"zero3": ("zero3", False), "dp": ("dp", False), "zero3-products": ("zero3", True)}


def _graph():
    return prepare(GPT, GraphOptions(optimizer=Optimizer(kind="adam", lr=0.01)))


def _plan(kind: str, budget: int | None = None, products: bool = False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(_graph(), detect(), options=PlanOptions(
            memory=MemoryOptions(budget_bytes=budget, offload=False,
                                 recompute_products=products),
            data_parallel=DataParallelOptions(ranks=RANKS, ranks_per_host=RANKS,
                                              **KINDS[kind])))


def _budgeted(kind: str, products: bool):
    """The plan under the smallest budget the planner meets (one it names refusing a quarter
    of the unbudgeted arena), which it meets by recomputing."""
    free = _plan(kind).summary.memory.arena_bytes
    with pytest.raises(InfeasibleBudget) as refused:
        _plan(kind, free // 4, products)
    p = _plan(kind, refused.value.smallest_bytes, products)
    assert p.summary.memory.arena_bytes < free and p.summary.memory.recompute_ops > 0
    return p


def _data(tmp_path):
    graph = _graph()
    params = {k: v for k, v in init_params(graph, seed=0).items()
              if graph.tensor(k).role == "param" and parse_hyperparameter_tensor(k) is None}
    feeds = {f"feed{r}:{k}": v for r in range(RANKS)
             for k, v in random_feeds(graph, seed=1 + r).items()}
    path = tmp_path / "data.npz"
    np.savez(path, **{f"param:{k}": v for k, v in params.items()}, **feeds)
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_a_budgeted_plan_trains_as_the_unbudgeted_one(tmp_path, case):
    kind, products = CASES[case]
    budgeted = _budgeted(kind, products)
    if products:
        assert any(budgeted.graph.node_map[m.node].op == "MatMul"
                   for m in budgeted.memory.ops if m.kind == "recompute")
    if kind == "zero3":  # a recompute of a forward op reads a copy gathered for backward
        buffers = {t.name: t.tensor for t in budgeted.tensors}
        assert any(buffers[b].startswith("regathered/") for m in budgeted.memory.ops
                   if m.kind == "recompute" for b in m.inputs)
    pkgs = [build(render(p, tmp_path / f"gpt_{case}_{tag}")).dir
            for tag, p in (("free", _plan(kind)), ("budget", budgeted))]
    outs = {r: [tmp_path / f"{tag}{r}.npz" for tag in ("free", "budget")]
            for r in range(RANKS)}
    runs = launch_ranks([os.pathsep.join(map(str, pkgs))] * RANKS, _data(tmp_path),
                        [os.pathsep.join(map(str, outs[r])) for r in range(RANKS)],
                        worker="tests.codegen.budget_dp_worker", extra=(str(STEPS),),
                        local=[{"LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(RANKS)}
                               for r in range(RANKS)])
    assert all(r.returncode == 0 for r in runs), [r.stdout[-1500:] for r in runs]
    got = {tag: [dict(np.load(outs[r][k])) for r in range(RANKS)]
           for k, tag in enumerate(("free", "budget"))}
    for r in range(RANKS):  # the same kernels on the same inputs: the same bits
        assert got["free"][r].keys() == got["budget"][r].keys()
        for name, value in got["free"][r].items():
            assert np.array_equal(value, got["budget"][r][name]), (kind, r, name)
    # and the steps trained: every parameter moved from where it started
    whole = gather_params((pkgs[0] / "plan.json").read_text(), got["free"]) \
        if kind == "zero3" else got["free"][0]
    start = np.load(tmp_path / "data.npz")
    assert all(not np.array_equal(whole[k.removeprefix("param:")], start[k])
               for k in start.files if k.startswith("param:"))
