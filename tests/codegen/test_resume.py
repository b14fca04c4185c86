"""A run stopped, saved with ex.state_dict() and resumed in a fresh executor with
load_state_dict() equals the uninterrupted run bit for bit; the checkpoint is laid out as
PyTorch's model and optimizer state_dicts."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params, random_feeds
from planner.graph.optimizer import Optimizer, ParamGroup
from planner.runtime.schedules import Schedule
from planner.zoo import build
from tests.codegen.conftest import MLP
from tests.codegen.helpers import build_module

OPT = Optimizer(kind="adamw", lr=0.01, clip_grad_norm=1.0,
                groups=(ParamGroup(params="bias$", weight_decay=0.0),))
SCHEDULE = Schedule(kind="warmup-cosine", warmup=2, total=6)
STEPS, STOP = 6, 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    graph = make_training_graph(build("mlp", **MLP), OPT)
    return graph, build_module(graph, tmp_path_factory.mktemp("built") / "mlp_resume")


def steps(ex, graph, first, last):
    for t in range(first, last):
        SCHEDULE.apply(ex, t)
        ex.step(random_feeds(graph, seed=100 + t))


def test_stopped_and_resumed_equals_uninterrupted(run):
    graph, module = run
    # The default executor runs one schedule throughout: bit for bit (docs/executor.md,
    # busy machines; tests/codegen/test_reproducible.py resumes under a forced switch).
    whole = module.Executor()
    whole.load_params(init_params(graph, seed=2))
    steps(whole, graph, 0, STEPS)

    first = module.Executor()
    first.load_params(init_params(graph, seed=2))
    steps(first, graph, 0, STOP)
    saved = first.state_dict()
    steps(first, graph, STOP, STOP + 1)  # the checkpoint is a copy: later steps leave it
    resumed = module.Executor()
    resumed.load_state_dict(saved)
    steps(resumed, graph, STOP, STEPS)

    want, got = whole.params(), resumed.params()
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert not np.array_equal(want["fc1/weight"], init_params(graph, seed=2)["fc1/weight"])


def test_the_checkpoint_is_laid_out_as_pytorchs(run):
    graph, module = run
    ex = module.Executor(init=True)
    steps(ex, graph, 0, 2)
    ckpt = ex.state_dict()
    params = [n.inputs[0] for n in graph.nodes if n.op == "ApplyAdam"]
    assert set(ckpt["model"]) == {t.name for t in graph.by_role("param") if t.updates is None}
    groups = ckpt["optimizer"]["param_groups"]
    assert [g["params"] for g in groups] == [
        [k for k, p in enumerate(params) if not p.endswith("bias")],
        [k for k, p in enumerate(params) if p.endswith("bias")]]
    assert groups[1]["weight_decay"] == 0.0 and groups[0]["weight_decay"] == pytest.approx(0.01)
    assert groups[0]["lr"] == pytest.approx(0.01 * SCHEDULE.factor(1))
    state = ckpt["optimizer"]["state"]
    assert sorted(state) == list(range(len(params)))
    for k, p in enumerate(params):
        assert set(state[k]) == {"step", "exp_avg", "exp_avg_sq"}
        assert float(state[k]["step"]) == 2.0
        assert state[k]["exp_avg"].shape == graph.tensor(p).shape


def test_a_checkpoint_missing_a_slot_is_refused_naming_it(run):
    graph, module = run
    ex = module.Executor(init=True)
    ckpt = ex.state_dict()
    del ckpt["optimizer"]["state"][1]["exp_avg_sq"]
    with pytest.raises(ValueError, match="optimizer state of parameter 1 .* lacks 'exp_avg_sq'"):
        module.Executor().load_state_dict(ckpt)
