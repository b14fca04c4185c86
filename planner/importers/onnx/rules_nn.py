"""Rules for windowed ops: Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool,
GlobalMaxPool.

The planner's convolutions and pools are 2-D (NCHW). A 1-D one (N, C, L) runs as 2-D over
(N, C, 1, L), with a Reshape on each side and the kernel widened to (1, k); 3-D ones are
unsupported. auto_pad (SAME_UPPER, SAME_LOWER, VALID) becomes explicit pads, and ONNX's pads
[x1_begin, x2_begin, x1_end, x2_end] are the planner's [top, left, bottom, right] as they are.
A Conv bias becomes a BiasAdd on the channel axis.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.importers.kit import Unsupported
from planner.importers.onnx.context import NodeCtx, Value, rule
from planner.importers.onnx.errors import OnnxImportError


def spatial_dims(n: NodeCtx, rank: int) -> int:
    """1 or 2 spatial dims for an input of this rank; Unsupported otherwise."""
    if rank in (3, 4):
        return rank - 2
    raise Unsupported(f"{n.op_type} ({rank - 2}-D)" if rank > 4 else f"{n.op_type} (rank {rank})")


def ints_attr(n: NodeCtx, name: str, dims: int, default: int) -> list[int]:
    value = list(n.attr(name) or [default] * dims)
    if len(value) != dims:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): attribute {name!r} is {value}, "
                              f"expected {dims} values")
    return [int(v) for v in value]


def window_pads(n: NodeCtx, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int]) -> list[int]:
    """Explicit pads (begins then ends) for a conv or pool node, resolving auto_pad: SAME keeps
    ceil(size / stride) outputs, the odd padding going at the end (UPPER) or begin (LOWER)."""
    dims = len(sizes)
    auto = n.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto == "NOTSET":
        return ints_attr(n, "pads", 2 * dims, 0)
    if auto == "VALID":
        return [0] * (2 * dims)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): unknown auto_pad {auto!r}")
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else large)
        ends.append(large if auto == "SAME_UPPER" else small)
    return begins + ends


def as_2d(dims: int, values: Sequence[int], fill: int) -> list[int]:
    """Per-axis attribute values for the planner's 2-D op: 1-D ones get a leading `fill`."""
    return [fill, *values] if dims == 1 else list(values)


def pads_2d(dims: int, pads: Sequence[int]) -> list[int]:
    return [0, pads[0], 0, pads[1]] if dims == 1 else list(pads)


def to_2d(n: NodeCtx, x: Value) -> Value:
    """(N, C, L) -> (N, C, 1, L)."""
    shape = list(n.type_of(x).shape)
    return n.emit1("Reshape", [x], {"shape": [*shape[:2], 1, shape[2]]})


def finish(n: NodeCtx, dims: int, y: Value, bias: Value | None = None) -> None:
    """Bind output 0 to y, after dropping the 1-D case's extra axis and adding the bias."""
    if dims == 1:
        shape = list(n.type_of(y).shape)
        y = n.emit1("Reshape", [y], {"shape": [*shape[:2], shape[3]]},
                    output=None if bias is not None else 0)
    if bias is not None:
        n.emit1("BiasAdd", [y, bias], {"axis": 1}, output=0)


@rule("Conv")
def conv(n: NodeCtx) -> None:
    x, w = n.value(0), n.value(1)
    xshape, wshape = n.shape(0), n.shape(1)
    dims = spatial_dims(n, len(xshape))
    if len(wshape) != len(xshape):
        raise OnnxImportError(f"node {n.label!r} (Conv): weight shape {list(wshape)} does not "
                              f"match input shape {list(xshape)}")
    kernel = list(wshape[2:])
    strides = ints_attr(n, "strides", dims, 1)
    dilations = ints_attr(n, "dilations", dims, 1)
    pads = window_pads(n, xshape[2:], kernel, strides, dilations)
    if dims == 1:
        x, w = to_2d(n, x), to_2d(n, w)
    attrs = {"strides": as_2d(dims, strides, 1), "dilations": as_2d(dims, dilations, 1),
             "pads": pads_2d(dims, pads), "groups": int(n.attr("group", 1))}
    bias = n.value(2) if n.has_input(2) else None
    last = dims == 2 and bias is None
    y = n.emit1("Conv2D", [x, w], attrs, output=0 if last else None)
    if not last:
        finish(n, dims, y, bias)


@rule("ConvTranspose")
def conv_transpose(n: NodeCtx) -> None:
    x, w = n.value(0), n.value(1)
    xshape, wshape = n.shape(0), n.shape(1)
    dims = spatial_dims(n, len(xshape))
    kernel = list(wshape[2:])
    strides = ints_attr(n, "strides", dims, 1)
    dilations = ints_attr(n, "dilations", dims, 1)
    pads, output_padding = _transpose_pads(n, xshape[2:], kernel, strides, dilations,
                                           ints_attr(n, "output_padding", dims, 0))
    if dims == 1:
        x, w = to_2d(n, x), to_2d(n, w)
    attrs = {"strides": as_2d(dims, strides, 1), "dilations": as_2d(dims, dilations, 1),
             "pads": pads_2d(dims, pads), "groups": int(n.attr("group", 1)),
             "output_padding": as_2d(dims, output_padding, 0)}
    bias = n.value(2) if n.has_input(2) else None
    last = dims == 2 and bias is None
    y = n.emit1("ConvTranspose2D", [x, w], attrs, output=0 if last else None)
    if not last:
        finish(n, dims, y, bias)


def _transpose_pads(n: NodeCtx, sizes: Sequence[int], kernel: Sequence[int],
                    strides: Sequence[int], dilations: Sequence[int],
                    output_padding: Sequence[int]) -> tuple[list[int], list[int]]:
    """(pads, output_padding) of a transposed conv. With output_shape (or SAME auto_pad, whose
    output is size * stride) the total padding follows from the output size, split as ONNX
    says: the odd element at the end for SAME_UPPER, at the begin otherwise. A negative pad at
    the end (an output larger than the full one) is more output_padding."""
    dims = len(sizes)
    auto = n.attr("auto_pad", "NOTSET") or "NOTSET"
    target = n.attr("output_shape")
    if target is None and auto in ("NOTSET", "VALID"):
        pads = [0] * (2 * dims) if auto == "VALID" else ints_attr(n, "pads", 2 * dims, 0)
        return pads, list(output_padding)
    if target is None:
        target = [size * s for size, s in zip(sizes, strides, strict=True)]
    target = list(target)[-dims:]
    begins, ends, extra = [], [], []
    for size, k, s, d, op, out in zip(sizes, kernel, strides, dilations, output_padding, target,
                                      strict=True):
        total = s * (size - 1) + op + (k - 1) * d + 1 - out
        small, large = total // 2, total - total // 2
        begin, end = (small, large) if auto == "SAME_UPPER" else (large, small)
        if begin < 0 or op - min(end, 0) >= s:
            raise Unsupported("ConvTranspose (output_shape beyond the full output)")
        begins.append(begin)
        ends.append(max(end, 0))
        extra.append(op - min(end, 0))
    return begins + ends, extra


def _pool_attrs(n: NodeCtx, dims: int, sizes: Sequence[int]) -> dict:
    kernel = [int(k) for k in n.require_attr("kernel_shape")]
    if len(kernel) != dims:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): kernel_shape {kernel} does not "
                              f"fit a {dims}-D input")
    strides = ints_attr(n, "strides", dims, 1)
    dilations = ints_attr(n, "dilations", dims, 1)
    pads = window_pads(n, sizes, kernel, strides, dilations)
    attrs = {"kernel": as_2d(dims, kernel, 1), "strides": as_2d(dims, strides, 1),
             "pads": pads_2d(dims, pads), "ceil_mode": bool(n.attr("ceil_mode", 0))}
    if n.op_type == "MaxPool":
        attrs["dilations"] = as_2d(dims, dilations, 1)
    elif any(d != 1 for d in dilations):
        raise Unsupported("AveragePool (dilated)")
    else:
        attrs["count_include_pad"] = bool(n.attr("count_include_pad", 0))
    return attrs


@rule("MaxPool", "AveragePool")
def pool(n: NodeCtx) -> None:
    x, shape = n.value(0), n.shape(0)
    dims = spatial_dims(n, len(shape))
    attrs = _pool_attrs(n, dims, shape[2:])
    op = "MaxPool" if n.op_type == "MaxPool" else "AvgPool"
    if dims == 1:
        x = to_2d(n, x)
    y = n.emit1(op, [x], attrs, output=0 if dims == 2 else None)
    if dims == 1:
        finish(n, dims, y)


@rule("GlobalAveragePool")
def global_average_pool(n: NodeCtx) -> None:
    shape = n.shape(0)
    if len(shape) == 4:
        n.emit1("GlobalAvgPool", [n.value(0)], output=0)
    elif len(shape) >= 3:
        n.emit1("ReduceMean", [n.value(0)],
                {"axes": list(range(2, len(shape))), "keepdims": True}, output=0)
    else:
        raise Unsupported(f"GlobalAveragePool (rank {len(shape)})")


@rule("GlobalMaxPool")
def global_max_pool(n: NodeCtx) -> None:
    # A max pool whose one window is the whole image: exact, and MaxPool has a gradient.
    x, shape = n.value(0), n.shape(0)
    dims = spatial_dims(n, len(shape))
    if dims == 1:
        x = to_2d(n, x)
    hw = list(n.type_of(x).shape[2:])
    y = n.emit1("MaxPool", [x], {"kernel": hw}, output=0 if dims == 2 else None)
    if dims == 1:
        finish(n, dims, y)


# ---- Resize and Upsample: the planner's Resize over the last two axes ------------------------

_RESIZE_MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear"}


@rule("Resize", "Upsample")
def resize(n: NodeCtx) -> None:
    """Resize (opset 10: X, scales; 11+: X, roi, scales, sizes) and Upsample (X, scales) of
    an (N, C, L) or (N, C, H, W) input: N and C keep their size."""
    shape = n.shape(0)
    dims = spatial_dims(n, len(shape))
    mode = _RESIZE_MODES.get(n.attr("mode", "nearest"))
    if mode is None:
        raise Unsupported(f"{n.op_type} (mode {n.attr('mode')})")
    old = n.op_type == "Upsample" or n.opset < 11
    coordinate_mode = "asymmetric" if old else n.attr("coordinate_transformation_mode",
                                                      "half_pixel")
    if coordinate_mode not in ("half_pixel", "pytorch_half_pixel", "align_corners",
                               "asymmetric"):
        raise Unsupported(f"{n.op_type} (coordinate_transformation_mode {coordinate_mode})")
    nearest_mode = "floor" if old else n.attr("nearest_mode", "round_prefer_floor")
    if n.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Unsupported(f"{n.op_type} (keep_aspect_ratio_policy "
                          f"{n.attr('keep_aspect_ratio_policy')})")
    scales, sizes = _resize_targets(n, shape)
    if scales[:2] != [1.0, 1.0] or sizes[:2] != list(shape[:2]):
        raise Unsupported(f"{n.op_type} (of the batch or channel axis)")
    if n.attr("antialias", 0) and mode == "linear" and any(s < 1 for s in scales[2:]):
        raise Unsupported(f"{n.op_type} (antialias when downsampling)")
    if sizes == list(shape) and scales == [1.0] * len(shape):
        n.bind(0, n.value(0))
        return
    x = to_2d(n, n.value(0)) if dims == 1 else n.value(0)
    attrs = {"sizes": as_2d(dims, sizes[2:], 1),
             "scales": [1.0, *scales[2:]] if dims == 1 else scales[2:],
             "mode": mode, "coordinate_mode": coordinate_mode, "nearest_mode": nearest_mode}
    y = n.emit1("Resize", [x], attrs, output=0 if dims == 2 else None)
    finish(n, dims, y)


def _resize_targets(n: NodeCtx, shape: Sequence[int]) -> tuple[list[float], list[int]]:
    """(scale per axis, output size per axis) from the node's scales or sizes input."""
    rank = len(shape)
    if n.op_type == "Upsample" or n.opset < 11:
        scales = [float(s) for s in n.const_array(1, "scales").reshape(-1)] \
            if n.has_input(1) else [float(s) for s in n.require_attr("scales")]
        sizes = None
    else:
        scales = [float(s) for s in n.const_array(2, "scales").reshape(-1)] \
            if n.has_input(2) else []
        sizes = [int(s) for s in n.const_array(3, "sizes").reshape(-1)] \
            if n.has_input(3) else []
        if (not scales) == (not sizes):
            raise OnnxImportError(f"node {n.label!r} (Resize): give exactly one of scales "
                                  f"and sizes")
    axes = [int(a) % rank for a in n.attr("axes") or range(rank)]
    given = scales or sizes
    if len(given) != len(axes):
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): {len(given)} scales or sizes "
                              f"for {len(axes)} axes")
    full_scales, full_sizes = [1.0] * rank, list(shape)
    for k, a in enumerate(axes):
        if scales:
            if not scales[k] > 0:
                raise OnnxImportError(f"node {n.label!r} ({n.op_type}): scale {scales[k]} "
                                      f"must be > 0")
            full_scales[a] = scales[k]
            full_sizes[a] = int(shape[a] * scales[k])
        else:
            full_sizes[a] = sizes[k]
            full_scales[a] = sizes[k] / shape[a] if shape[a] else 1.0
    if any(s < 1 for s in full_sizes):
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): output sizes {full_sizes} "
                              f"must be >= 1")
    return full_scales, full_sizes
