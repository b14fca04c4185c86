"""Gradient accumulation (planner/ir/accumulation.py) in the reference interpreter: K
micro-batches of B rows give the optimizer step of one batch of K * B rows, computed in
float64 so that only the order of the sums differs (a few float64 ulps), with every
optimizer, clip_grad_norm_ and parameter groups; the optimizer step runs on the last
micro-batch only; a graph whose optimizer step reads one micro-batch's gradient is refused."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import PlanError
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.interpret import init_params, random_feeds, train_step, widened
from planner.graph.optimizer import Optimizer, ParamGroup
from planner.graph.validate import GraphError, check_graph
from planner.ir.accumulation import MICRO_STEP, micro_batches, optimizer_step_nodes
from planner.memory.options import MemoryOptions, Pin
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset

MLP = "zoo:mlp?batch={batch}&hidden=16&in_features=8&classes=3"
MICRO = 2


def _graph(optimizer: Optimizer, batch: int, k: int = 1):
    return prepare(MLP.format(batch=batch), GraphOptions(optimizer=optimizer, accumulate=k))


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("optimizer", [
    Optimizer(kind="sgd", lr=0.1),
    Optimizer(kind="momentum", lr=0.05, nesterov=True, weight_decay=1e-3),
    Optimizer(kind="adamw", lr=0.01, clip_grad_norm=0.5,
              groups=[ParamGroup(params="bias$", weight_decay=0.0)]),
], ids=["sgd", "nesterov", "adamw-clip-groups"])
def test_micro_batches_give_the_step_of_the_whole_batch(optimizer, k):
    whole = widened(_graph(optimizer, MICRO * k))
    micro = widened(_graph(optimizer, MICRO, k))
    state = {n: v.astype(np.float64) if v.dtype == np.float32 else v
             for n, v in init_params(micro).items()}
    whole_state = {n: v for n, v in state.items() if n in whole.tensor_map}
    for step in range(3):
        feeds = random_feeds(whole, seed=step)
        _, whole_state = train_step(whole, feeds, whole_state)
        for m in range(k):
            _, state = train_step(micro, {n: v[m * MICRO:(m + 1) * MICRO]
                                          for n, v in feeds.items()}, state)
        for name, want in whole_state.items():
            # float64: the sums' order differs, so a few ulps of each value's magnitude.
            np.testing.assert_allclose(state[name], want, rtol=1e-12, atol=1e-13,
                                       err_msg=f"{name} after optimizer step {step}")
    assert int(state[MICRO_STEP]) == 3 * k


def test_the_optimizer_step_runs_on_the_last_micro_batch_only():
    g = _graph(Optimizer(kind="adam", lr=0.01), MICRO, 3)
    start = init_params(g)
    state = start
    for m in range(2):
        _, state = train_step(g, random_feeds(g, seed=m), state)
        for t in g.by_role("param", "optimizer-state"):
            if t.updates is not None:
                continue
            np.testing.assert_array_equal(state[t.name], start[t.name], err_msg=t.name)
    _, state = train_step(g, random_feeds(g, seed=2), state)
    assert float(state["optim/step"]) == 1.0 and int(state[MICRO_STEP]) == 3
    assert not np.array_equal(state["fc1/weight"], start["fc1/weight"])
    # The micro-batches' own part: AccumulateGrad and the count; the rest waits for the last.
    step_only = optimizer_step_nodes(g)
    assert micro_batches(g) == 3
    assert {n.op for n in g.nodes if n.name in step_only} == {"ApplyAdam", "Increment"}
    assert "update/optim/micro_step/increment" not in step_only


def test_an_optimizer_step_reading_one_micro_batchs_gradient_is_refused():
    g = _graph(Optimizer(kind="sgd"), MICRO, 2)
    update = next(n for n in g.nodes if n.op == "SGD")
    raw = next(n.inputs[1] for n in g.nodes if n.op == "AccumulateGrad"
               and n.outputs[0] == update.inputs[1])
    bad = g.model_copy(update={"nodes": tuple(
        n.model_copy(update={"inputs": (n.inputs[0], raw, *n.inputs[2:])}) if n is update else n
        for n in g.nodes)})
    with pytest.raises(GraphError, match=f"node '{update.name}' runs once per optimizer step "
                                         f"but reads '{raw}'"):
        check_graph(bad)


def test_accumulation_is_a_training_option_and_a_cpu_plan():
    with pytest.raises(ValueError, match="--accumulate needs --train"):
        GraphOptions(accumulate=2)
    g = _graph(Optimizer(kind="sgd"), MICRO, 2)
    with pytest.raises(PlanError, match="the cuda executor does not run that yet"):
        plan(g, preset("h100-80gb"))
    # Data parallel: the collectives reduce the sums, once per optimizer step.
    dp = plan(g, preset("xeon-8180"), options=PlanOptions(
        data_parallel=DataParallelOptions(ranks=2)))
    sums = {o for n in dp.graph.nodes if n.op == "AccumulateGrad" for o in n.outputs}
    reduced = [t for n in dp.graph.nodes if n.op == "AllReduce" for t in n.inputs]
    assert sorted(reduced) == sorted(sums)
    assert set(optimizer_step_nodes(dp.graph)) >= {n.name for n in dp.graph.nodes
                                                   if n.op == "AllReduce"}
    # Sharded (ZeRO-1, ZeRO-3): the reduce-scatters sum copies of the sums (in_place 0),
    # once per optimizer step, as do the sharded updates.
    for shard in ({"shard_optimizer": True}, {"shard_parameters": True}):
        z = plan(g, preset("xeon-8180"), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=2, **shard)))
        scatters = [n for n in z.graph.nodes if n.op == "ReduceScatter"]
        assert sorted(t for n in scatters for t in n.inputs) == sorted(sums)
        assert all(n.attrs["in_place"] == 0 for n in scatters)
        step = optimizer_step_nodes(z.graph)
        assert {n.name for n in scatters} <= step
        assert not any(n.name in step for n in z.graph.nodes if n.op == "AllGather")


def test_the_accumulate_flag(capsys):
    from planner.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["graph", MLP.format(batch=2), "--train", "sgd", "--accumulate", "0"])
    assert e.value.code == 2
    assert "--accumulate: expected a whole number >= 1, got 0" in capsys.readouterr().err
    assert main(["graph", MLP.format(batch=2), "--accumulate", "2"]) != 0
    assert "--accumulate needs --train" in capsys.readouterr().err
    assert main(["graph", MLP.format(batch=2), "--train", "sgd", "--accumulate", "2"]) == 0
    assert "AccumulateGrad" in capsys.readouterr().out


def test_a_budget_plan_orders_the_sums_before_the_step_that_reads_them():
    # CPU memory decisions (a budget, or the user's offload) order the step serially, moving
    # each update right after its last predecessor: an update that reads another update's
    # output (the optimizer step reading a gradient sum; the micro-batch count incremented
    # after every sum read it) comes after it, where it once went to the head of the step
    # ("edge 25 -> 23 does not follow the execution order").
    g = prepare("zoo:lenet?batch=64&image=16", GraphOptions(
        optimizer=Optimizer(kind="momentum"), accumulate=2))
    # (an offload the user asks for takes the budget search's path, whatever the budget)
    tight = plan(g, preset("xeon-8180"), options=PlanOptions(memory=MemoryOptions(
        pins=(Pin(decision="offload", name="relu1"),))))
    assert tight.summary.memory.offloaded_tensors >= 1
    order = {op.name: op.order for op in tight.ops}
    for n in tight.graph.nodes:
        for m in tight.graph.nodes:
            if set(m.outputs) & set(n.inputs):
                assert order[m.name] < order[n.name], (m.name, n.name)
