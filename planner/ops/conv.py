"""Convolutions: Conv2D, ConvTranspose2D and their backward ops, plus the 2-D window geometry
that the pooling ops share.

Layout: x is NCHW, Conv2D weights OIHW (O, C/groups, kH, kW), ConvTranspose2D weights IOHW
(C, O/groups, kH, kW). `pads` are [top, left, bottom, right]. Sizes along one spatial axis:

    conv:       out = (in + pad_lo + pad_hi - (d*(k-1) + 1)) // s + 1
    transposed: out = (in - 1)*s - pad_lo - pad_hi + d*(k-1) + output_padding + 1

The numpy references go through im2col: a strided view of the padded input with shape
(N, C, OH, OW, kH, kW), reshaped into one matrix per group and multiplied with BLAS. The data
gradient is the transpose: a matrix product, then col2im (one strided add per kernel tap).

A Conv2D may carry a convolution layer's bias and activation, folded in from the BiasAdd (axis 1)
and Relu that followed it (planner/frontend/passes/fold_conv_bias.py): an optional third input, a
bias of shape (O,) added to every output channel, and `activation` ("none" or "relu"; absent = none)
applied after it, y = act(conv(x, w) + bias), float32 only (planner/ops/fused_activation.py,
shared with MatMul); or "leaky_relu" with its `alpha`, a CPU step's folded LeakyRelu
(planner/step/fold_conv_leaky.py: oneDNN's eltwise post-op). The kernels do both in the op
(oneDNN's convolution bias and one Relu pass over y; a bias and activation pass after cuDNN's
convolution), so a layer is one op and one tensor instead of three. Folding happens after
autodiff: the gradients of the BiasAdd and Relu (a BiasAddGrad of dy, a ReluGrad reading y,
which the folded Conv2D writes under the same name) are already in the graph, and a Conv2D
that carries either has no gradient rule of its own.

Example:
    >>> import numpy as np
    >>> x, w = np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))
    >>> conv2d_reference([x, w], {"strides": [1, 1], "pads": [1, 1, 1, 1],
    ...                           "dilations": [1, 1], "groups": 1})[0][0, 0]
    array([[4., 6., 6., 4.],
           [6., 9., 9., 6.],
           [6., 9., 9., 6.],
           [4., 6., 6., 4.]])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.dtypes import num_bytes
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    get_op,
    register,
    require_float,
    require_rank,
)
from planner.ops.conv_scratch import ROLES, conv_scratch
from planner.ops.fused_activation import (
    ACTIVATION_ATTR,
    ACTIVATIONS,
    SLOPE_ATTR,
    activation_flops,
    activation_grad,
    apply_activation,
    check_activation,
)

# ---- window geometry (shared with pool.py) ---------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window: kernel taps (kh, kw), strides, dilations, pads (top, left, bottom,
    right). `span` is the extent of a dilated kernel, d*(k-1) + 1."""

    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)

    @property
    def span(self) -> tuple[int, int]:
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilations, strict=True))

    def padded(self, hw: tuple[int, int]) -> tuple[int, int]:
        t, l, b, r = self.pads
        return hw[0] + t + b, hw[1] + l + r

    def out_hw(self, op: str, hw: tuple[int, int], ceil_mode: bool = False) -> tuple[int, int]:
        """Output size over an input of spatial size hw; OpError if the kernel does not fit.

        ceil_mode keeps a last partial window, unless it would start inside the bottom/right
        padding (the PyTorch and ONNX rule).
        """
        padded, span = self.padded(hw), self.span
        if padded[0] < span[0] or padded[1] < span[1]:
            raise OpError(f"{op}: kernel {_hw(self.kernel)} (dilated extent {_hw(span)}) is "
                          f"larger than the padded input {_hw(padded)} (input {_hw(hw)}, "
                          f"pads {list(self.pads)})")
        out = []
        for axis in range(2):
            room, s = padded[axis] - span[axis], self.strides[axis]
            n = (-(-room // s) if ceil_mode else room // s) + 1
            if ceil_mode and (n - 1) * s >= hw[axis] + self.pads[axis]:
                n -= 1
            out.append(n)
        return out[0], out[1]


def _hw(pair: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in pair)


def read_window(op: str, attrs: Attrs, kernel: tuple[int, int]) -> Window:
    """The Window of a node's attrs (strides, pads, optional dilations), checked."""
    strides = _ints(op, attrs, "strides", 2, low=1)
    pads = _ints(op, attrs, "pads", 4, low=0)
    dilations = _ints(op, attrs, "dilations", 2, low=1) if "dilations" in attrs else (1, 1)
    return Window(kernel=kernel, strides=strides, pads=pads, dilations=dilations)


def _ints(op: str, attrs: Attrs, key: str, n: int, low: int) -> tuple[int, ...]:
    value = attrs[key]
    if len(value) != n or any(v < low for v in value):
        raise OpError(f"{op}: attribute {key!r} must be {n} integers >= {low}, got {value}")
    return tuple(value)


def pad_nchw(x: np.ndarray, win: Window, value: float = 0.0,
             extra: tuple[int, int] = (0, 0)) -> np.ndarray:
    """x padded by win.pads, plus `extra` more rows/columns at the bottom/right."""
    t, l, b, r = win.pads
    if not any((t, l, b + extra[0], r + extra[1])):
        return x
    return np.pad(x, ((0, 0), (0, 0), (t, b + extra[0]), (l, r + extra[1])),
                  constant_values=value)


def windows(xp: np.ndarray, win: Window, out_hw: tuple[int, int]) -> np.ndarray:
    """Read-only view (N, C, OH, OW, kh, kw) of every window of the padded input xp."""
    sn, sc, sh, sw = xp.strides
    (st_h, st_w), (dh, dw) = win.strides, win.dilations
    shape = (*xp.shape[:2], *out_hw, *win.kernel)
    strides = (sn, sc, sh * st_h, sw * st_w, sh * dh, sw * dw)
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def scatter_windows(cols: np.ndarray, win: Window, padded_hw: tuple[int, int]) -> np.ndarray:
    """Adjoint of `windows`: sum window values (N, C, OH, OW, kh, kw) into a padded image."""
    n, c, oh, ow, kh, kw = cols.shape
    out = np.zeros((n, c, *padded_hw), dtype=cols.dtype)
    (st_h, st_w), (dh, dw) = win.strides, win.dilations
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh:i * dh + st_h * (oh - 1) + 1:st_h,
                j * dw:j * dw + st_w * (ow - 1) + 1:st_w] += cols[:, :, :, :, i, j]
    return out


def crop_nchw(xp: np.ndarray, win: Window, hw: tuple[int, int]) -> np.ndarray:
    """The input-sized region of a padded image (undoes pad_nchw)."""
    t, l = win.pads[0], win.pads[1]
    return np.ascontiguousarray(xp[:, :, t:t + hw[0], l:l + hw[1]])


# ---- Conv2D geometry ----------------------------------------------------------------------------

CONV_ATTRS: dict[str, Attr] = {
    "strides": Attr("ints", [1, 1]),
    "pads": Attr("ints", [0, 0, 0, 0]),
    "dilations": Attr("ints", [1, 1]),
    "groups": Attr("int", 1),
}

# Every convolution op's CPU kernel layout, a planning decision (planner/costs/conv_layouts.py):
# absent, oneDNN picks the layouts of the image and output (`any`: blocked on x86); "nhwc" asks
# for channels-last ones, which oneDNN's brgemm kernels take; "columns" (not a transposed
# convolution's) runs it as one matmul over the whole batch's im2col columns; "image_columns" (a
# data gradient's or a transposed convolution's) image by image, one matmul and col2im each.
# Either way the tensors in the arena stay as the step graph keeps them (NCHW, or blocked
# between the kernels that take it so: blocked_images); the numbers are the same
# convolution's (up to summation order). Not part of the geometry: a gradient rule copies
# CONV_ATTRS, never a layout chosen for its forward.
LAYOUTS = ("any", "nhwc", "columns", "image_columns")
COLUMNS_OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
IMAGE_COLUMNS_OPS = ("Conv2DBackpropInput", "ConvTranspose2D")
LAYOUT_ATTR = {"layout": Attr("str", optional=True)}


def blocked_images(op: str):
    """OpDef.channel_blocked of convolution `op`: its image and output (ROLES' x and y), each
    on its own, on oneDNN's own kernel (`any`: kernels/conv.cpp gives a blocked tensor to the
    primitive as it is, where it would reorder a plain one; depthwise and grouped ones too) or
    on the columns (conv_columns.h reads and writes either layout), not channels-last."""
    roles = ROLES[op]

    def rule(attrs: Attrs) -> tuple[tuple[tuple[str, int], ...], ...]:
        if attrs.get("layout", "any") == "nhwc":
            return ()
        return ((roles["x"],), (roles["y"],))
    return rule


def _check_layout(op: str, attrs: Attrs) -> None:
    layout = attrs.get("layout", "any")
    if layout not in LAYOUTS:
        raise OpError(f"{op}: layout must be one of {list(LAYOUTS)}, got {attrs['layout']!r}")
    if layout == "columns" and op not in COLUMNS_OPS:
        raise OpError(f"{op}: layout 'columns' is for {', '.join(COLUMNS_OPS)} only")
    if layout == "image_columns" and op not in IMAGE_COLUMNS_OPS:
        raise OpError(f"{op}: layout 'image_columns' is for {' and '.join(IMAGE_COLUMNS_OPS)} "
                      f"only")


def _groups(op: str, attrs: Attrs) -> int:
    if attrs["groups"] < 1:
        raise OpError(f"{op}: attribute 'groups' must be >= 1, got {attrs['groups']}")
    return attrs["groups"]


def conv_out_type(op: str, x: TensorType, w: TensorType, attrs: Attrs) -> TensorType:
    """Shape rule of Conv2D, shared by its backward ops to check their operands."""
    require_rank(op, x, 4, "input x (N,C,H,W)")
    require_rank(op, w, 4, "weight w (O,C/groups,kH,kW)")
    require_float(op, x, "input x")
    if w.dtype != x.dtype:
        raise OpError(f"{op}: weight w is {w.dtype} but input x is {x.dtype}")
    _check_layout(op, attrs)
    groups = _groups(op, attrs)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if cg * groups != c:
        raise OpError(f"{op}: input x has {c} channels but weight w {list(w.shape)} with "
                      f"groups={groups} expects {cg * groups}")
    if o % groups:
        raise OpError(f"{op}: groups={groups} does not divide the {o} output channels of "
                      f"weight w {list(w.shape)}")
    oh, ow = read_window(op, attrs, (kh, kw)).out_hw(op, (h, wd))
    return TensorType((n, o, oh, ow), x.dtype)


def _shape_attr(op: str, attrs: Attrs, key: str) -> tuple[int, ...]:
    shape = tuple(attrs[key])
    if key == "input_shape":
        # an empty batch is a shape like any other (PyTorch's "optional 0-dim batch size")
        if len(shape) != 4 or shape[0] < 0 or any(d < 1 for d in shape[1:]):
            raise OpError(f"{op}: attribute {key!r} must be 4 integers, the batch >= 0 and "
                          f"the others >= 1, got {list(shape)}")
    elif len(shape) != 4 or any(d < 1 for d in shape):
        raise OpError(f"{op}: attribute {key!r} must be 4 positive integers, got {list(shape)}")
    return shape


def _check_dy(op: str, dy: TensorType, expected: TensorType, what: str) -> None:
    if dy.shape != expected.shape or dy.dtype != expected.dtype:
        raise OpError(f"{op}: gradient dy is {dy.dtype}{list(dy.shape)} but the forward "
                      f"output for {what} is {expected.dtype}{list(expected.shape)}")


# ---- Conv2D and its backward ops: im2col matrices -----------------------------------------------


def _im2col(x: np.ndarray, win: Window, groups: int, out_hw: tuple[int, int]) -> np.ndarray:
    """Patches as one matrix per group: (G, N*OH*OW, C/G*kh*kw)."""
    n, c = x.shape[:2]
    v = windows(pad_nchw(x, win), win, out_hw)
    v = v.reshape(n, groups, c // groups, *out_hw, *win.kernel)
    return v.transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, n * out_hw[0] * out_hw[1],
                                                      c // groups * math.prod(win.kernel))


def _dy_matrix(dy: np.ndarray, groups: int) -> np.ndarray:
    """(N, O, OH, OW) as one matrix per group: (G, N*OH*OW, O/G)."""
    n, o, oh, ow = dy.shape
    m = dy.reshape(n, groups, o // groups, oh, ow).transpose(1, 0, 3, 4, 2)
    return m.reshape(groups, n * oh * ow, o // groups)


def conv2d(x: np.ndarray, w: np.ndarray, win: Window, groups: int) -> np.ndarray:
    """y (N, O, OH, OW) = grouped cross-correlation of x (N, C, H, W) with w (O, C/G, kh, kw)."""
    n = x.shape[0]
    o = w.shape[0]
    oh, ow = win.out_hw("Conv2D", x.shape[2:])
    cols = _im2col(x, win, groups, (oh, ow))
    y = cols @ w.reshape(groups, o // groups, -1).transpose(0, 2, 1)
    y = y.reshape(groups, n, oh, ow, o // groups).transpose(1, 0, 4, 2, 3)
    return np.ascontiguousarray(y.reshape(n, o, oh, ow))


def conv2d_backprop_input(dy: np.ndarray, w: np.ndarray, win: Window, groups: int,
                          input_hw: tuple[int, int]) -> np.ndarray:
    """dx of Conv2D for an input of spatial size input_hw (the windows must fit in it)."""
    n, o, oh, ow = dy.shape
    _, cg, kh, kw = w.shape
    cols = _dy_matrix(dy, groups) @ w.reshape(groups, o // groups, -1)
    cols = cols.reshape(groups, n, oh, ow, cg, kh, kw).transpose(1, 0, 4, 2, 3, 5, 6)
    dxp = scatter_windows(cols.reshape(n, groups * cg, oh, ow, kh, kw), win,
                          win.padded(input_hw))
    return crop_nchw(dxp, win, input_hw)


def conv2d_backprop_filter(x: np.ndarray, dy: np.ndarray, win: Window, groups: int
                           ) -> np.ndarray:
    """dw (O, C/G, kh, kw) of Conv2D: each group's dy^T times its im2col matrix."""
    o = dy.shape[1]
    cols = _im2col(x, win, groups, dy.shape[2:])
    dw = _dy_matrix(dy, groups).transpose(0, 2, 1) @ cols
    return dw.reshape(o, -1, *win.kernel)


def _conv_args(attrs: Attrs, kernel: tuple[int, ...]) -> tuple[Window, int]:
    return read_window("Conv2D", attrs, tuple(kernel)), attrs["groups"]


def conv2d_reference(xs: list[np.ndarray], attrs: Attrs) -> list[np.ndarray]:
    x, w = xs[:2]
    y = conv2d(x, w, *_conv_args(attrs, w.shape[2:]))
    if len(xs) == 3:
        y = y + xs[2].reshape(1, -1, 1, 1)
    return [apply_activation(y, attrs)]


def _conv2d_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) > 3:
        raise OpError(f"Conv2D takes 2 or 3 inputs (x, w, optional bias), got {len(ins)}")
    y = conv_out_type("Conv2D", ins[0], ins[1], a)
    if len(ins) == 3 and (ins[2].shape != (y.shape[1],) or ins[2].dtype != y.dtype):
        raise OpError(f"Conv2D: bias must be {y.dtype} of shape [{y.shape[1]}] (the output "
                      f"channels), got {ins[2].dtype} {list(ins[2].shape)}")
    check_activation("Conv2D", a, y, ACTIVATIONS)
    return [y]


def _conv2d_flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The products, plus one addition per output for the bias and one comparison for the
    activation (BiasAdd's and Relu's counts, which they replace)."""
    y = outs[0]
    return (_conv_flops(y, ins[1].shape) + (y.size if len(ins) == 3 else 0)
            + activation_flops(y, a))


def _conv_attrs(attrs: Attrs) -> Attrs:
    return {k: attrs[k] for k in CONV_ATTRS}


def conv2d_gradient(g: GradBuilder, node, grad_outputs: list[str | None]) -> list[str | None]:
    (dy,) = grad_outputs
    x, w = node.inputs[:2]
    bias = node.inputs[2:]
    if dy is None:
        return [None, None, *(None for _ in bias)]
    # A Conv2D carrying its layer's folded bias and Relu (a graph written after
    # fold_conv_bias.py, as `planner graph -o` writes one): their gradients first, the Relu's
    # from y as Relu's own rule takes it, then the bias's over the channels.
    dy = activation_grad(g, "Conv2D", node.name, node.attrs, dy, node.outputs[0])
    dbias = [g.emit("BiasAddGrad", [dy], {"axis": 1})[0] if g.needs(b) else None for b in bias]
    attrs = _conv_attrs(get_op("Conv2D").normalize_attrs(node.attrs))
    dx = dw = None
    if g.needs(x):
        (dx,) = g.emit("Conv2DBackpropInput", [dy, w],
                       {**attrs, "input_shape": list(g.type(x).shape)})
    if g.needs(w):
        (dw,) = g.emit("Conv2DBackpropFilter", [x, dy],
                       {**attrs, "filter_shape": list(g.type(w).shape)})
    return [dx, dw, *dbias]


def padded_image_bytes(image: int):
    """A `gpu_scratch` rule: the CUDA kernel (cuDNN takes symmetric pads only) copies the
    image (input `image`, or the output when negative: the data gradient's) into an explicitly
    padded buffer of its dtype when the pads are asymmetric, rounded up to 256 bytes.

    >>> rule = padded_image_bytes(0)
    >>> x, w = TensorType((2, 3, 7, 7)), TensorType((4, 3, 2, 2))
    >>> rule([x, w], [], {"pads": [0, 0, 1, 1]}), rule([x, w], [], {"pads": [1, 1, 1, 1]})
    (1536, 0)
    """
    def rule(ins: list[TensorType], outs: list[TensorType], attrs: Attrs) -> int:
        top, left, bottom, right = attrs.get("pads") or (0, 0, 0, 0)
        if (top, left) == (bottom, right):
            return 0
        t = ins[image] if image >= 0 else outs[0]
        n, c, h, w = t.shape
        size = num_bytes((n, c, h + top + bottom, w + left + right), t.dtype)
        return -(-size // 256) * 256
    return rule


def _conv_flops(y: TensorType, w_shape: tuple[int, ...]) -> int:
    """2 per multiply-accumulate: every output element sums C/groups*kh*kw products."""
    return 2 * y.size * int(np.prod(w_shape[1:]))


register(OpDef(
    name="Conv2D",
    scratch=conv_scratch("Conv2D"),
    channel_blocked=blocked_images("Conv2D"),
    gpu_scratch=padded_image_bytes(0),
    cost_class="conv",
    convolution=True,
    recompute="expensive", arity=None, min_inputs=2,
    attrs={**CONV_ATTRS, **LAYOUT_ATTR, **ACTIVATION_ATTR, **SLOPE_ATTR},
    infer=_conv2d_infer,
    flops=_conv2d_flops,
    reference=conv2d_reference,
    gradient=conv2d_gradient,
    doc="y = act(conv(x, w) + bias): [x (N,C,H,W), w (O,C/groups,kH,kW), optional bias (O,)] "
        "-> (N,O,OH,OW); activation none | relu (a folded BiasAdd and Relu) | leaky_relu "
        "with its alpha (a CPU step's folded LeakyRelu).",
))


def _backprop_input_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    op = "Conv2DBackpropInput"
    dy, w = ins
    x = TensorType(_shape_attr(op, a, "input_shape"), w.dtype)
    _check_dy(op, dy, conv_out_type(op, x, w, a), f"input_shape {list(x.shape)}")
    return [x]


register(OpDef(
    name="Conv2DBackpropInput",
    scratch=conv_scratch("Conv2DBackpropInput"),
    channel_blocked=blocked_images("Conv2DBackpropInput"),
    gpu_scratch=padded_image_bytes(-1),
    cost_class="conv",
    convolution=True, arity=2,
    attrs={**CONV_ATTRS, **LAYOUT_ATTR, "input_shape": Attr("ints", required=True)},
    infer=_backprop_input_infer,
    flops=lambda ins, outs, a: _conv_flops(ins[0], ins[1].shape),
    reference=lambda xs, a: [conv2d_backprop_input(xs[0], xs[1], *_conv_args(a, xs[1].shape[2:]),
                                                   tuple(a["input_shape"][2:]))],
    doc="dx of Conv2D: [dy, w] -> dx with shape input_shape.",
))


def _backprop_filter_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    op = "Conv2DBackpropFilter"
    x, dy = ins
    w = TensorType(_shape_attr(op, a, "filter_shape"), x.dtype)
    _check_dy(op, dy, conv_out_type(op, x, w, a), f"filter_shape {list(w.shape)}")
    return [w]


register(OpDef(
    name="Conv2DBackpropFilter",
    scratch=conv_scratch("Conv2DBackpropFilter"),
    channel_blocked=blocked_images("Conv2DBackpropFilter"),
    gpu_scratch=padded_image_bytes(0),
    cost_class="conv",
    convolution=True, arity=2,
    attrs={**CONV_ATTRS, **LAYOUT_ATTR, "filter_shape": Attr("ints", required=True)},
    infer=_backprop_filter_infer,
    flops=lambda ins, outs, a: _conv_flops(ins[1], tuple(a["filter_shape"])),
    reference=lambda xs, a: [conv2d_backprop_filter(xs[0], xs[1],
                                                    *_conv_args(a, a["filter_shape"][2:]))],
    doc="dw of Conv2D: [x, dy] -> dw with shape filter_shape.",
))


# ---- ConvTranspose2D: the data gradient of a Conv2D whose weight it shares ---------------------
#
# y = ConvTranspose2D(x, w) is Conv2DBackpropInput(x, w) for the Conv2D that maps y-shaped
# tensors to x-shaped ones with the same w, strides, pads, dilations and groups. Its gradients
# are therefore dx = Conv2D(dy, w) and dw = Conv2DBackpropFilter(dy, x). That Conv2D gives back
# exactly x's size only when output_padding < stride (PyTorch also allows output_padding <
# dilation; those extra rows would need a slice in the gradient, so they are refused here).

TRANSPOSE_ATTRS: dict[str, Attr] = {**CONV_ATTRS, "output_padding": Attr("ints", [0, 0])}


def _transpose_out_type(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    op = "ConvTranspose2D"
    x, w = ins
    require_rank(op, x, 4, "input x (N,C,H,W)")
    require_rank(op, w, 4, "weight w (C,O/groups,kH,kW)")
    require_float(op, x, "input x")
    if w.dtype != x.dtype:
        raise OpError(f"{op}: weight w is {w.dtype} but input x is {x.dtype}")
    _check_layout(op, a)
    groups = _groups(op, a)
    n, c, h, wd = x.shape
    if w.shape[0] != c:
        raise OpError(f"{op}: input x has {c} channels but weight w {list(w.shape)} expects "
                      f"{w.shape[0]}")
    if c % groups:
        raise OpError(f"{op}: groups={groups} does not divide the {c} input channels")
    win = read_window(op, a, tuple(w.shape[2:]))
    out_pad = _ints(op, a, "output_padding", 2, low=0)
    if any(p >= s for p, s in zip(out_pad, win.strides, strict=True)):
        raise OpError(f"{op}: output_padding {list(out_pad)} must be smaller than strides "
                      f"{list(win.strides)}")
    hw = [(size - 1) * s - lo - hi + span + extra for size, s, lo, hi, span, extra in
          zip((h, wd), win.strides, win.pads[:2], win.pads[2:], win.span, out_pad, strict=True)]
    if min(hw) < 1:
        raise OpError(f"{op}: output size {_hw(hw)} is empty: pads {list(win.pads)} remove "
                      f"more than the transposed convolution produces")
    return [TensorType((n, w.shape[1] * groups, hw[0], hw[1]), x.dtype)]


def conv_transpose2d_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, w = xs
    (y,) = _transpose_out_type([TensorType(x.shape, str(x.dtype)),
                                TensorType(w.shape, str(w.dtype))], a)
    return [conv2d_backprop_input(x, w, *_conv_args(a, w.shape[2:]), y.shape[2:])]


def conv_transpose2d_gradient(g: GradBuilder, node, grad_outputs: list[str | None]
                              ) -> list[str | None]:
    (dy,) = grad_outputs
    x, w = node.inputs
    if dy is None:
        return [None, None]
    attrs = _conv_attrs(get_op("ConvTranspose2D").normalize_attrs(node.attrs))
    dx = dw = None
    if g.needs(x):
        (dx,) = g.emit("Conv2D", [dy, w], attrs)
    if g.needs(w):
        (dw,) = g.emit("Conv2DBackpropFilter", [dy, x],
                       {**attrs, "filter_shape": list(g.type(w).shape)})
    return [dx, dw]


register(OpDef(
    name="ConvTranspose2D",
    scratch=conv_scratch("ConvTranspose2D"),
    channel_blocked=blocked_images("ConvTranspose2D"),
    gpu_scratch=padded_image_bytes(-1),
    cost_class="conv",
    convolution=True,
    recompute="expensive", arity=2, attrs={**TRANSPOSE_ATTRS, **LAYOUT_ATTR},
    infer=_transpose_out_type,
    flops=lambda ins, outs, a: _conv_flops(ins[0], ins[1].shape),
    reference=conv_transpose2d_reference,
    gradient=conv_transpose2d_gradient,
    doc="[x (N,C,H,W), w (C,O/groups,kH,kW)] -> (N,O,OH,OW), the adjoint of Conv2D.",
))
