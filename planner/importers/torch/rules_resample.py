"""Antialiased resizing (`F.interpolate(..., antialias=True)`: aten._upsample_bilinear2d_aa,
_upsample_bicubic2d_aa) as two MatMuls with constant matrices, one per spatial axis.

PyTorch's antialiased resize is separable and linear in x: each output row (column) is a
weighted sum of a window of input rows (columns), whose weights depend only on the sizes, the
scale and align_corners (aten/src/ATen/native/cpu/UpSampleKernel.cpp,
`_compute_indices_min_size_weights_aa`). The filter (bilinear's triangle, bicubic's Keys cubic
with a = -0.5) is stretched by the scale when shrinking, so that every input pixel counts,
and each window's weights are normalised to sum to 1. Here `aa_weights` computes that matrix
[out, in] in float64 (torch computes it in x's dtype: the float32 weights differ from these
by rounding only), and the rule applies it to W then H with MatMul, whose gradient is the
adjoint torch's backward applies. The cost is a dense [in, out] product per axis, which
MAX_AA_LENGTH bounds. Resized to width 1 with the height resized to more than one row, torch's
CPU kernel (torch 2.9) gives every output row the first one's value, not these weights' result:
that case is refused in one line rather than answered otherwise than torch.
"""

from __future__ import annotations

import math

import numpy as np

from planner.importers.kit import Const
from planner.importers.torch.context import NodeCtx, Value, rule

# The longest input or output axis taken: the dense matrix is [in, out].
MAX_AA_LENGTH = 4096
# each filter's width in input pixels at scale 1 (torch's interp_size)
INTERP_SIZE = {"bilinear": 2, "bicubic": 4}


def _triangle(x: np.ndarray) -> np.ndarray:
    return np.maximum(1.0 - np.abs(x), 0.0)


def _keys_cubic(x: np.ndarray, a: float = -0.5) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _scale(size_in: int, size_out: int, align_corners: bool, scale: float | None) -> float:
    """torch's area_pixel_compute_scale: input pixels per output pixel."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else size_in / size_out


def aa_weights(size_in: int, size_out: int, mode: str, align_corners: bool = False,
               scale: float | None = None) -> np.ndarray:
    """The [size_out, size_in] matrix of torch's antialiased resize of one axis (module
    docstring); float64."""
    s = _scale(size_in, size_out, align_corners, scale)
    half = INTERP_SIZE[mode] * 0.5
    support = half * s if s >= 1.0 else half
    invscale = 1.0 / s if s >= 1.0 else 1.0
    width = math.ceil(support) * 2 + 1  # torch's max_interp_size
    filt = _triangle if mode == "bilinear" else _keys_cubic
    w = np.zeros((size_out, size_in))
    for i in range(size_out):
        center = s * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        count = min(max(min(int(center + support + 0.5), size_in) - lo, 0), width)
        taps = filt((np.arange(count) + lo - center + 0.5) * invscale)
        total = taps.sum()
        w[i, lo:lo + count] = taps / total if total != 0.0 else taps
    return w


@rule("aten._upsample_bilinear2d_aa.default", "aten._upsample_bicubic2d_aa.default")
def upsample_aa(n: NodeCtx) -> Value:
    """x (N, C, H, W) resized to output_size: x @ W_w^T, then W_h applied on H (a Transpose
    either side of the second MatMul)."""
    x = n.tensor(0)
    mode = "bilinear" if "bilinear" in n.op else "bicubic"
    shape = n.shape(x)
    if len(shape) != 4 or not n.dtype(x).startswith(("float", "bfloat")):
        raise n.fail(f"an input of shape {list(shape)} and dtype {n.dtype(x)} (it takes "
                     "float (N, C, H, W))")
    out_h, out_w = (int(s) for s in n.ints(1, "output_size"))
    align = bool(n.arg(2, "align_corners", False))
    scales = (n.arg(3, "scales_h"), n.arg(4, "scales_w"))
    longest = max(*shape[2:], out_h, out_w)
    if longest > MAX_AA_LENGTH:
        raise n.fail(f"an axis of length {longest}: the antialiased resize is a dense matrix "
                     f"product per axis, which the planner takes up to {MAX_AA_LENGTH}")
    if out_w == 1 and out_h not in (1, shape[2]):
        raise n.fail(f"an antialiased resize of height {shape[2]} to {out_h} and to width 1: "
                     "torch's CPU kernel gives every output row the first row's value there "
                     "(its resize of the height is lost), which the planner would not match")
    v = n.emit1("MatMul", [x, _matrix(n, shape[3], out_w, mode, align, scales[1], x)])
    v = n.emit1("Transpose", [v], {"perm": [0, 1, 3, 2]})
    v = n.emit1("MatMul", [v, _matrix(n, shape[2], out_h, mode, align, scales[0], x)])
    return n.emit1("Transpose", [v], {"perm": [0, 1, 3, 2]})


def _matrix(n: NodeCtx, size_in: int, size_out: int, mode: str, align: bool,
            scale: float | None, x: str | Const) -> Const:
    """aa_weights transposed, [in, out], in x's dtype: the right operand of x @ it."""
    w = aa_weights(size_in, size_out, mode, align, None if scale is None else float(scale))
    return n.const(np.ascontiguousarray(w.T), n.dtype(x))
