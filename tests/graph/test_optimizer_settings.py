"""torch.optim's settings in the training graph (planner/graph/optimizer.py,
planner/frontend/autodiff.py): what each adds to the graph, what the record refuses, and where
the settings the CPU executor alone runs are refused (the CUDA runtime, ZeRO's sharded
updates). Their numbers against torch.optim: tests/importers/test_torch_optimizers.py."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from codegen.backends import RUNTIMES
from codegen.errors import UnsupportedError
from codegen.support import check
from planner.errors import UserError
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params, train_step
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset
from planner.zoo import build

MLP = build("mlp", batch=4, hidden=[5], in_features=3, classes=2)


def _graph(**settings):
    return make_training_graph(MLP, Optimizer(**settings))


def _updates(g):
    return [n for n in g.nodes if n.op in ("SGD", "ApplyMomentum", "ApplyAdam")]


def test_each_setting_in_the_graph():
    plain = _graph(kind="momentum", momentum=0.9)
    damped = _graph(kind="momentum", momentum=0.9, dampening=0.3)
    assert all(len(n.inputs) == 5 and "dampening" not in n.attrs for n in _updates(plain))
    # dampening: the shared step count after the velocity (the first step is not damped)
    assert all(n.inputs[3] == "update/step" and n.attrs["dampening"] == 0.3
               for n in _updates(damped))
    ams = _graph(kind="adamw", amsgrad=True)
    assert all(n.inputs[4].endswith("/v_max") and len(n.outputs) == 4 for n in _updates(ams))
    # maximize: every gradient negated before its update
    up = _graph(kind="sgd", maximize=True)
    negs = {n.outputs[0] for n in up.nodes if n.op == "Neg" and n.name.endswith("/maximize")}
    assert negs and all(n.inputs[1] in negs for n in _updates(up))


def test_maximize_is_the_negated_gradient():
    # one interpreter step: maximize moves each parameter by minus the plain step's move
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32),
             "labels": np.array([0, 1, 1, 0], np.int64)}
    start = init_params(_graph(kind="sgd"), seed=1)
    down = train_step(_graph(kind="sgd", lr=0.5), feeds, dict(start))[1]
    up = train_step(_graph(kind="sgd", lr=0.5, maximize=True), feeds, dict(start))[1]
    for name in ("fc1/weight", "fc2/bias"):
        move = down[name] - start[name]
        assert np.abs(move).max() > 1e-4
        # each move is lr * g rounded once at the parameter's scale: a float32 ulp of it
        np.testing.assert_allclose(up[name] - start[name], -move, rtol=0,
                                   atol=4 * np.finfo(np.float32).eps * np.abs(start[name]).max())


@pytest.mark.parametrize("settings,message", [
    ({"kind": "momentum", "nesterov": True, "dampening": 0.1}, "nesterov momentum requires"),
    ({"kind": "momentum", "nesterov": True, "momentum": 0.0}, "nesterov momentum requires"),
    ({"kind": "sgd", "amsgrad": True}, "amsgrad is a setting of adam"),
    ({"kind": "adam", "dampening": 0.5}, "dampening are settings of SGD with momentum"),
    ({"kind": "sgd", "lr": -1.0}, "greater than or equal to 0"),
])
def test_the_record_refuses(settings, message):
    with pytest.raises(ValidationError, match=message):
        Optimizer(**settings)


def test_lr_zero_is_a_learning_rate():
    assert Optimizer(kind="adam", lr=0.0).hyperparameters(0)["lr"] == 0.0


def test_the_cpu_executor_alone_runs_dampening_and_amsgrad():
    for settings in ({"kind": "momentum", "dampening": 0.3}, {"kind": "adam", "amsgrad": True}):
        g = _graph(**settings)
        check(g, RUNTIMES["cpu"])
        with pytest.raises(UnsupportedError, match="no kernel for op Apply"):
            check(g, RUNTIMES["cuda"])
        with pytest.raises(UserError, match="is not built for a sharded update"):
            plan(g, preset("xeon-8180"), options=PlanOptions(data_parallel=DataParallelOptions(
                ranks=2, bucket_bytes=4096, shard_optimizer=True)))
    check(_graph(kind="momentum"), RUNTIMES["cuda"])
    check(_graph(kind="adam"), RUNTIMES["cuda"])
