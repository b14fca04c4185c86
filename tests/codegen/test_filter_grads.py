"""The runtime's own float32 weight gradients where oneDNN 3.2 would run its im2col GEMM fallback
(x64:gemm:jit), unasked: the executor runs
- a depthwise gradient as a direct loop (templates/cpu/runtime/kernels/filter_grads.cpp
  DepthwiseFilterGrad: mobilenet_v2's 480 channels of 2x2 maps took 1.1 ms a call on the GEMMs,
  one per group), and
- a one-group gradient as the whole batch's columns and one matmul (conv_columns.cpp
  ColumnsConv2DBackpropFilter, what the `columns` layout runs too: ResNet-18's 256x256x3x3
  layer on 2x2 maps, 1.2-1.8 ms a call on the GEMMs, one per image).
Which one oneDNN would take depends on its kernels for this CPU's instruction set (an AVX-512
CPU may have a depthwise kernel where AVX2 takes GEMMs; `make test` runs this file again capped
at AVX2 there). On every one no such gradient is left on the fallback, the result is held to the
float64 reference within float32's summation bound on one thread and on two, and the runtime's
own kernels to the same bits on both (the team splits channels or fixed row blocks)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs.signature import OpSignature
from planner.ops import get_op
from tests.codegen.helpers import ops_on_threads, summation_bound

# (x shape, dy shape, filter shape, geometry) with groups; strides, dilations and uneven padding
CASES = [
    # depthwise: mobilenet_v2's last stage; a strided, dilated one
    ((8, 480, 2, 2), (8, 480, 2, 2), (480, 1, 3, 3), {"pads": [1, 1, 1, 1], "groups": 480}),
    ((2, 32, 5, 4), (2, 32, 2, 2), (32, 1, 3, 3),
     {"pads": [2, 1, 0, 1], "strides": [2, 2], "dilations": [2, 1], "groups": 32}),
    # 20 channels: a last group of 4 lanes
    ((3, 20, 3, 3), (3, 20, 3, 3), (20, 1, 3, 3), {"pads": [1, 1, 1, 1], "groups": 20}),
    # one group: ResNet-18's last stage at 64 px; taps that read only padding (3x3 on a 1x1
    # map); a strided, dilated one
    ((8, 256, 2, 2), (8, 256, 2, 2), (256, 256, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 24, 1, 1), (2, 16, 1, 1), (16, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 12, 5, 4), (2, 8, 2, 2), (8, 12, 3, 3),
     {"pads": [2, 1, 0, 1], "strides": [2, 2], "dilations": [2, 1]}),
]


@pytest.mark.parametrize(("x_shape", "dy_shape", "w_shape", "geometry"), CASES)
def test_weight_gradient_off_the_gemm_fallback(tmp_path, x_shape, dy_shape, w_shape, geometry):
    attrs = {"strides": [1, 1], "dilations": [1, 1], "groups": 1, **geometry,
             "filter_shape": list(w_shape)}
    sig = OpSignature(op="Conv2DBackpropFilter", shapes=(x_shape, dy_shape),
                      dtypes=("float32", "float32"), attrs=attrs)
    (feeds,), got, rows = ops_on_threads([sig], tmp_path, seed=3)
    got = {t: v for t, (v,) in got.items()}
    impls = {row["impl"] for (row,) in rows.values()}
    assert not any("x64:gemm" in impl for impl in impls), impls
    if all(impl.startswith("direct:") for impl in impls):
        assert np.array_equal(got[1].view(np.uint32), got[2].view(np.uint32))
    op = get_op("Conv2DBackpropFilter")
    a = op.normalize_attrs(attrs)
    x, dy = (feeds[k].astype(np.float64) for k in ("in0", "in1"))
    want = op.reference([x, dy], a)[0]
    # Each tap sums at most N x OH x OW rounded products.
    bound = summation_bound(op.name, a, [x, dy], dy_shape[0] * dy_shape[2] * dy_shape[3])
    for threads, value in got.items():
        assert np.all(np.abs(value - want) <= bound), (threads, impls)
