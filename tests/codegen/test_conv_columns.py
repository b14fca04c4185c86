"""The runtime's columns convolutions (templates/cpu/runtime/kernels/conv_columns.cpp): a forward,
data-gradient or weight-gradient convolution whose plan says `layout: columns`
(planner/costs/conv_layouts.py gives it to a one-group float32 one on maps of a few pixels where
the profile measured it faster) runs as one matmul over the whole batch's im2col columns, the
weights read once instead of once per image. Held to the float64 reference within float32's
summation bound, in the scratch the plan reserved; the forward and the data gradient to the
same bits on one thread and two (the matmul split in fixed blocks, each one single-threaded
GEMM, the data gradient's columns summed back per channel in one fixed order), so a schedule
variant that runs them on another thread count changes nothing. The weight gradient's matmul
splits as oneDNN's own weight gradients do (Conv2DBackpropFilter keeps the main schedule's
thread count in every variant: planner/memory/variants.py THREAD_BOUND)."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.profiling import copies_graph, placements_plan, warmed_executor
from planner.costs.signature import OpSignature
from planner.graph.interpret import random_feeds
from planner.ops import get_op
from tests.targets import two_cores

U32 = 2.0 ** -24  # float32's unit roundoff

# (x shape, w shape, bias, geometry): ResNet-18's last stage at 64 px (2x2 maps, 256 channels:
# four row blocks); a strided one onto 2x2 maps with a bias and 72 outputs (a short last
# block); a 1x1 on 2x2 maps; taps reading only padding (3x3 on a 1x1 map); a strided, dilated,
# unevenly padded one.
CASES = [
    ((8, 256, 2, 2), (256, 256, 3, 3), False, {"pads": [1, 1, 1, 1]}),
    ((4, 40, 4, 4), (72, 40, 3, 3), True, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((4, 64, 2, 2), (128, 64, 1, 1), True, {}),
    ((2, 24, 1, 1), (16, 24, 3, 3), False, {"pads": [1, 1, 1, 1]}),
    ((2, 12, 5, 4), (8, 12, 3, 3), False,
     {"pads": [2, 1, 0, 1], "strides": [2, 2], "dilations": [2, 1]}),
]


def _run(tmp_path, sig, impl="direct:columns + sgemm", same_bits=True):
    """The op of `sig` on one thread and on two: its feeds and its output on one thread, its
    kernel `impl` (a prefix) on both."""
    graph = copies_graph(sig, 1)
    feeds = random_feeds(graph, seed=4)
    target = two_cores()
    got, impls = {}, set()
    for threads in (1, 2):
        plan = placements_plan(graph, target, [(threads, tuple(range(threads)))])
        ex = warmed_executor(plan, tmp_path / f"t{threads}", {}, feeds)
        got[threads] = np.asarray(ex.forward(feeds)["out0_0"])
        stats = ex.stats()
        impls.add({r["name"]: r["impl"] for r in stats["ops"]}["copy0"])
        # Its scratch is the plan's (planner/ops/conv_scratch.py's columns_bytes).
        assert stats["unplanned_scratch_bytes"] == 0
    assert all(i.startswith(impl) for i in impls), impls
    if same_bits:
        assert np.array_equal(got[1].view(np.uint32), got[2].view(np.uint32))
    return feeds, got[1]


def _attrs(geometry):
    return {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "groups": 1,
            **geometry, "layout": "columns"}


@pytest.mark.parametrize(("x_shape", "w_shape", "bias", "geometry"), CASES)
def test_columns_forward_matches_the_reference(tmp_path, x_shape, w_shape, bias, geometry):
    attrs = _attrs(geometry)
    shapes = (x_shape, w_shape) + (((w_shape[0],),) if bias else ())
    sig = OpSignature(op="Conv2D", shapes=shapes, dtypes=("float32",) * len(shapes),
                      attrs=attrs)
    feeds, got = _run(tmp_path, sig)
    op = get_op("Conv2D")
    a = op.normalize_attrs(attrs)
    ins = [feeds[f"in{k}"].astype(np.float64) for k in range(len(shapes))]
    want = op.reference(ins, a)[0]
    # Each output sums k = C x kh x kw rounded products and the bias:
    # |error| <= (k + 2) u (sum |w x| + |bias|).
    k = w_shape[1] * w_shape[2] * w_shape[3]
    bound = (k + 2) * U32 * op.reference([np.abs(v) for v in ins], a)[0] + 1e-30
    assert np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize(("x_shape", "w_shape", "bias", "geometry"), CASES)
def test_columns_data_gradient_matches_the_reference(tmp_path, x_shape, w_shape, bias,
                                                     geometry):
    forward = get_op("Conv2D").normalize_attrs(_attrs(geometry))
    dy_shape = get_op("Conv2D").reference(
        [np.zeros(x_shape), np.zeros(w_shape)], forward)[0].shape
    attrs = {**_attrs(geometry), "input_shape": list(x_shape)}
    sig = OpSignature(op="Conv2DBackpropInput", shapes=(dy_shape, w_shape),
                      dtypes=("float32", "float32"), attrs=attrs)
    feeds, got = _run(tmp_path, sig)
    op = get_op("Conv2DBackpropInput")
    a = op.normalize_attrs(attrs)
    dy, w = (feeds[k].astype(np.float64) for k in ("in0", "in1"))
    want = op.reference([dy, w], a)[0]
    # Each dx element sums O products per (tap, position) that reads it, at most
    # k = O x kh x kw of them: |error| <= (k + 1) u sum |dy w|.
    k = w_shape[0] * w_shape[2] * w_shape[3]
    bound = (k + 1) * U32 * op.reference([np.abs(dy), np.abs(w)], a)[0] + 1e-30
    assert np.all(np.abs(got - want) <= bound)


# The weight gradients oneDNN 3.2 runs on its direct kernels on AVX2 (a stride-2 one onto 2x2
# maps: 1.1 -> 0.34 ms on one thread of the 2-core EPYC), and the cases above.
@pytest.mark.parametrize(("x_shape", "w_shape", "bias", "geometry"), [
    ((8, 128, 4, 4), (256, 128, 3, 3), False, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    *CASES[:3]])
def test_columns_weight_gradient_matches_the_reference(tmp_path, x_shape, w_shape, bias,
                                                       geometry):
    forward = get_op("Conv2D").normalize_attrs(_attrs(geometry))
    dy_shape = get_op("Conv2D").reference(
        [np.zeros(x_shape), np.zeros(w_shape)], forward)[0].shape
    attrs = {**_attrs(geometry), "filter_shape": list(w_shape)}
    sig = OpSignature(op="Conv2DBackpropFilter", shapes=(x_shape, dy_shape),
                      dtypes=("float32", "float32"), attrs=attrs)
    feeds, got = _run(tmp_path, sig, impl="direct:im2col", same_bits=False)
    op = get_op("Conv2DBackpropFilter")
    a = op.normalize_attrs(attrs)
    x, dy = (feeds[k].astype(np.float64) for k in ("in0", "in1"))
    want = op.reference([x, dy], a)[0]
    # Each tap sums k = N x OH x OW rounded products: |error| <= (k + 1) u sum |dy x|.
    k = dy_shape[0] * dy_shape[2] * dy_shape[3]
    bound = (k + 1) * U32 * op.reference([np.abs(x), np.abs(dy)], a)[0] + 1e-30
    assert np.all(np.abs(got - want) <= bound)
