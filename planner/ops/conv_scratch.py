"""The CPU scratch rule of the convolutions: an upper bound, at the op's planned thread count,
on what the CPU runtime's oneDNN 3.2 convolution kernel asks for (its layout temporaries plus
the primitive's scratchpad), whichever of oneDNN's x86 implementations it picks. A float64
convolution (oneDNN has none) runs the runtime's im2col and dgemm instead: its rule is
float64_columns_bytes per thread.

The kernel (templates/cpu/runtime/kernels/conv.cpp) creates the primitive on `any` layouts and
reorders every operand whose chosen layout is blocked into a temporary: at most one copy of each
operand with its channel axes padded to oneDNN's largest block, 16 (an image of fewer than 8
channels stays plain: every direct kernel reads a first layer's image flat).

The primitive's own scratchpad, read from oneDNN v3.2's bookings (threads = the OpenMP team the
primitive is created with, which the executor sets to the plan's thread count):

- GEMM (im2col) convolutions (src/cpu/gemm_convolution_utils.cpp), per thread: the im2col
  columns (C/groups x kH x kW x OH x OW floats), a transposed image or an accumulator (H x W x
  C/groups, plus OH x OW x O/groups for bfloat16), and for the weight gradient the per-thread
  reduction buffer `book<float>(key_conv_wei_reduction, nthr * weights_d.size())`: a count of
  floats equal to the weights' size in *bytes*, i.e. 4 x the weights' bytes per thread.
- brgemm convolutions (forward, strided data gradient), per thread: a padded block of the
  input, an accumulator, a batch list, each page-aligned.
- Direct JIT kernels' weight gradients (jit_avx2 / jit_avx512_common, cpu_reducer.cpp): per
  thread beyond the first, a partial of the padded weights and bias.

So the weight gradient's scratch grows with threads x weights: ResNet-18's 256x256x3x3 layer at
2 threads asks for 18.1 MiB (4 x 2 x 2.25 MiB), where twice its operands would be 4.6 MiB.

>>> from planner.ops.base import TensorType
>>> attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1}
>>> dw = conv_scratch("Conv2DBackpropFilter")
>>> x = TensorType((4, 256, 2, 2))
>>> dw([x, x], [TensorType((256, 256, 3, 3))], attrs, 2) >= 18_948_352   # measured, AVX2
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from planner.dtypes import num_bytes
from planner.ops.base import Attrs, Scratch, TensorType

F32 = 4         # every oneDNN scratch buffer of a convolution holds float32 (or narrower)
BLOCK = 16      # oneDNN's largest channel block on x86 (AVX-512)
SLACK = 4096    # per booking: oneDNN aligns buffers (the reducer to a 4 KiB page)
GEMM_LIMIT = 1 << 30  # gemm_convolution_utils.cpp: scratchpad_limit_by_absolute_value

# Which operand is the convolution's image x, weights w and output y, per op: (list, index).
Roles = dict[str, tuple[str, int]]
ROLES: dict[str, Roles] = {
    "Conv2D": {"x": ("in", 0), "w": ("in", 1), "y": ("out", 0)},
    "Conv2DBackpropInput": {"y": ("in", 0), "w": ("in", 1), "x": ("out", 0)},
    "Conv2DBackpropFilter": {"x": ("in", 0), "y": ("in", 1), "w": ("out", 0)},
    # y = ConvTranspose2D(x, w) is the data gradient of the Conv2D from y to x (conv.py).
    "ConvTranspose2D": {"y": ("in", 0), "w": ("in", 1), "x": ("out", 0)},
}


def _round(n: int, block: int = BLOCK) -> int:
    return -(-n // block) * block


def _padded_bytes(t: TensorType, kind: str) -> int:
    """Bytes of `t` (kind: image, output or weight) in a blocked layout: channels (axis 1, a
    weight's axes 0 and 1) padded to 16, except an image's fewer than 8 channels."""
    s = list(t.shape)
    if not (kind == "image" and s[1] < 8):
        s[1] = _round(s[1])
    if kind == "weight":
        s[0] = _round(s[0])
    return num_bytes(tuple(s), t.dtype)


def direct_kernels_apply(x: tuple[int, ...], w: tuple[int, ...], attrs: Attrs) -> bool:
    """Whether the geometry meets what oneDNN 3.2's direct JIT weight-gradient kernels
    require (jit_avx2_conv_bwd_weights_kernel_f32 and jit_avx512_common_conv_bwd_weights_
    kernel_f32 init_conf, the stricter of the two): one group, no dilation, the kernel no
    larger than the image and narrower than 14, pads at most half the kernel. Where it does
    not, oneDNN falls back to the GEMM path and its per-thread reduction buffers.

    >>> a = {"pads": [1, 1, 1, 1]}
    >>> direct_kernels_apply((4, 256, 8, 8), (256, 256, 3, 3), a)
    True
    >>> direct_kernels_apply((4, 256, 2, 2), (256, 256, 3, 3), a)   # ResNet-18's last stage
    False
    """
    _, _, h, wd = x
    _, _, kh, kw = w
    top, left, bottom, right = attrs.get("pads") or (0, 0, 0, 0)
    return (int(attrs.get("groups", 1)) == 1
            and tuple(attrs.get("dilations") or (1, 1)) == (1, 1)
            and kh <= h and kw <= wd and kw < 14
            and max(top, bottom) <= kh // 2 and max(left, right) <= kw // 2)


def library_scratchpad(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...], groups: int,
                       weight_gradient: bool, threads: int, direct: bool = False) -> int:
    """Bytes of the largest scratchpad oneDNN 3.2's x86 convolutions book for this geometry
    (x: N,C,H,W; w: O,C/groups,kH,kW; y: N,O,OH,OW) at `threads` threads; `direct`: a
    weight gradient the direct JIT kernels take (direct_kernels_apply), no GEMM fallback.

    >>> library_scratchpad((4, 256, 2, 2), (256, 256, 3, 3), (4, 256, 2, 2), 1, True, 2)
    18976768
    """
    return Bookings.of(x, w, y, groups, weight_gradient, direct).at(threads)


@dataclass(frozen=True)
class Bookings:
    """library_scratchpad's figures that no thread count changes, per thread: the GEMM path's
    bytes, the direct weight-gradient kernels' padded weights (0 without a weight gradient)
    and how many partials they keep at most, the brgemm path's bytes."""

    gemm: int
    partial: int
    partials: int
    brgemm: int

    @classmethod
    def of(cls, x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...], groups: int,
           weight_gradient: bool, direct: bool = False) -> Bookings:
        _, c, h, wd = x
        o, c_g, kh, kw = w
        oh, ow = y[2], y[3]
        welems = o * c_g * kh * kw
        per_thread = c_g * kh * kw * oh * ow + h * wd * c_g + oh * ow * (o // groups)
        if weight_gradient and not direct:
            per_thread += 4 * welems   # the reduction buffer: weights' bytes counted as floats
        padded = 0
        if weight_gradient:
            padded = (groups * _round(o // groups) * _round(c_g) * kh * kw
                      + groups * _round(o // groups))
        # brgemm convolutions (jit_brgemm_conv*_utils.cpp) stage per thread a block of the
        # padded input and an accumulator (at most one padded image each) and a batch list
        # (64 bytes an element, one per kernel tap and input block); each of their 4
        # bookings is page-aligned.
        taps = kh * kw * -(-c_g // BLOCK)
        images = (oh + kh) * (ow + kw) * _round(o) + (h + kh) * (wd + kw) * _round(c)
        # Threads split the direct kernels' reduction over the batch (and, jit_avx512_common's
        # 2-D harness, over output rows): no more partials than N x output rows (nthr_mb_max).
        return cls(gemm=F32 * per_thread, partial=F32 * padded, partials=x[0] * max(oh, ow),
                   brgemm=F32 * images + 64 * taps)

    def at(self, threads: int) -> int:
        """The largest scratchpad at `threads` threads."""
        # The GEMM path threads over the batch only while its estimate of this stays under
        # min(1 GiB, 15 x threads x the tensors' bytes); else it runs its GEMMs on one team.
        gemm = threads * self.gemm
        if gemm >= GEMM_LIMIT:
            gemm = self.gemm
        jit = min(threads, self.partials) * self.partial
        brgemm = threads * self.brgemm + 4 * SLACK
        return max(gemm, jit, brgemm) + 3 * SLACK


def conv_scratch(op: str) -> Scratch:
    """The `scratch` rule of convolution op `op`: layout temporaries + library_scratchpad."""
    return ConvScratch(op)


class ConvScratch:
    """A convolution's `scratch` rule (conv_scratch). `by_threads` is the rule of one node
    as a function of its thread count, the geometry worked out once: planning asks for a
    node's scratch at many thread counts (its schedule variants, planner.memory.variants)."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.roles = ROLES[op]

    def __call__(self, ins: list[TensorType], outs: list[TensorType], attrs: Attrs,
                 threads: int) -> int:
        return self.by_threads(ins, outs, attrs)(threads)

    def by_threads(self, ins: list[TensorType], outs: list[TensorType],
                   attrs: Attrs) -> Callable[[int], int]:
        def of(role: str) -> TensorType:
            side, k = self.roles[role]
            return (ins if side == "in" else outs)[k]

        x, w, y = of("x"), of("w"), of("y")
        if x.dtype == "float64":
            per_thread = float64_columns_bytes(w.shape, y.shape)
            return lambda threads: max(1, threads) * per_thread
        columns = (columns_bytes(x.shape, w.shape, y.shape)
                   if attrs.get("layout") == "columns" else 0)
        per_image = (image_columns_bytes(w.shape, y.shape)
                     if attrs.get("layout") == "image_columns" else 0)
        temps, bookings = _geometry(
            self.op, (tuple(x.shape), x.dtype), (tuple(w.shape), w.dtype),
            (tuple(y.shape), y.dtype), int(attrs.get("groups", 1)),
            tuple(attrs.get("pads") or (0, 0, 0, 0)), tuple(attrs.get("dilations") or (1, 1)))
        return lambda threads: max(columns, max(1, threads) * per_image,
                                   temps + bookings.at(max(1, threads)))


def float64_columns_bytes(w: tuple[int, ...], y: tuple[int, ...]) -> int:
    """The scratch of a float64 convolution's kernel (templates/cpu/runtime/kernels/
    conv_f64.cpp: im2col and dgemm, oneDNN having no f64 convolution) per thread of its team:
    at most one image's columns, every tap (C/groups kh kw, w's last three axes either way
    round) at every output position (OH OW of y, the convolution's output), in doubles,
    64-byte aligned.

    >>> float64_columns_bytes((4, 3, 3, 2), (2, 4, 2, 5))
    1472
    """
    return -(-w[1] * w[2] * w[3] * y[2] * y[3] * 8 // 64) * 64


def columns_bytes(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...]) -> int:
    """The scratch of the runtime's columns kernels (templates/cpu/runtime/kernels/
    conv_columns.cpp; the `columns` layout): the batch's columns (N OH OW x C kh kw floats) and
    the output's or dy's regrouped copy (N OH OW x O), each 64-byte aligned. A convolution on
    that layout gets the larger of this and oneDNN's bound: where the columns kernel does not
    apply (a type it does not compute in) oneDNN runs the op. (Its matmuls are oneDNN's sgemm,
    which keeps its packing buffers to itself, as its GEMM-based primitives do.)"""
    positions = y[0] * y[2] * y[3]
    return sum(-(-positions * n * F32 // 64) * 64 for n in (w[1] * w[2] * w[3], w[0]))


@lru_cache(maxsize=4096)
def _geometry(op: str, x: tuple[tuple[int, ...], str], w: tuple[tuple[int, ...], str],
              y: tuple[tuple[int, ...], str], groups: int, pads: tuple[int, ...],
              dilations: tuple[int, ...]) -> tuple[int, Bookings]:
    """What a convolution's scratch takes whatever its thread count (x, w, y: shape and
    dtype): the layout temporaries' bytes and the library's bookings. A pure function of its
    arguments, cached: planning asks for a node's scratch at many thread counts (its
    schedule variants, planner.memory.variants)."""
    wshape = w[0]
    if op == "ConvTranspose2D":   # IOHW (C, O/groups, ...) seen as the Conv2D's OIHW
        wshape = (wshape[1] * groups, wshape[0] // groups, *wshape[2:])
    # A data gradient's dx is written by kernels that want it blocked, whatever its channels.
    image = "image" if op in ("Conv2D", "Conv2DBackpropFilter") else "output"
    temps = (_padded_bytes(TensorType(*x), image)
             + _padded_bytes(TensorType(wshape, w[1]), "weight")
             + _padded_bytes(TensorType(*y), "output") + 3 * 64)
    direct = op == "Conv2DBackpropFilter" and direct_kernels_apply(
        x[0], wshape, {"groups": groups, "pads": pads, "dilations": dilations})
    return temps, Bookings.of(x[0], wshape, y[0], groups, op == "Conv2DBackpropFilter", direct)


def image_columns_bytes(w: tuple[int, ...], y: tuple[int, ...]) -> int:
    """The scratch of the runtime's image-by-image data gradient (the `image_columns` layout,
    templates/cpu/runtime/kernels/conv_columns.cpp) per thread of its team: one image's columns
    (C kh kw x OH OW floats) and a regrouped copy of its dy (O x OH OW, where the step keeps dy
    channel-blocked), each 64-byte aligned; oneDNN's bound where the kernel does not apply.

    >>> image_columns_bytes((64, 3, 4, 4), (64, 64, 32, 32))   # DCGAN's first layer, per thread
    458752
    """
    area = y[2] * y[3]
    return sum(-(-area * n * F32 // 64) * 64 for n in (w[1] * w[2] * w[3], w[0]))
