"""fp16-mixed dynamic loss scaling in the generated CPU executor (templates/cpu/runtime/kernels/
loss_scale.cpp), step by step against the reference interpreter (tests/graph/test_loss_scale.py
checks the interpreter against PyTorch's rule; tests/codegen/loss_scale_check.py holds the
step-by-step check and its tolerance), and an in-place scaled gradient refused by name.
"""

from __future__ import annotations

import pytest

from planner.graph.interpret import init_params
from tests.codegen.helpers import build_module
from tests.codegen.loss_scale_check import check_loss_scaling
from tests.graph.loss_scale_cases import feeds_for, loss_scaled_mlp

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]


def test_executor_skips_the_overflowing_step_as_the_reference(tmp_path):
    check_loss_scaling(tmp_path / "loss_scale")


def test_a_scaled_gradient_overwritten_in_place_is_not_returned(tmp_path):
    """UnscaleGrads writes each unscaled gradient over its scaled input's bytes (OpDef.in_place):
    asked for a scaled gradient, the executor names the op that overwrote it, as for any bytes
    the plan reuses (codegen.layout: an in-place output is no alias of its input's value)."""
    g = loss_scaled_mlp("sgd")
    (unscale,) = [n for n in g.nodes if n.op == "UnscaleGrads"]
    module = build_module(g, tmp_path / "in_place", "cpu", layout="plan")
    ex = module.Executor()
    ex.load_params(init_params(g, seed=1))
    scaled = unscale.inputs[0]
    with pytest.raises(ValueError, match=f"cannot return '{scaled}': op '{unscale.name}'"):
        ex.step(feeds_for(g, 0), [scaled])
