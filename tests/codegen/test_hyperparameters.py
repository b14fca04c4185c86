"""The learning rate and weight decay are scalars the step reads (per parameter group), not
constants compiled in: a plan does not change with them, and the CPU executor follows
set_hyperparameters between steps as the numpy reference follows its state."""

from __future__ import annotations

import difflib
import warnings

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.optimizer import Optimizer, ParamGroup, hyperparameter_tensor
from planner.ops.lr_schedule import LRSchedule
from planner.pipeline import plan
from planner.target import preset
from planner.zoo import build
from tests.codegen.conftest import MLP
from tests.codegen.helpers import build_module, rel_error

# no decay and a larger learning rate on the biases (group 1), as PyTorch users write it
ADAMW = Optimizer(kind="adamw", lr=0.01, weight_decay=0.1,
                  groups=(ParamGroup(params="bias$", lr=0.02, weight_decay=0.0),))


def test_a_plan_does_not_change_with_the_learning_rate():
    forward = build("mlp", **MLP)
    target = preset("xeon-8180")  # a preset: nothing measured, so plans are deterministic
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = (plan(make_training_graph(forward, Optimizer(kind="adam", lr=lr)), target)
                .to_json().splitlines() for lr in (0.1, 0.5))
    changed = [line for line in difflib.unified_diff(a, b, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    # the recorded first value, and the graph's hash in the provenance: nothing else
    assert len(changed) == 4
    assert '"name":"optim/group/0/lr"' in changed[0] and '"value":0.1}' in changed[0]
    assert '"value":0.5}' in changed[1]
    assert all('"provenance"' in line for line in changed[2:])


@pytest.fixture(scope="module")
def adamw(tmp_path_factory):
    graph = make_training_graph(build("mlp", **MLP), ADAMW)
    return graph, build_module(graph, tmp_path_factory.mktemp("built") / "mlp_adamw")


def test_groups_get_their_own_hyperparameters(adamw):
    graph, module = adamw
    ex = module.Executor(init=True)
    assert ex.hyperparameters() == {0: {"lr": pytest.approx(0.01), "weight_decay":
                                        pytest.approx(0.1)},
                                    1: {"lr": pytest.approx(0.02), "weight_decay": 0.0}}
    for n in graph.nodes:
        if n.op == "ApplyAdam":
            group = 1 if n.inputs[0].endswith("bias") else 0
            assert n.inputs[-2:] == (hyperparameter_tensor(group, "lr"),
                                     hyperparameter_tensor(group, "weight_decay"))


def test_the_executor_follows_set_hyperparameters_as_the_reference(adamw):
    graph, module = adamw
    ex = module.Executor()
    state = init_params(graph, seed=3)
    ex.load_params(state)
    # per step: group 0's lr and weight decay, group 1's lr
    schedule = [(0.01, 0.1, 0.02), (0.05, 0.0, 0.0), (0.002, 0.3, 0.01)]
    for k, (lr0, wd0, lr1) in enumerate(schedule):
        ex.set_hyperparameters({"lr": lr0, "weight_decay": wd0}, group=0)
        ex.set_hyperparameters({"lr": lr1}, group=1)
        state = {**state, hyperparameter_tensor(0, "lr"): np.float32(lr0),
                 hyperparameter_tensor(0, "weight_decay"): np.float32(wd0),
                 hyperparameter_tensor(1, "lr"): np.float32(lr1)}
        before = ex.params()
        feeds = random_feeds(graph, seed=10 + k)
        got = ex.step(feeds)
        want, state = train_step(graph, feeds, state)
        after = ex.params()
        if lr1 == 0.0:  # a zero learning rate leaves group 1 exactly where it was
            for name in ("fc1/bias", "fc2/bias"):
                np.testing.assert_array_equal(after[name], before[name])
        # a few roundings per element and step, through Adam's m / sqrt(v) (condition ~1)
        assert rel_error(got["loss"], want["loss"]) < 1e-5
        for name, value in state.items():
            assert rel_error(after[name], value) < 1e-4, name


def test_bad_hyperparameters_raise_naming_them(adamw):
    _, module = adamw
    ex = module.Executor(init=True)
    with pytest.raises(ValueError, match="no hyperparameter 'momentum' of parameter group 0"):
        ex.set_hyperparameters({"momentum": 0.9})
    with pytest.raises(ValueError, match="parameter group 2"):
        ex.set_hyperparameters({"lr": 0.1}, group=2)
    with pytest.raises(ValueError, match="lr must be finite"):
        ex.set_hyperparameters({"lr": float("nan")})
    assert ex.hyperparameters()[0]["lr"] == pytest.approx(0.01)  # nothing written


def test_a_pytorch_scheduler_drives_the_executor(adamw):
    torch = pytest.importorskip("torch")
    from planner.torch.schedule import ExecutorOptimizer

    graph, module = adamw
    ex = module.Executor(init=True)
    opt = ExecutorOptimizer(ex)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.01, 0.02])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    seen = []
    for k in range(5):
        opt.step()
        ex.step(random_feeds(graph, seed=k))
        seen.append([v["lr"] for v in ex.hyperparameters().values()])
        sched.step()
    # PyTorch's StepLR sequence, as float32 scalars
    want = [[np.float32(base * 0.5 ** (k // 2)) for base in (0.01, 0.02)] for k in range(5)]
    assert seen == want
    assert ex.hyperparameters()[1]["weight_decay"] == 0.0


RECORDED = LRSchedule(kind="warmup-cosine", warmup=2, total=8, start_factor=0.1,
                      min_factor=0.05)


def test_a_schedule_recorded_in_the_plan_runs_in_the_step(tmp_path):
    optimizer = ADAMW.model_copy(update={"schedule": RECORDED})
    graph = make_training_graph(build("mlp", **MLP), optimizer)
    module = build_module(graph, tmp_path / "mlp_scheduled")
    ex = module.Executor()
    state = init_params(graph, seed=3)
    ex.load_params(state)
    rates = [hyperparameter_tensor(k, "lr") + "/scheduled" for k in (0, 1)]
    for t in range(RECORDED.total + 1):
        feeds = random_feeds(graph, seed=t)
        got = ex.step(feeds, rates)
        want, state = train_step(graph, feeds, state)
        # The rate: the first one times the factor, in double, rounded once - as the
        # reference (planner/ops/lr_schedule.py) computes it, so bit for bit.
        for k, name in enumerate(rates):
            base = np.float32(optimizer.hyperparameters(k)["lr"])
            assert got[name] == np.float32(float(base) * RECORDED.factor(t)), (t, k)
        assert rel_error(got["loss"], want["loss"]) < 1e-5
    after = ex.params()
    assert int(after["optim/schedule_step"]) == RECORDED.total + 1
    for name, value in state.items():
        assert rel_error(after[name], value) < 1e-4, name
    # set_hyperparameters still sets the first rate the schedule scales
    ex.set_hyperparameters({"lr": 0.5}, group=0)
    got = ex.step(random_feeds(graph, seed=99), rates)
    assert got[rates[0]] == np.float32(0.5 * RECORDED.factor(RECORDED.total + 1))
