"""The CPU kernels mixed precision runs between convolutions on bfloat16 tensors, against the
reference interpreter's emulated bfloat16, within the bounds tests/codegen/mixed_kernel_cases.py
derives."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.graph.builder import GraphBuilder
from planner.graph.interpret import run
from tests.codegen.helpers import host_plan
from tests.codegen.mixed_kernel_cases import OPS, SUM, U, check_kernel, kernel_results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return kernel_results(tmp_path_factory.mktemp("bf16k") / "k")


@pytest.mark.parametrize("op", OPS)
def test_bf16_kernel_matches_emulated_reference(op, results):
    check_kernel(op, results)


def test_bf16_weight_gradient_taps_that_see_only_padding_are_zero(tmp_path):
    """A 3x3 stride-2 convolution of a 1x1 map (ResNet's last stage at small images): only the
    centre tap sees the image, the other eight see padding and their gradient is 0. oneDNN's
    bf16 weight-gradient kernels leave those taps' accumulators uninitialised in the scratchpad
    (templates/cpu/runtime/kernels/conv.cpp); here the scratchpad lies on the arena bytes of a
    convolution output read before it, so unzeroed it hands that output's bytes on as the
    gradient."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("padding_taps")
    feeds = {"x": rng.standard_normal((4, 32, 8, 8)).astype(np.float32),
             "w": rng.standard_normal((32, 32, 3, 3)).astype(np.float32),
             "dy": rng.standard_normal((4, 64, 1, 1)).astype(np.float32)}
    low = {k: b.op("Cast", [b.input(k, v.shape)], {"to": "bfloat16"}, name=f"{k}16")
           for k, v in feeds.items()}
    y = b.op("Conv2D", [low["x"], low["w"]], {"pads": [1, 1, 1, 1]}, name="conv")
    pooled = b.op("Cast", [b.op("GlobalAvgPool", [y], name="pool")], {"to": "bfloat16"},
                  name="pooled16")
    dw = b.op("Conv2DBackpropFilter", [pooled, low["dy"]],
              {"filter_shape": [64, 32, 3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
              name="dw")
    graph = b.build([dw])
    planned = host_plan(graph)
    at = {t.name: (t.offset, t.offset + t.bytes) for t in planned.tensors}
    scratch, conv = at["dw@scratch"], at["conv"]
    assert scratch[0] < conv[1] and conv[0] < scratch[1], "the case needs the bytes shared"
    module = load(build(render(planned, tmp_path / "k", layout="plan")).dir)
    ex = module.Executor()
    got = np.asarray(ex.forward(feeds)[dw]).astype(np.float64)
    want = run(graph, feeds, {})[dw].astype(np.float64)
    padding_only = np.ones((3, 3), bool)
    padding_only[1, 1] = False
    assert np.all(got[:, :, padding_only] == 0.0)
    bound = 2 * U * np.abs(want) + SUM * np.max(np.abs(want))
    assert np.all(np.abs(got - want) <= bound)
    # The native bf16 kernels ran on the planned (shared) bytes; the float32 fallback of a CPU
    # without them (its widening temporaries outgrow the analytical scratch) is not the case.
    stats = next(s for s in ex.stats()["ops"] if s["name"] == "dw")
    assert stats["scratch_planned"] or not any(k in stats["impl"] for k in ("bf16", "amx"))
