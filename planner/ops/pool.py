"""Pooling: MaxPool, AvgPool, GlobalAvgPool and their backward ops, over NCHW inputs.

Window geometry is conv.py's: pads [top, left, bottom, right], and ceil_mode keeps a last
partial window unless it starts inside the bottom/right padding (PyTorch, ONNX). Padding never
wins a max. AvgPool divides by the number of input elements in the window, or with
count_include_pad by the window clipped to the padded input (PyTorch's divisor). Every pad must
be smaller than the dilated kernel, so that every window overlaps the input.

Example:
    >>> import numpy as np
    >>> x = np.arange(16.0).reshape(1, 1, 4, 4)
    >>> maxpool_reference([x], {"kernel": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0],
    ...                         "dilations": [1, 1], "ceil_mode": False})[0][0, 0]
    array([[ 5.,  7.],
           [13., 15.]])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.dtypes import LOW_FLOATS
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    get_op,
    register,
    reorder_scratch,
    require_float,
    require_rank,
    widening_scratch,
)
from planner.ops.conv import Window, crop_nchw, pad_nchw, read_window, scatter_windows, windows

MAXPOOL_ATTRS: dict[str, Attr] = {
    "kernel": Attr("ints", required=True),
    "strides": Attr("ints", [1, 1]),
    "pads": Attr("ints", [0, 0, 0, 0]),
    "dilations": Attr("ints", [1, 1]),
    "ceil_mode": Attr("bool", False),
}
AVGPOOL_ATTRS: dict[str, Attr] = {
    "kernel": Attr("ints", required=True),
    "strides": Attr("ints", [1, 1]),
    "pads": Attr("ints", [0, 0, 0, 0]),
    "ceil_mode": Attr("bool", False),
    "count_include_pad": Attr("bool", False),
}


@dataclass(frozen=True)
class Pooling:
    """Where a pool's windows fall: `extra` rows/columns beyond the bottom/right padding are
    reached only by ceil_mode's last partial window."""

    win: Window
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    extra: tuple[int, int]

    @property
    def padded_hw(self) -> tuple[int, int]:
        h, w = self.win.padded(self.in_hw)
        return h + self.extra[0], w + self.extra[1]


def pooling(op: str, x_shape: tuple[int, ...], a: Attrs) -> Pooling:
    """Geometry of a pool node over an input of shape x_shape; OpError if it does not fit."""
    kernel = tuple(a["kernel"])
    if len(kernel) != 2 or min(kernel) < 1:
        raise OpError(f"{op}: attribute 'kernel' must be 2 integers >= 1, got {list(kernel)}")
    win = read_window(op, a, kernel)
    span = win.span
    if any(p >= span[k % 2] for k, p in enumerate(win.pads)):
        raise OpError(f"{op}: pads {list(win.pads)} must be smaller than the kernel extent "
                      f"{list(span)}, or some window would cover only padding")
    in_hw = (x_shape[2], x_shape[3])
    out_hw = win.out_hw(op, in_hw, a["ceil_mode"])
    padded = win.padded(in_hw)
    extra = tuple(max(0, (o - 1) * s + e - p)
                  for o, s, e, p in zip(out_hw, win.strides, span, padded, strict=True))
    return Pooling(win, in_hw, out_hw, extra)


def _pool_type(op: str, x: TensorType, a: Attrs) -> TensorType:
    require_rank(op, x, 4, "input x (N,C,H,W)")
    require_float(op, x, "input x")
    p = pooling(op, x.shape, a)
    return TensorType((*x.shape[:2], *p.out_hw), x.dtype)


def _input_shape(op: str, a: Attrs) -> tuple[int, ...]:
    shape = tuple(a["input_shape"])
    # an empty batch is a shape like any other (PyTorch's "optional 0-dim batch size")
    if len(shape) != 4 or shape[0] < 0 or min(shape[1:]) < 1:
        raise OpError(f"{op}: attribute 'input_shape' must be 4 integers, the batch >= 0 and "
                      f"the others >= 1, got {list(shape)}")
    return shape


def _check_dy(op: str, dy: TensorType, y: TensorType) -> None:
    if dy.shape != y.shape or dy.dtype != y.dtype:
        raise OpError(f"{op}: gradient dy is {dy.dtype}{list(dy.shape)} but the pool output is "
                      f"{y.dtype}{list(y.shape)}")


def _window_flops(a: Attrs, extra: int) -> int:
    """Per output element: one compare or add per kernel tap, plus `extra`."""
    return int(np.prod(a["kernel"])) + extra


# ---- MaxPool ---------------------------------------------------------------------------------


def _max_windows(x: np.ndarray, p: Pooling) -> np.ndarray:
    return windows(pad_nchw(x, p.win, -np.inf, p.extra), p.win, p.out_hw)


def maxpool_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    (x,) = xs
    return [_max_windows(x, pooling("MaxPool", x.shape, a)).max(axis=(4, 5))]


def maxpool_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """The gradient goes to the first maximum of each window in row-major tap order."""
    dy, x = xs
    p = pooling("MaxPoolGrad", x.shape, a)
    taps = _max_windows(x, p).reshape(*dy.shape, int(np.prod(p.win.kernel)))
    cols = np.zeros(taps.shape, dtype=dy.dtype)
    np.put_along_axis(cols, taps.argmax(axis=-1)[..., None], dy[..., None], axis=-1)
    dxp = scatter_windows(cols.reshape(*dy.shape, *p.win.kernel), p.win, p.padded_hw)
    return [crop_nchw(dxp, p.win, p.in_hw)]


def maxpool_gradient(g: GradBuilder, node, grad_outputs: list[str | None]) -> list[str | None]:
    (dy,) = grad_outputs
    (x,) = node.inputs
    if dy is None or not g.needs(x):
        return [None]
    (dx,) = g.emit("MaxPoolGrad", [dy, x], get_op("MaxPool").normalize_attrs(node.attrs))
    return [dx]


def _maxpool_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, x = ins
    _check_dy("MaxPoolGrad", dy, _pool_type("MaxPoolGrad", x, a))
    return [x]


register(OpDef(
    name="MaxPool",
    scratch=widening_scratch(reorder_scratch(2)),
    cost_class="reduction", arity=1, attrs=MAXPOOL_ATTRS,
    infer=lambda ins, a: [_pool_type("MaxPool", ins[0], a)],
    flops=lambda ins, outs, a: outs[0].size * _window_flops(a, 0),
    reference=maxpool_reference,
    gradient=maxpool_gradient,
    # The CPU loops also run on a blocked x and y, held alike (kernels/max_pool.cpp).
    channel_blocked=lambda a: ((("in", 0), ("out", 0)),),
    doc="Max over each window; padding never wins.",
))

register(OpDef(
    name="MaxPoolGrad",
    scratch=widening_scratch(reorder_scratch(2)),
    cost_class="reduction", arity=2, attrs=MAXPOOL_ATTRS,
    infer=_maxpool_grad_infer,
    flops=lambda ins, outs, a: ins[0].size * _window_flops(a, 1),
    reference=maxpool_grad_reference,
    channel_blocked=lambda a: ((("in", 0), ("in", 1), ("out", 0)),),
    doc="[dy, x] -> dx: dy routed to the first maximum of each window (oneDNN, PyTorch).",
))


# ---- AvgPool ---------------------------------------------------------------------------------


def _divisor(p: Pooling, count_include_pad: bool, dtype: np.dtype) -> np.ndarray:
    """(OH, OW) element counts of each window: input elements only, or the window clipped to
    the padded input when padding counts."""
    mask = np.zeros((1, 1, *p.padded_hw), dtype=dtype)
    if count_include_pad:
        h, w = p.win.padded(p.in_hw)
        mask[:, :, :h, :w] = 1
    else:
        t, l = p.win.pads[:2]
        mask[:, :, t:t + p.in_hw[0], l:l + p.in_hw[1]] = 1
    return windows(mask, p.win, p.out_hw).sum(axis=(4, 5))[0, 0]


def avgpool_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    (x,) = xs
    p = pooling("AvgPool", x.shape, a)
    sums = windows(pad_nchw(x, p.win, 0.0, p.extra), p.win, p.out_hw).sum(axis=(4, 5))
    return [sums / _divisor(p, a["count_include_pad"], x.dtype)]


def avgpool_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    (dy,) = xs
    p = pooling("AvgPoolGrad", tuple(a["input_shape"]), a)
    share = dy / _divisor(p, a["count_include_pad"], dy.dtype)
    cols = np.broadcast_to(share[..., None, None], (*dy.shape, *p.win.kernel))
    dxp = scatter_windows(cols, p.win, p.padded_hw)
    return [crop_nchw(dxp, p.win, p.in_hw)]


def avgpool_gradient(g: GradBuilder, node, grad_outputs: list[str | None]) -> list[str | None]:
    (dy,) = grad_outputs
    (x,) = node.inputs
    if dy is None or not g.needs(x):
        return [None]
    attrs = get_op("AvgPool").normalize_attrs(node.attrs)
    (dx,) = g.emit("AvgPoolGrad", [dy], {**attrs, "input_shape": list(g.type(x).shape)})
    return [dx]


def _avgpool_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    (dy,) = ins
    x = TensorType(_input_shape("AvgPoolGrad", a), dy.dtype)
    _check_dy("AvgPoolGrad", dy, _pool_type("AvgPoolGrad", x, a))
    return [x]


register(OpDef(
    name="AvgPool",
    scratch=reorder_scratch(2),
    cost_class="reduction", arity=1, attrs=AVGPOOL_ATTRS,
    infer=lambda ins, a: [_pool_type("AvgPool", ins[0], a)],
    flops=lambda ins, outs, a: outs[0].size * _window_flops(a, 1),
    reference=avgpool_reference,
    gradient=avgpool_gradient,
    doc="Mean over each window (kh*kw adds and one divide per output).",
))

def _whole_image_blocked(a: Attrs) -> tuple[tuple[tuple[str, int], ...], ...]:
    """OpDef.channel_blocked of AvgPoolGrad: GlobalAvgPool's gradient (one window over the whole
    unpadded image) runs on oneDNN's pooling with dx blocked or plain, each alone, and dy
    (N, C, 1, 1) too: a 1x1 map's bytes are the same in either layout (kernels/pool.cpp).
    Other windows keep both plain."""
    shape = list(a.get("input_shape", ()))
    whole = (len(shape) == 4 and list(a["kernel"]) == shape[2:]
             and not any(a.get("pads", ())))
    return ((("out", 0),), (("in", 0),)) if whole else ()


register(OpDef(
    name="AvgPoolGrad",
    scratch=reorder_scratch(2),
    cost_class="reduction", arity=1,
    attrs={**AVGPOOL_ATTRS, "input_shape": Attr("ints", required=True)},
    infer=_avgpool_grad_infer,
    flops=lambda ins, outs, a: ins[0].size * _window_flops(a, 1),
    reference=avgpool_grad_reference,
    channel_blocked=_whole_image_blocked,
    doc="[dy] -> dx of shape input_shape: each dy spread evenly over its window's divisor.",
))


# ---- GlobalAvgPool: an AvgPool whose window is the whole image --------------------------------


def _global_type(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    (x,) = ins
    require_rank("GlobalAvgPool", x, 4, "input x (N,C,H,W)")
    require_float("GlobalAvgPool", x, "input x")
    # A mean is a reduction: over a bfloat16 / float16 x it accumulates and answers in float32.
    return [TensorType((*x.shape[:2], 1, 1), "float32" if x.dtype in LOW_FLOATS else x.dtype)]


def global_avgpool_gradient(g: GradBuilder, node, grad_outputs: list[str | None]
                            ) -> list[str | None]:
    (dy,) = grad_outputs
    (x,) = node.inputs
    if dy is None or not g.needs(x):
        return [None]
    shape = list(g.type(x).shape)
    attrs = {"kernel": shape[2:], "input_shape": shape}
    (dx,) = g.emit("AvgPoolGrad", [dy], attrs)
    return [dx]


register(OpDef(
    name="GlobalAvgPool",
    scratch=reorder_scratch(2),
    cost_class="reduction", arity=1,
    infer=_global_type,
    flops=lambda ins, outs, a: ins[0].size + outs[0].size,
    reference=lambda xs, a: [xs[0].mean(axis=(2, 3), keepdims=True)],
    gradient=global_avgpool_gradient,
    # The CPU kernel reads a blocked x as well (kernels/reduce.cpp); y is (N, C, 1, 1), the
    # same bytes in either layout.
    channel_blocked=lambda a: ((("in", 0),), (("out", 0),)),
    doc="(N,C,H,W) -> (N,C,1,1) mean over H and W (one add per input, one divide per output).",
))
