"""verify's overflow-flag rule (planner/verify/overflow.py) on real fp16-mixed plans sharded
over 2 ranks (ZeRO-1 and ZeRO-3, AdamW with clip_grad_norm_): they verify, and each edit that
would let the ranks skip different steps, or let an overflowing step change a parameter, is
refused naming the op."""

from __future__ import annotations

import functools
import json
import warnings

import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset
from planner.verify import verify_plan_data
from planner.zoo import build


@functools.cache
def _text(zero: int) -> str:
    graph = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=3, classes=2),
                                Optimizer(kind="adamw", clip_grad_norm=0.5),
                                precision="fp16-mixed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, preset("xeon-8180"), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=2, bucket_bytes=64,
                                              shard_optimizer=zero == 1,
                                              shard_parameters=zero == 3))).to_json()


def _node(data, op: str) -> dict:
    return next(n for n in data["graph"]["nodes"] if n["op"] == op)


@pytest.mark.parametrize("zero", [1, 3])
def test_sharded_fp16_plans_verify_and_read_the_reduced_flag(zero):
    data = json.loads(_text(zero))
    assert verify_plan_data(data) == []
    unscale = _node(data, "ShardedUnscaleGrads")
    flag = unscale["outputs"][-1]
    readers = [n for n in data["graph"]["nodes"] if flag in n["inputs"]]
    assert {n["op"] for n in readers} == {"UpdateLossScale", "SkipOnOverflow"} | (
        {"ShardedUpdate"} if zero == 1 else set())


@pytest.mark.parametrize("zero", [1, 3])
def test_a_flag_of_this_ranks_shards_only_is_refused(zero):
    # The unscale as one process's UnscaleGrads: each rank's flag of its own shards.
    data = json.loads(_text(zero))
    unscale = _node(data, "ShardedUnscaleGrads")
    unscale.update(op="UnscaleGrads", attrs={})
    next(o for o in data["ops"] if o["name"] == unscale["name"])["op"] = "UnscaleGrads"
    problems = verify_plan_data(data)
    assert any(f"of UnscaleGrads {unscale['name']!r}, which sees this rank's gradient shards "
               f"only" in p for p in problems), problems


def test_a_skip_reading_another_scalar_is_refused():
    data = json.loads(_text(3))
    skip = _node(data, "SkipOnOverflow")
    skip["inputs"][0] = "grad/total_norm"   # the clip's norm: a float32 scalar, not the flag
    problems = verify_plan_data(data)
    assert any(f"op {skip['name']!r} reads overflow flag 'grad/total_norm', which no unscale"
               in p for p in problems), problems


def test_a_sharded_update_that_does_not_skip_is_refused():
    data = json.loads(_text(1))
    update = _node(data, "ShardedUpdate")
    del update["attrs"]["skip_on_overflow"]
    update["inputs"].pop()
    problems = verify_plan_data(data)
    param = update["inputs"][0]
    assert any(f"op {update['name']!r} writes 'update/{param}', the next value of parameter "
               f"{param!r}, unguarded by the overflow flag" in p for p in problems), problems
