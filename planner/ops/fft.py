"""The discrete Fourier transform: complex to complex along one or more axes (torch.fft's
fft, ifft, fftn, ... and, through the importer's rules, rfft, irfft, hfft, stft, istft).

A complex tensor is a real one of one more, trailing, axis of 2 (its real then its imaginary
part, torch.view_as_real's layout; docs/front-end.md, "Complex tensors and the DFT"):

    FFT [x] -> y, x and y float32 or float64 of shape [..., 2], same shape and dtype
    y = scale * sum over the transformed axes' indices j of x[j] e^(-+2 pi i jk / n)
        (the sign - forward, + inverse; `axes` index the complex shape, without the trailing 2)

`scale` is the caller's normalisation (1, 1/n, 1/sqrt(n) of the transformed lengths' product):
the inverse does not divide by n of itself. The gradient is the transform's adjoint, the
conjugate transpose of its matrix, as a real map of the planes: the same op in the other
direction with the same real scale (FFT of dy, `inverse` flipped). The CPU kernel is
pocketfft's c2c (third_party/pocketfft, the header NumPy, SciPy and PyTorch build their CPU
FFTs on): O(n log n) for every length (Bluestein's algorithm for large prime factors), error
O(log n) eps. The CUDA kernel (templates/cuda/runtime/kernels/fft.cu, float32 only: the CUDA
runtime has no float64 tensors) is cuFFT's C2C over runs of up to three adjacent axes, its
plans made once per geometry at load and cached by the executor, its work area the op's
planned scratch (`gpu_scratch`, an estimate: cuFFT tells its figure only once a plan is made
on the device); compiled with nvcc, not yet run on a GPU (tests/cuda/test_cuda_fft.py).
FLOPs: 5 n log2 n per transformed line of length n, the radix-2 count.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]])   # 1, 2, 3, 4
    >>> get_op("FFT").reference([x], {"axes": [0], "inverse": False, "scale": 1.0})[0]
    array([[10.,  0.],
           [-2.,  2.],
           [-2.,  0.],
           [-2., -2.]])
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def transformed_axes(axes: list[int], rank: int) -> list[int]:
    """The `axes` attribute as indices into a complex shape of `rank` dims (negative ones from
    its end); OpError for one out of range or named twice."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise OpError(f"FFT: axis {a} out of range for a complex tensor of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out) or not out:
        raise OpError(f"FFT: axes {list(axes)} must be distinct, and at least one")
    return out


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("FFT", x)
    if x.dtype not in ("float32", "float64") or x.rank < 2 or x.shape[-1] != 2:
        raise OpError(f"FFT: x must be float32 or float64 of shape [..., 2] (a complex "
                      f"tensor's planes), got {x.dtype} {list(x.shape)}")
    for k in transformed_axes(a["axes"], x.rank - 1):
        if x.shape[k] == 0:
            raise OpError(f"FFT: axis {k} has length 0 (a transform needs a point)")
    return [x]


def _flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    x = ins[0]
    points = x.size // 2
    return int(sum(5 * points * math.log2(x.shape[k])
                   for k in transformed_axes(a["axes"], x.rank - 1)))


def _bytes(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """Each axis's pass reads and writes the whole tensor once."""
    return 2 * ins[0].nbytes * len(a["axes"])


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """numpy's FFT in complex128, then cast to x's dtype."""
    x = np.asarray(xs[0])
    z = np.empty(x.shape[:-1], np.complex128)  # not re + 1j * im: 1j * inf is NaN + inf j
    z.real, z.imag = x[..., 0], x[..., 1]
    axes = transformed_axes(a["axes"], x.ndim - 1)
    if a["inverse"]:  # norm="forward" leaves the inverse unscaled
        y = np.fft.ifftn(z, axes=axes, norm="forward")
    else:
        y = np.fft.fftn(z, axes=axes)
    # each plane times the real scale (a complex product by scale + 0j turns inf into NaN)
    return [(np.stack([y.real, y.imag], axis=-1) * a["scale"]).astype(x.dtype)]


def _smooth(n: int) -> bool:
    """Whether n factors into 2, 3, 5 and 7 (2^a 3^b 5^c 7^d: the lengths cuFFT's
    documentation names as those it runs fastest)."""
    for p in (2, 3, 5, 7):
        while n % p == 0:
            n //= p
    return n == 1


def _gpu_scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's cuFFT work area, planned before any cuFFT plan exists, so an
    estimate: x's bytes where every transformed length factors into 2, 3, 5 and 7, 8 times
    that otherwise (Bluestein's algorithm, which cuFFT may take for larger prime factors, pads
    a length n to under 4n, in two buffers). A kernel whose plans ask for more gets a block of
    its own at load (`unplanned_scratch_bytes`), which tests/cuda/test_cuda_fft.py reads: not
    yet run on a GPU."""
    x = ins[0]
    lengths = [x.shape[k] for k in transformed_axes(a["axes"], x.rank - 1)]
    return x.nbytes * (1 if all(map(_smooth, lengths)) else 8)


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    """The adjoint: the DFT matrix's conjugate transpose is the other direction's, and the
    real scale stays."""
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    attrs = {**node.attrs, "inverse": not node.attrs["inverse"]}
    return [g.emit("FFT", [dy], attrs)[0]]


register(OpDef(
    name="FFT", arity=1,
    attrs={"axes": Attr("ints", required=True), "inverse": Attr("bool", False),
           "scale": Attr("float", 1.0)},
    infer=_infer, flops=_flops, bytes_moved=_bytes, reference=_reference, gradient=_gradient,
    gpu_scratch=_gpu_scratch,
    doc="Complex-to-complex DFT of a complex tensor's planes ([..., 2]) along `axes`, forward "
        "or inverse, times `scale`.",
))
