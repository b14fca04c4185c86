"""Hyperparameters and checkpoints as a step reads them: `set_hyperparameters` and
`load_state_dict` refuse the same values, by name (non-numbers, NaN, inf, negatives, and values
float32 turns into inf or 0), and `load_state_dict` is as strict as docs/training.md says: a
missing parameter, a group holding other parameters and a micro-step count that would wrap are
refused, nothing written."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer, ParamGroup
from planner.ir.accumulation import MICRO_STEP
from tests.codegen.helpers import build_module

BAD = [("fast", "must be a number, got 'fast'"), (float("nan"), "must be finite and >= 0"),
       (float("inf"), "must be finite and >= 0"), (-1.0, "must be finite and >= 0"),
       (1e39, "1e+39 is not a finite float32"), (1e-46, "1e-46 is 0 in float32"),
       (True, "must be a number, got True")]


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    optimizer = Optimizer(kind="momentum", lr=0.05,
                          groups=[ParamGroup(params="bias$", weight_decay=0.0)])
    graph = prepare("zoo:mlp?batch=4&hidden=8&in_features=6&classes=3",
                    GraphOptions(optimizer=optimizer, accumulate=2))
    return build_module(graph, tmp_path_factory.mktemp("ckpt") / "mlp_ckpt_trust")


def unchanged(ex, before):
    after = ex.params()
    assert after.keys() == before.keys()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


@pytest.mark.parametrize("field", ["lr", "weight_decay"])
@pytest.mark.parametrize("value, says", BAD)
def test_set_hyperparameters_refuses_what_float32_cannot_hold(module, field, value, says):
    ex = module.Executor()
    before = ex.params()
    with pytest.raises(ValueError, match=f"set_hyperparameters: {field}") as info:
        ex.set_hyperparameters({field: value})
    assert says in str(info.value)
    unchanged(ex, before)


@pytest.mark.parametrize("field", ["lr", "weight_decay"])
@pytest.mark.parametrize("value, says", BAD)
def test_load_state_dict_refuses_the_same_values_naming_the_field(module, field, value, says):
    ex = module.Executor()
    ckpt = ex.state_dict()
    ckpt["optimizer"]["param_groups"][1][field] = value
    before = ex.params()
    with pytest.raises(ValueError, match=f"parameter group 1 {field}") as info:
        ex.load_state_dict(ckpt)
    assert says in str(info.value)
    unchanged(ex, before)


def test_a_checkpoint_missing_a_parameter_is_refused(module):
    ex = module.Executor()
    ckpt = ex.state_dict()
    del ckpt["model"]["fc1/weight"]
    before = ex.params()
    with pytest.raises(ValueError, match="the checkpoint's model part lacks 'fc1/weight'"):
        ex.load_state_dict(ckpt)
    unchanged(ex, before)


def test_group_parameter_indices_are_checked(module):
    ex = module.Executor()
    ckpt = ex.state_dict()
    groups = ckpt["optimizer"]["param_groups"]
    groups[0]["params"], groups[1]["params"] = groups[1]["params"], groups[0]["params"]
    with pytest.raises(ValueError, match="parameter group 0 holds parameters"):
        ex.load_state_dict(ckpt)


@pytest.mark.parametrize("count", [2**63 - 2, -1, 1.5, "3"])
def test_a_micro_step_count_that_would_wrap_is_refused(module, count):
    ex = module.Executor()
    ckpt = ex.state_dict()
    ckpt["planner"][MICRO_STEP] = (np.asarray(count, np.int64)
                                   if isinstance(count, int) else count)
    with pytest.raises(ValueError, match=f"{MICRO_STEP} must be a whole number from 0 to 2"):
        ex.load_state_dict(ckpt)


def test_an_honest_checkpoint_still_loads(module):
    ex = module.Executor()
    ckpt = ex.state_dict()
    ckpt["optimizer"]["param_groups"][0]["lr"] = 0.125
    ckpt["planner"][MICRO_STEP] = np.asarray(3, np.int64)
    ex.load_state_dict(ckpt)
    assert ex.hyperparameters()[0]["lr"] == 0.125
    assert int(ex.params()[MICRO_STEP]) == 3
