"""The tf32 precision policy on a GPU with TF32 (compute capability 8.0 or newer): the float32
convolutions (forward, data and filter gradients) and GEMM of one executor step against the
float64 reference, within TF32's bound (tests/codegen/tf32_cases.py derives it); the same graph
without the policy within float32's.

K in the bound is each op's contraction length (C kh kw for the forward convolution, O kh kw for
its data gradient, N oh ow for its filter gradient, the shared axis for the GEMM); the last
factor, sum_k |a_k| |b_k|, is the reference step run on the inputs' absolute values (every op
here is bilinear in its two inputs). The float32 step is held to 1e-3 of the largest value, the
GPU executor's promise with TF32 off (tests/cuda/test_cuda_executor.py).

That TF32 really ran: the GEMM's largest error ratio is above RAN_TF32 with tf32 and below it
without. cuDNN's CUDNN_DEFAULT_MATH only allows TF32 (it may still pick an FMA algorithm), so
the convolutions are held to the bound alone. Marked gpu: skipped without one;
bench/device/gpu_tests.sh runs it on a lent GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.graph.builder import GraphBuilder
from planner.graph.interpret import run, widened
from tests.codegen.helpers import gpu_plan, rel_error
from tests.codegen.tf32_cases import ADD, NN, RAN_TF32, TF32_PRODUCT, K, M

pytestmark = pytest.mark.gpu

FP32_TOL = 1e-3

CONV = {"strides": [1, 1], "pads": [1, 1, 1, 1], "groups": 1}
N, C, O, H, W, KH, KW = 4, 16, 24, 8, 8, 3, 3
# output -> its contraction length
CONTRACTION = {"conv": C * KH * KW, "conv_data": O * KH * KW, "conv_filter": N * H * W,
               "matmul": K}


def graph_and_feeds():
    rng = np.random.default_rng(5)
    b = GraphBuilder("tf32_kernels")
    shapes = {"x": (N, C, H, W), "w": (O, C, KH, KW), "dy": (N, O, H, W), "a": (M, K),
              "b": (K, NN)}
    t = {name: b.input(name, shape) for name, shape in shapes.items()}
    feeds = {name: rng.standard_normal(shape).astype(np.float32)
             for name, shape in shapes.items()}
    outs = [b.op("Conv2D", [t["x"], t["w"]], CONV, name="conv"),
            b.op("Conv2DBackpropInput", [t["dy"], t["w"]],
                 {**CONV, "input_shape": [N, C, H, W]}, name="conv_data"),
            b.op("Conv2DBackpropFilter", [t["x"], t["dy"]],
                 {**CONV, "filter_shape": [O, C, KH, KW]}, name="conv_filter"),
            b.op("MatMul", [t["a"], t["b"]], name="matmul")]
    return b.build(outputs=outs), feeds


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    """(feeds, the float64 reference, sum|a||b| per output, {math: the executor's outputs})."""
    graph, feeds = graph_and_feeds()
    plan = gpu_plan(graph)
    if float(plan.target.compute_capability or 0) < 8.0:
        pytest.skip(f"TF32 needs compute capability 8.0, this GPU is "
                    f"{plan.target.compute_capability}")
    exact = run(widened(graph), feeds, {})
    magnitude = run(widened(graph), {k: np.abs(v) for k, v in feeds.items()}, {})
    got = {}
    for math in ("tf32", None):
        planned = gpu_plan(graph.model_copy(update={"math": math}))
        folder = tmp_path_factory.mktemp("tf32") / f"k_{math or 'fp32'}"
        module = load(build(render(planned, folder, layout="own")).dir)
        got[math] = {k: np.asarray(v) for k, v in module.Executor().forward(feeds).items()}
    return exact, magnitude, got


@pytest.mark.parametrize("name", sorted(CONTRACTION))
def test_tf32_step_within_tf32_bound(name, steps):
    exact, magnitude, got = steps
    g, want, mag = (np.asarray(x, np.float64) for x in (got["tf32"][name], exact[name],
                                                         magnitude[name]))
    bound = (TF32_PRODUCT + CONTRACTION[name] * ADD) * mag
    assert np.all(np.abs(g - want) <= bound), (name, float(np.max(np.abs(g - want) / mag)))
    if name == "matmul":   # the flag reached cuBLAS: TF32's error, not float32's
        assert np.max(np.abs(g - want) / mag) > RAN_TF32


@pytest.mark.parametrize("name", sorted(CONTRACTION))
def test_fp32_step_stays_float32(name, steps):
    exact, magnitude, got = steps
    g = np.asarray(got[None][name], np.float64)
    want = np.asarray(exact[name], np.float64)
    assert rel_error(g, want) < FP32_TOL, name
    if name == "matmul":   # no TF32 without the policy
        assert np.max(np.abs(g - want) / np.asarray(magnitude[name], np.float64)) < RAN_TF32
