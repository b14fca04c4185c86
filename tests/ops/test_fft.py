"""The FFT op (planner/ops/fft.py): its reference against torch.fft in complex128, its gradient
rule (the adjoint: the other direction, the same scale) against central differences and torch
autograd, its shape rule's refusals and its cost features."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import check_gradient, checked_reference, rel_error, torch_gradients

torch = pytest.importorskip("torch")


def _planes(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal((*shape, 2))


def _torch_fft(z, axes, inverse, scale):
    """torch's transform of the planes z: torch.fft.fftn, or ifftn undone of its 1/n."""
    c = torch.view_as_complex(z)
    y = torch.fft.ifftn(c, dim=axes, norm="forward") if inverse else torch.fft.fftn(c, dim=axes)
    return torch.view_as_real(y * scale)


@pytest.mark.parametrize("shape,axes,inverse,scale", [
    ((7,), [0], False, 1.0), ((4, 97), [1], True, 0.5), ((3, 5, 6), [0, 2], False, 1 / 30),
    ((2, 6, 4), [-1, -2], True, 1.0), ((5, 1, 3), [1], False, 2.0)])
def test_reference_is_torchs_transform(shape, axes, inverse, scale):
    z = _planes(*shape)
    (got,) = checked_reference("FFT", [z], axes=axes, inverse=inverse, scale=scale)
    want = _torch_fft(torch.tensor(z), axes, inverse, scale).numpy()
    assert rel_error(got, want) < 1e-13


def test_reference_keeps_float32():
    z = _planes(4, 8).astype(np.float32)
    (got,) = checked_reference("FFT", [z], axes=[0], inverse=False, scale=1.0)
    assert got.dtype == np.float32


@pytest.mark.parametrize("axes,inverse,scale", [([0], False, 1.0), ([1], True, 1 / 6),
                                                 ([0, 1], False, 1 / math.sqrt(30))])
def test_gradient_is_the_adjoint(axes, inverse, scale):
    """Central differences, then torch autograd of the same real map of the planes."""
    z = _planes(5, 6, seed=1)
    attrs = {"axes": axes, "inverse": inverse, "scale": scale}
    grads, dys = check_gradient("FFT", [z], attrs, tol=1e-7)
    (want,) = torch_gradients(lambda t: _torch_fft(t, axes, inverse, scale), [z], dys, [0])
    assert rel_error(grads[0], want) < 1e-13


@pytest.mark.parametrize("shape,dtype,axes,what", [
    ((4, 3), "float32", [0], "shape [..., 2]"), ((4, 2), "int64", [0], "float"),
    ((4, 2), "float32", [1], "out of range"), ((4, 5, 2), "float32", [0, -2], "distinct"),
    ((4, 0, 2), "float32", [1], "length 0"), ((4, 2), "float32", [], "at least one")])
def test_shape_rule_refuses_in_one_line(shape, dtype, axes, what):
    with pytest.raises(OpError) as e:
        get_op("FFT").infer([TensorType(shape, dtype)],
                            get_op("FFT").normalize_attrs({"axes": axes}))
    assert what in str(e.value) and "FFT" in str(e.value) and "\n" not in str(e.value)


def test_flops_are_5_n_log2_n_per_line():
    x = TensorType((8, 64, 16, 2))
    attrs = get_op("FFT").normalize_attrs({"axes": [1, 2]})
    points = 8 * 64 * 16
    assert get_op("FFT").flops([x], [x], attrs) == 5 * points * (6 + 4)
    assert get_op("FFT").bytes_moved([x], [x], attrs) == 2 * 2 * x.nbytes


def test_the_cuda_executor_takes_float32_and_refuses_float64_in_one_line():
    """The CUDA runtime registers FFT (cuFFT, kernels/fft.cu): a float32 graph holding one
    passes its admission check; the runtime has no float64 tensors, so a float64 one is
    refused before anything is rendered (codegen.support.check), naming the tensor; the CPU
    backend runs both."""
    from codegen.backends import RUNTIMES
    from codegen.errors import UnsupportedError
    from codegen.support import check
    from planner.graph import GraphBuilder, check_graph

    def spectrum(dtype):
        b = GraphBuilder("spectrum")
        y = b.op_n("FFT", [b.input("x", (4, 8, 2), dtype)], {"axes": [1]})
        return check_graph(b.build(outputs=y))

    for dtype in ("float32", "float64"):
        check(spectrum(dtype), RUNTIMES["cpu"])
    check(spectrum("float32"), RUNTIMES["cuda"], "9.0")
    with pytest.raises(UnsupportedError) as e:
        check(spectrum("float64"), RUNTIMES["cuda"], "9.0")
    assert "dtype float64 not supported (tensor 'x')" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("shape,axes,times", [
    ((8, 64, 2), [1], 1),          # 2^6
    ((3, 30, 49, 2), [1, 2], 1),   # 2 3 5 and 7^2
    ((8, 4099, 2), [1], 8),        # a prime: Bluestein's padding
    ((4, 22, 2), [0, 1], 8),       # 11 in one of the axes
])
def test_gpu_scratch_is_the_data_or_bluesteins_padding(shape, axes, times):
    x = TensorType(shape)
    attrs = get_op("FFT").normalize_attrs({"axes": axes})
    assert get_op("FFT").gpu_scratch([x], [x], attrs) == times * x.nbytes
