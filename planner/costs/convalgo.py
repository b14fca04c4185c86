"""Convolution algorithms on a GPU: each candidate's time and workspace bytes.

A convolution (forward, backward data, backward filter, transposed) can run several ways;
the faster ones need scratch memory (cuDNN's workspace). Memory planning gives each
convolution the fastest algorithm whose workspace fits the memory free at its step (seed 001,
Section 3.5). Candidates come from the cost table's GPU samples when the signature was
profiled; otherwise from defaults for cuDNN's algorithm families, with these workspace
formulas (float32; the equivalent forward convolution maps an image N x C x H x W to an output
N x O x OH x OW with a kh x kw kernel and g groups):

    family                 workspace bytes                                 when
    IMPLICIT_GEMM          0                                               always
    IMPLICIT_PRECOMP_GEMM  8 kh kw OH OW (precomputed tap offsets)         always
    GEMM                   4 N (C / g) kh kw OH OW (explicit im2col)       always
    WINOGRAD               0                 (fused F(2x2, 3x3))           3x3, stride 1, g = 1
    WINOGRAD_NONFUSED      4 * 36 (C T + O C + O T), T = N ceil(OH/4) ceil(OW/4)  (same)
    FFT                    8 Ph (Pw/2 + 1) (N C + O C + N O), P = H + kh - 1 <= 256
                                                                          stride 1, no dilation

In bfloat16 / float16 cuDNN offers fewer families, with other workspaces (measured on an H200,
bench/results/2026-11-27-h200-resnet50-bf16.gpu.costs.json, and bounded there by
tests/costs/test_precision_costs.py): IMPLICIT_PRECOMP_GEMM runs on the tensor cores over NHWC
copies of its operands (workspace: the image with channels padded to 8, the output, the filter;
a filter gradient adds split-K partial sums in float32, at most one 128 x 128 tile per SM);
GEMM's im2col is of the low type (for a gradient it is the same algorithm as
IMPLICIT_PRECOMP_GEMM, so it is not offered twice); IMPLICIT_GEMM and GEMM stay on the CUDA
cores (float32's rate); WINOGRAD_NONFUSED transforms in float32 as above; fused WINOGRAD and FFT
are not offered.

Default times are rooflines over each family's own arithmetic (Winograd F(2x2,3x3) does
1/2.25 and F(4x4,3x3) 1/4 of the direct multiplies; FFT does complex products per frequency
plus the transforms) at a per-family fraction of the GPU's peak, plus a launch: modelled, not
measured, and marked "default" in the plan. Profiling the GPU replaces them.

Example:
    >>> from planner.costs import OpSignature
    >>> from planner.target import preset
    >>> sig = OpSignature(op="Conv2D", shapes=((8, 64, 56, 56), (64, 64, 3, 3)),
    ...                   dtypes=("float32", "float32"), attrs={"dilations": [1, 1],
    ...                   "groups": 1, "pads": [1, 1, 1, 1], "strides": [1, 1]})
    >>> algos = conv_algorithms(sig, preset("k40c-12gb").gpus[0])
    >>> [a.algorithm for a in algos][:2], algos[0].workspace_bytes
    (['WINOGRAD', 'IMPLICIT_GEMM'], 0)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from planner.costs.analytical import GPU_LAUNCH_SECONDS
from planner.costs.records import CostTable
from planner.costs.signature import OpSignature
from planner.dtypes import DTYPE_BYTES
from planner.target.records import GPU

# Fraction of the GPU's FP32 peak each family's arithmetic reaches (modelled defaults).
EFFICIENCY = {"IMPLICIT_GEMM": 0.25, "IMPLICIT_PRECOMP_GEMM": 0.45, "GEMM": 0.55,
              "WINOGRAD": 0.35, "WINOGRAD_NONFUSED": 0.5, "FFT": 0.5}
# cuDNN's FFT algorithm handles padded sizes up to this.
FFT_MAX = 256


@dataclass(frozen=True)
class ConvAlgo:
    """One way to run a convolution: seconds, workspace bytes, and where they came from."""

    algorithm: str
    seconds: float
    workspace_bytes: int
    source: str  # "measured" (cost table) or "default" (family formula)


@dataclass(frozen=True)
class ConvProblem:
    """The equivalent forward convolution of a conv-family op (see the module docstring)."""

    n: int
    c: int
    h: int
    w: int
    o: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    itemsize: int = 4  # bytes per element of the data (2 for a bfloat16/float16 convolution)

    @property
    def macs(self) -> int:
        return self.n * self.o * self.oh * self.ow * (self.c // self.groups) * self.kh * self.kw

    @property
    def io_bytes(self) -> int:
        return self.itemsize * (self.n * self.c * self.h * self.w
                                + self.n * self.o * self.oh * self.ow
                                + self.o * (self.c // self.groups) * self.kh * self.kw)


def problem(sig: OpSignature) -> ConvProblem:
    """The forward convolution a conv-family signature computes (or differentiates)."""
    a = sig.attrs
    stride = tuple(a.get("strides", [1, 1]))
    dilation = tuple(a.get("dilations", [1, 1]))
    groups = int(a.get("groups", 1))
    if sig.op == "Conv2D":
        img, w = sig.shapes[0], sig.shapes[1]
        out = (img[0], w[0], *_out_hw(img[2:], w[2:], a))
    elif sig.op == "Conv2DBackpropInput":
        out, w = sig.shapes[0], sig.shapes[1]
        img = tuple(a["input_shape"])
    elif sig.op == "Conv2DBackpropFilter":
        img, out = sig.shapes[0], sig.shapes[1]
        w = tuple(a["filter_shape"])
    elif sig.op == "ConvTranspose2D":
        # y = conv_transpose(x, w) is the data gradient of a convolution from y to x.
        x, w = sig.shapes[0], sig.shapes[1]
        out = x
        img = (x[0], w[1] * groups, *_transposed_hw(x[2:], w[2:], a))
    else:
        raise ValueError(f"{sig.op} is not a convolution")
    return ConvProblem(n=img[0], c=img[1], h=img[2], w=img[3], o=out[1], oh=out[2], ow=out[3],
                       kh=w[2], kw=w[3], stride=stride, dilation=dilation, groups=groups,
                       itemsize=DTYPE_BYTES.get(sig.dtypes[0], 4) if sig.dtypes else 4)


def _out_hw(hw, k, a) -> tuple[int, int]:
    t, l, b, r = a.get("pads", [0, 0, 0, 0])
    (sh, sw), (dh, dw) = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    return ((hw[0] + t + b - dh * (k[0] - 1) - 1) // sh + 1,
            (hw[1] + l + r - dw * (k[1] - 1) - 1) // sw + 1)


def _transposed_hw(hw, k, a) -> tuple[int, int]:
    t, l, b, r = a.get("pads", [0, 0, 0, 0])
    (sh, sw), (dh, dw) = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    oph, opw = a.get("output_padding", [0, 0])
    return ((hw[0] - 1) * sh - t - b + dh * (k[0] - 1) + oph + 1,
            (hw[1] - 1) * sw - l - r + dw * (k[1] - 1) + opw + 1)


# The families cuDNN runs on the tensor cores, per math type; the others are priced at float32's
# rate (WINOGRAD_NONFUSED's transforms the conservative choice). In bfloat16/float16 only its NHWC
# path: measured on an H200, IMPLICIT_GEMM and GEMM ran at CUDA-core rates, 4-6x slower. TF32's
# GEMM families are modelled, not measured yet.
TENSOR_CORE_FAMILIES = {"tf32": frozenset({"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM"}),
                        "bfloat16": frozenset({"IMPLICIT_PRECOMP_GEMM"}),
                        "float16": frozenset({"IMPLICIT_PRECOMP_GEMM"})}
# cuDNN's NHWC path in a low type reaches a smaller fraction of the tensor cores' peak than the
# CUDA-core families of float32's (the conversions, small tiles): fitted to the median of the
# H200's ResNet-50 bf16 table, which it predicts within a factor 2 (tests/costs).
LOW_TYPE_EFFICIENCY = {"IMPLICIT_PRECOMP_GEMM": 0.12, "WINOGRAD_NONFUSED": 0.25}
# A split-K filter gradient's float32 partial sums: at most one 128 x 128 tile per SM.
SPLIT_K_TILE_BYTES = 128 * 128 * 4
# Beyond the NHWC copies cuDNN aligns each and keeps a few indices (up to 400 bytes measured).
NHWC_SLACK_BYTES = 4096


def _peak(family: str, sig: OpSignature, gpu: GPU) -> float:
    return gpu.peak_flops_for(
        sig.math if family in TENSOR_CORE_FAMILIES.get(sig.math, ()) else "float32")


def default_algorithms(sig: OpSignature, gpu: GPU) -> list[ConvAlgo]:
    """cuDNN's families with modelled times and workspace formulas (module docstring)."""
    p = problem(sig)
    flops = 2.0 * p.macs
    bw = gpu.memory_bandwidth
    low = p.itemsize < 4  # a bfloat16 / float16 convolution (module docstring)

    def run(family: str, work: float, workspace: int, traffic: float = 0.0) -> ConvAlgo:
        efficiency = (LOW_TYPE_EFFICIENCY if low else EFFICIENCY).get(family, EFFICIENCY[family])
        seconds = GPU_LAUNCH_SECONDS + max(work / (_peak(family, sig, gpu) * efficiency),
                                           (p.io_bytes + traffic) / bw)
        return ConvAlgo(family, seconds, int(workspace), "default")

    cg = p.c // p.groups
    algos = [run("IMPLICIT_GEMM", flops, 0)]
    if low:  # the NHWC copies (module docstring), written once and read once
        c8 = -(-p.c // 8) * 8
        nhwc = p.itemsize * (p.n * c8 * p.h * p.w + p.n * p.o * p.oh * p.ow
                             + p.o * (c8 // p.groups) * p.kh * p.kw) + NHWC_SLACK_BYTES
        if sig.op == "Conv2DBackpropFilter":
            nhwc += gpu.sm_count * SPLIT_K_TILE_BYTES
        algos.append(run("IMPLICIT_PRECOMP_GEMM", flops, nhwc, traffic=2 * nhwc))
    else:
        algos.append(run("IMPLICIT_PRECOMP_GEMM", flops, 8 * p.kh * p.kw * p.oh * p.ow))
    im2col = (2 if low else 4) * p.n * cg * p.kh * p.kw * p.oh * p.ow * p.groups
    if not (low and sig.op != "Conv2D"):  # a low-type gradient's GEMM is ALGO_1: the one above
        algos.append(run("GEMM", flops, im2col, traffic=2 * im2col))
    unit = p.stride == (1, 1) and p.dilation == (1, 1)
    if unit and (p.kh, p.kw) == (3, 3) and p.groups == 1:
        if not low:
            algos.append(run("WINOGRAD", flops / 2.25, 0))
        tiles = p.n * math.ceil(p.oh / 4) * math.ceil(p.ow / 4)
        ws = 4 * 36 * (p.c * tiles + p.o * p.c + p.o * tiles)
        transforms = 36 * 8 * (p.c * tiles + p.o * tiles)
        algos.append(run("WINOGRAD_NONFUSED", flops / 4 + transforms, ws, traffic=2 * ws))
    ph, pw = p.h + p.kh - 1, p.w + p.kw - 1
    if unit and p.kh * p.kw > 1 and max(ph, pw) <= FFT_MAX and not low:
        freq = ph * (pw // 2 + 1)
        planes = p.n * p.c + p.o * cg + p.n * p.o
        ws = 8 * freq * planes
        work = 8.0 * p.n * p.o * cg * freq + 5.0 * planes * ph * pw * math.log2(ph * pw) / 2
        algos.append(run("FFT", work, ws, traffic=2 * ws))
    return algos


# cuDNN's gradient algorithms that sum partial products with atomic adds into the output
# (BWD_DATA_ALGO_0; BWD_FILTER_ALGO_0 and ALGO_3: "non-deterministic" in cuDNN's docs). In a
# low type the output is the low type: each atomic add rounds again, so a gradient is off by
# many ulps, not the one rounding of float32 accumulation (bench/device/op_drift.py on an H200:
# bfloat16 filter gradients 79x and data gradients 35x outside the one-rounding bound). Low-type
# gradients never run them; float32 keeps them (their order noise is float32's).
ATOMIC_GRADIENT_FAMILIES = {"Conv2DBackpropInput": frozenset({"IMPLICIT_GEMM"}),
                            "ConvTranspose2D": frozenset({"IMPLICIT_GEMM"}),
                            "Conv2DBackpropFilter": frozenset({"IMPLICIT_GEMM", "ALGO_3"})}


def rounds_once(sig: OpSignature, family: str) -> bool:
    """Whether `family` gives each output of `sig` one rounding to its type (see
    ATOMIC_GRADIENT_FAMILIES)."""
    low = any(d in ("bfloat16", "float16") for d in sig.dtypes)
    return not (low and family in ATOMIC_GRADIENT_FAMILIES.get(sig.op, ()))


def conv_algorithms(sig: OpSignature, gpu: GPU, table: CostTable | None = None
                    ) -> list[ConvAlgo]:
    """Candidates for a conv-family signature, by ascending workspace (then time): the cost
    table's measured GPU algorithms if it has any, else the family defaults; those that would
    round a low-type output more than once left out."""
    entry = table.entry(sig) if table is not None else None
    if entry is not None and entry.gpu_algorithms:
        algos = [ConvAlgo(a.algorithm, a.seconds, a.workspace_bytes, "measured")
                 for a in entry.gpu_algorithms]
    else:
        algos = default_algorithms(sig, gpu)
    once = [a for a in algos if rounds_once(sig, a.algorithm)]
    # (a measured table of atomic algorithms alone: the modelled families that round once)
    algos = once or [a for a in default_algorithms(sig, gpu) if rounds_once(sig, a.algorithm)]
    # The kernel's own scratch (OpDef.gpu_scratch) shares the workspace area: it is planned
    # with it, so that the kernel gets no block outside the arena at load.
    extra = kernel_scratch(sig)
    if extra:
        algos = [dataclasses.replace(a, workspace_bytes=a.workspace_bytes + extra) for a in algos]
    return sorted(algos, key=lambda a: (a.workspace_bytes, a.seconds, a.algorithm))


def kernel_scratch(sig: OpSignature) -> int:
    """Bytes of OpDef.gpu_scratch for a signature (0 without a rule)."""
    from planner.ops import get_op
    from planner.ops.base import TensorType

    op = get_op(sig.op)
    if op.gpu_scratch is None:
        return 0
    ins = [TensorType(tuple(s), d) for s, d in zip(sig.shapes, sig.dtypes, strict=True)]
    attrs = op.normalize_attrs(dict(sig.attrs))
    return op.gpu_scratch(ins, op.infer(ins, attrs), attrs)


def fastest_within(algos: list[ConvAlgo], free_bytes: int | None) -> ConvAlgo:
    """The fastest candidate whose workspace fits `free_bytes` (any when None); the one with
    the least workspace when none fits."""
    fits = [a for a in algos if free_bytes is None or a.workspace_bytes <= free_bytes]
    if not fits:
        return algos[0]
    return min(fits, key=lambda a: (a.seconds, a.workspace_bytes, a.algorithm))
