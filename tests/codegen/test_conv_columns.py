"""The runtime's columns convolutions (templates/cpu/runtime/kernels/conv_columns.cpp): a forward,
data-gradient or weight-gradient convolution whose plan says `layout: columns`
(planner/costs/conv_layouts.py gives it to a one-group float32 one on maps of a few pixels where
the profile measured it faster) runs as one matmul over the whole batch's im2col columns, the
weights read once instead of once per image. Held to the float64 reference within float32's
summation bound, in the scratch the plan reserved, and to the same bits on one thread and two
(the matmul split in fixed blocks, each one single-threaded GEMM, the data gradient's columns
summed back per channel in one fixed order), so a schedule variant that runs one on another
thread count changes nothing. The image-by-image data gradient (`layout: image_columns`, for an
image of a few channels) the same way, each image one thread's."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs.signature import OpSignature
from planner.ops import get_op
from tests.codegen.helpers import ops_on_threads, summation_bound

# (x shape, w shape, bias, geometry): ResNet-18's last stage at 64 px (2x2 maps, 256 channels:
# four row blocks); a strided one onto 2x2 maps with a bias (and a folded Relu) and 72 outputs
# (a short last block); a 1x1 on 2x2 maps with them; taps reading only padding (3x3 on a 1x1
# map); a strided, dilated, unevenly padded one.
CASES = [
    ((8, 256, 2, 2), (256, 256, 3, 3), False, {"pads": [1, 1, 1, 1]}),
    ((4, 40, 4, 4), (72, 40, 3, 3), True, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((4, 64, 2, 2), (128, 64, 1, 1), True, {}),
    ((2, 24, 1, 1), (16, 24, 3, 3), False, {"pads": [1, 1, 1, 1]}),
    ((2, 12, 5, 4), (8, 12, 3, 3), False,
     {"pads": [2, 1, 0, 1], "strides": [2, 2], "dilations": [2, 1]}),
]
OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")


def _signature(op, x_shape, w_shape, bias, attrs):
    """The op's signature of this convolution, and the count of rounded terms each of its
    output elements sums."""
    conv = get_op("Conv2D")
    y_shape = conv.reference([np.zeros(x_shape), np.zeros(w_shape)],
                             conv.normalize_attrs(attrs))[0].shape
    o, c, kh, kw = w_shape
    shapes, attrs, terms = {
        # With a bias, a folded Relu too (planner/frontend/passes/fold_conv_bias.py): the runtime's
        # Relu pass over y after the kernel (|relu(a) - relu(b)| <= |a - b|: the same bound).
        "Conv2D": ((x_shape, w_shape) + (((o,),) if bias else ()),
                   {**attrs, "activation": "relu"} if bias else attrs, c * kh * kw + bias),
        "Conv2DBackpropInput": ((y_shape, w_shape), {**attrs, "input_shape": list(x_shape)},
                                o * kh * kw),
        "Conv2DBackpropFilter": ((x_shape, y_shape), {**attrs, "filter_shape": list(w_shape)},
                                 y_shape[0] * y_shape[2] * y_shape[3]),
    }[op]
    return OpSignature(op=op, shapes=shapes, dtypes=("float32",) * len(shapes),
                       attrs=attrs), terms


# The three ops of a case in one graph: one build per thread count.
@pytest.mark.parametrize(("x_shape", "w_shape", "bias", "geometry"), CASES)
def test_columns_kernels_match_the_reference(tmp_path, x_shape, w_shape, bias, geometry):
    attrs = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "groups": 1,
             **geometry, "layout": "columns"}
    sigs, terms = zip(*(_signature(op, x_shape, w_shape, bias, attrs) for op in OPS),
                      strict=True)
    feeds, got, rows = ops_on_threads(sigs, tmp_path, seed=4)
    for t in rows:
        for row in rows[t]:
            assert row["impl"].startswith("direct:columns + sgemm"), row
            # Its scratch is the plan's (planner/ops/conv_scratch.py's columns_bytes).
            assert row["unplanned_scratch_bytes"] == 0
    for k, sig in enumerate(sigs):
        assert np.array_equal(got[1][k].view(np.uint32), got[2][k].view(np.uint32)), sig.op
        a = get_op(sig.op).normalize_attrs(sig.attrs)
        ins = [feeds[k][f"in{i}"].astype(np.float64) for i in range(len(sig.shapes))]
        want = get_op(sig.op).reference(ins, a)[0]
        bound = summation_bound(sig.op, a, ins, terms[k])
        assert np.all(np.abs(got[1][k] - want) <= bound), sig.op


# (op, input shapes, geometry): data gradients onto images of a few channels, the `image_columns`
# layout (planner/costs/conv_layouts.py): DCGAN's first layer's (4x4 stride 2 onto 3 channels),
# a dilated, unevenly padded one onto 1 channel, and transposed convolutions onto 3 channels,
# one with output_padding (its last row and column reached by fewer taps).
IMAGE_CASES = [
    ("Conv2DBackpropInput", ((3, 16, 8, 8), (16, 3, 4, 4)),
     {"pads": [1, 1, 1, 1], "strides": [2, 2], "input_shape": [3, 3, 16, 16]}),
    ("Conv2DBackpropInput", ((2, 8, 4, 5), (8, 1, 3, 3)),
     {"pads": [2, 1, 0, 1], "strides": [2, 2], "dilations": [2, 1], "input_shape": [2, 1, 9, 9]}),
    ("ConvTranspose2D", ((3, 16, 8, 8), (16, 3, 4, 4)), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("ConvTranspose2D", ((2, 12, 5, 6), (12, 2, 3, 3)),
     {"pads": [1, 0, 1, 2], "strides": [2, 3], "output_padding": [1, 2]}),
]


# Every case in one graph: one build per thread count.
def test_image_columns_kernels_match_the_reference(tmp_path):
    sigs = [OpSignature(op=op, shapes=shapes, dtypes=("float32", "float32"),
                        attrs={**geometry, "layout": "image_columns"})
            for op, shapes, geometry in IMAGE_CASES]
    feeds, got, rows = ops_on_threads(sigs, tmp_path, seed=5)
    for t in rows:
        for row in rows[t]:
            assert row["impl"] == "direct:image columns + sgemm", row
            # Its scratch is the plan's (conv_scratch.py's image_columns_bytes, per thread).
            assert row["unplanned_scratch_bytes"] == 0
    for k, sig in enumerate(sigs):
        assert np.array_equal(got[1][k].view(np.uint32), got[2][k].view(np.uint32)), sig.op
        a = get_op(sig.op).normalize_attrs(sig.attrs)
        ins = [feeds[k][f"in{i}"].astype(np.float64) for i in range(2)]
        want = get_op(sig.op).reference(ins, a)[0]
        o, _, kh, kw = sig.shapes[1]   # dy's (x's) channels, each summed over the taps
        bound = summation_bound(sig.op, a, ins, o * kh * kw)
        assert np.all(np.abs(got[1][k] - want) <= bound), sig.op
