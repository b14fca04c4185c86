"""Data-parallel planning across precisions, optimizers, rank counts, --shard-optimizer and
targets (issue 32): every combination plans a plan that verifies, or is refused in one line
naming the flag; none raises anything else (a traceback) and none is refused by the planner's
own checker (PlanError). Planning only: nothing is built.

The whole product (3 models x 3 optimizers x 3 precisions x 2 rank counts x with and without
--shard-optimizer x 3 targets, 324 plans) takes minutes on a small machine; each (model,
optimizer, precision) here plans a rotation of the other axes, so that over the optimizers
and precisions every (ranks, shard, target) pair is planned for every model (ResNet-18, the
slowest to plan, on fewer)."""

from __future__ import annotations

import itertools
import warnings

import pytest

import planner.cli as cli
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset
from planner.verify import verify_plan
from tests.targets import two_cores

MODELS = {"mlp": "zoo:mlp?batch=8&hidden=16,12&in_features=10&classes=4",
          "lenet": "zoo:lenet?image=8&batch=16",
          "resnet-18": "zoo:resnet?depth=18&batch=4&image=32&classes=10"}
OPTIMIZERS = ("sgd", "momentum", "adam")
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")
TARGETS = {"xeon-8180": preset("xeon-8180"), "knl-7250": preset("knl-7250"),
           "two-cores": two_cores()}
# (ranks, --shard-optimizer, target): 12 settings, a rotation of them per case.
SETTINGS = tuple(itertools.product((2, 4), (False, True), TARGETS))
CASES = tuple(itertools.product(MODELS, OPTIMIZERS, PRECISIONS))


def _settings(case: int, model: str) -> tuple[tuple[int, bool, str], ...]:
    # 9 cases per model: 4 settings each cover all 12 three times over, 1 each (ResNet) 9.
    per = 1 if model == "resnet-18" else 4
    return tuple(SETTINGS[(case * per + k) % len(SETTINGS)] for k in range(per))


@pytest.mark.parametrize(("model", "optimizer", "precision"), CASES)
def test_every_data_parallel_combination_plans_or_is_refused_in_one_line(
        model, optimizer, precision):
    case = CASES.index((model, optimizer, precision)) % (len(OPTIMIZERS) * len(PRECISIONS))
    graph = prepare(MODELS[model], GraphOptions(optimizer=Optimizer(kind=optimizer),
                                                precision=precision))
    for ranks, shard, target in _settings(case, model):
        options = PlanOptions(data_parallel=DataParallelOptions(ranks=ranks,
                                                                shard_optimizer=shard))
        where = (model, optimizer, precision, ranks, shard, target)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # (plan verifies what it made: a self-refused plan raises PlanError here.)
            p = plan(graph, TARGETS[target], options=options)
        collective = "ReduceScatter" if shard else "AllReduce"
        assert any(op.op == collective for op in p.ops), where
        # fp16-mixed sharded: the overflow flag reduced over the ranks' shards
        assert any(op.op == "ShardedUnscaleGrads" for op in p.ops) == (
            shard and precision == "fp16-mixed"), where
        assert verify_plan(p) == [], where


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_mixed_precision_updates_read_the_averaged_gradients(precision):
    """Issue 32: bf16-mixed casts each gradient to float32 right before its update, so an
    update came before its bucket's last gradient (and its all-reduce): planning failed with
    "input tensor 'allreduce/grad/...' is used before the node that produces it". Each update
    (fp16-mixed: the UnscaleGrads) now reads the all-reduced gradients, after them."""
    graph = prepare("zoo:lenet?image=8&batch=16",
                    GraphOptions(optimizer=Optimizer(kind="momentum"), precision=precision))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, preset("xeon-8180"), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=2, bucket_bytes=4096)))
    position = {n.name: k for k, n in enumerate(p.graph.nodes)}
    reduced_by = {r: n.name for n in p.graph.nodes if n.op == "AllReduce" for r in n.outputs}
    assert len(set(reduced_by.values())) > 1
    readers = [n for n in p.graph.nodes if set(n.inputs) & set(reduced_by)]
    read = {t for n in readers for t in n.inputs if t in reduced_by}
    assert read == set(reduced_by)  # every averaged gradient is read, only after its all-reduce
    assert all(position[reduced_by[t]] < position[n.name]
               for n in readers for t in n.inputs if t in reduced_by)
    # the updates read no gradient that was not averaged
    grads = {t.name for t in p.graph.tensors if t.role == "grad"}
    assert not any(t in grads and t not in reduced_by
                   for n in readers for t in n.inputs if n.op != "UnscaleGrads")


@pytest.mark.parametrize("flags", [
    # Issue 32's reports: the planner refused its own plan (ops at the same time on a CPU).
    ["--train", "adam", "--precision", "fp16-mixed", "--data-parallel", "2"],
    ["--train", "momentum", "--data-parallel", "4"],
    ["--train", "sgd", "--precision", "bf16-mixed", "--data-parallel", "2"],
])
def test_the_reported_resnet_commands_plan_and_verify(tmp_path, flags):
    out = tmp_path / "p.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["plan", MODELS["resnet-18"], *flags, "--target", "xeon-8180",
                         "-o", str(out)]) == 0
    assert cli.main(["verify", str(out)]) == 0
