"""What the CUDA FFT kernel's tests share (tests/cuda/test_cuda_fft.py, and its build in
tests/cuda/test_cuda_build.py): the transforms that reach every branch of its passes
(templates/cuda/runtime/fft_layout.h), a training graph whose FFTs run forward and in the
gradient, and an FFT's normwise error bound."""

from __future__ import annotations

import math

import numpy as np

from planner.graph import GraphBuilder, check_graph
from planner.ir.graph import Graph

# (complex shape, attrs): a run batched over its inner lines, over its outer blocks, each with
# one exec and with several; two runs; a run of three and a fourth axis; Bluestein lengths
# (4099 prime; 97 in a two-axis run); an inverse and scales.
LAYOUT_CASES = [
    ((3, 7), {"axes": [1]}),                                     # inner 1: outer batched
    ((4, 5, 6), {"axes": [0, 2], "inverse": True, "scale": 0.25}),  # inner batched, then outer
    ((2, 3, 4, 5), {"axes": [1]}),                               # outer 2 < inner 20: 2 execs
    ((5, 3, 2), {"axes": [-2]}),                                 # outer 5 > inner 2: 2 execs
    ((2, 3, 2, 2, 3), {"axes": [0, 1, 2, 3]}),                   # a run of 3, then 1
    ((3, 4, 5), {"axes": [2, 0, 1], "inverse": True}),           # rank 3, axes unsorted
]
LARGE_CASES = [
    ((8, 4099), {"axes": [1]}),
    ((16, 97, 33), {"axes": [0, 1], "inverse": True, "scale": 0.25}),
    ((6, 3000), {"axes": [-1], "inverse": True, "scale": 1 / 3000}),
    ((4, 64, 64), {"axes": [1, 2]}),
]


def points(shape, attrs) -> int:
    """The points of one transform (the product of the transformed lengths)."""
    rank = len(shape)
    return math.prod(shape[a % rank] for a in attrs["axes"])


def fft_bound(n_points: int, eps: float) -> float:
    """An FFT's normwise error bound, ||computed - exact|| <= c log2(N) eps ||exact|| (Higham,
    Accuracy and Stability, 24.1), with Bluestein's padded length (up to 4N) and c = 4, as
    tests/importers/test_complex_fft.py holds the CPU kernel to."""
    return 4 * math.log2(4 * n_points) * eps


def spectral_graph(batch: int = 4, rows: int = 6, cols: int = 16, classes: int = 3) -> Graph:
    """A forward graph with a loss whose path runs through FFTs, so that its training graph
    has FFTs forward and in the gradient (each an FFT of dy the other way): the complex input
    times a param, a 2-D DFT over (rows, cols) scaled 1 / sqrt(rows cols), an inverse DFT over
    the batch scaled 1 / batch, then a linear head and softmax cross-entropy."""
    b = GraphBuilder("spectral")
    x = b.input("x", (batch, rows, cols, 2))
    w = b.param("w", (rows, cols, 2), init="glorot")
    mixed = b.op("FFT", [b.op("Mul", [x, w])],
                 {"axes": [1, 2], "scale": 1 / math.sqrt(rows * cols)}, name="mix")
    back = b.op("FFT", [mixed], {"axes": [0], "inverse": True, "scale": 1 / batch}, name="back")
    flat = b.op("Reshape", [back], {"shape": [batch, rows * cols * 2]})
    head = b.param("head", (rows * cols * 2, classes), init="glorot")
    logits = b.op("MatMul", [flat, head], name="logits")
    loss = b.op("SoftmaxCrossEntropy", [logits, b.label("labels", (batch,))], name="loss")
    return check_graph(b.build(outputs=[logits, loss]))


def complex_planes(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((*shape, 2)).astype(np.float32)
