"""The kernels mixed precision runs between convolutions
(planner.frontend.passes.precision.FOLLOW_OPS) on low-type tensors, as one graph (graph_and_feeds),
against the reference interpreter's emulated low type (each op computed in float32 from the exactly
widened inputs, every result rounded once to its declared type). tests/codegen/test_mixed_kernels.py
runs them on the CPU executor in bfloat16, tests/cuda/test_cuda_mixed.py on the CUDA one in bfloat16
and float16.

Tolerance, from bfloat16's 8-bit significand (unit roundoff u = 2^-8): the kernel and the
reference start from the same bfloat16 inputs and compute in float32, so before the final
rounding they differ only by float32 summation order: at most K * 2^-24 of the terms' magnitude
for a K-term sum (BatchNorm's statistics over 4 * 6 * 6 = 144 values, a pooling window, an AddN):
below 2^-16 of the output's largest element M. The one rounding to bfloat16 can then go the
other way at a boundary: one ulp, at most 2u|want|. So each element is held to
2u|want| + 2^-16 M; float32 outputs (statistics, parameter gradients, the mean) to 2^-16 M.
Ops that only select, compare or move (Relu, ReluGrad, MaxPool, Concat, Flatten, Transpose)
and adds of two bfloat16 values (Add, BiasAdd: exact in float32 for these magnitudes) are
bit-identical.
"""

from __future__ import annotations

import numpy as np

from planner.graph.builder import GraphBuilder
from planner.graph.interpret import run
from tests.codegen.helpers import build_module

U = 2.0 ** -8
SUM = 2.0 ** -16  # float32 summation-order bound (K <= 256 terms of 2^-24 each)


def graph_and_feeds(low: str = "bfloat16"):
    """The kernels' graph on `low` (bfloat16 here; float16 too on the GPU) values."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("bf16_kernels")
    low_type, feeds, low = low, {}, {}
    for name, shape in (("x", (4, 8, 6, 6)), ("dy", (4, 8, 6, 6)), ("dp", (4, 8, 3, 3)),
                        ("w", (2, 3, 10, 36)), ("dw", (2, 3, 5, 18)),
                        ("one", (2, 16, 1, 1))):
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
        low[name] = b.op("Cast", [b.input(name, shape)], {"to": low_type}, name=f"{name}16")
    stats = {}
    for name, lo in (("scale", 0.5), ("bias", -0.5), ("rm", -0.5), ("rv", 0.5)):
        feeds[name] = rng.uniform(lo, lo + 1.0, 8).astype(np.float32)
        stats[name] = b.input(name, (8,))
    x, dy = low["x"], low["dy"]
    outs = {}
    outs["bn"] = b.op("BatchNorm", [x, stats["scale"], stats["bias"], stats["rm"], stats["rv"]],
                      {"training": True}, name="bn")
    y, _, _, mean, invstd = outs["bn"]
    outs["bn_grad"] = b.op("BatchNormGrad", [dy, x, stats["scale"], mean, invstd], name="bn_grad")
    outs["relu"] = [b.op("Relu", [y], name="relu")]
    outs["relu_grad"] = [b.op("ReluGrad", [dy, outs["relu"][0]], name="relu_grad")]
    pool = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    outs["max_pool"] = [b.op("MaxPool", [x], pool, name="max_pool")]  # channels-last loop
    outs["max_pool_grad"] = [b.op("MaxPoolGrad", [low["dp"], x], pool, name="max_pool_grad")]
    wide = {"kernel": [2, 2], "strides": [2, 2]}                        # the rows loop (ow 18)
    outs["max_pool_rows"] = [b.op("MaxPool", [low["w"]], wide, name="max_pool_rows")]
    outs["max_pool_rows_grad"] = [b.op("MaxPoolGrad", [low["dw"], low["w"]], wide,
                                       name="max_pool_rows_grad")]
    avg = {"kernel": [2, 2], "strides": [2, 2]}
    outs["avg_pool"] = [b.op("AvgPool", [x], avg, name="avg_pool")]
    outs["avg_pool_grad"] = [b.op("AvgPoolGrad", [low["dp"]], {**avg, "input_shape": [4, 8, 6, 6]},
                                  name="avg_pool_grad")]
    outs["add"] = [b.op("Add", [x, dy], name="add")]
    outs["add_n"] = [b.op("AddN", [x, dy, y], name="add_n")]
    outs["global_avg_pool"] = [b.op("GlobalAvgPool", [x], name="global_avg_pool"),
                               # a 1x1 map: nothing to reduce, the values widened
                               b.op("GlobalAvgPool", [low["one"]], name="global_avg_pool_1x1")]
    feeds["b"] = rng.standard_normal(8).astype(np.float32)
    bias = b.op("Cast", [b.input("b", (8,))], {"to": low_type}, name="b16")
    outs["bias_add"] = [b.op("BiasAdd", [x, bias], name="bias_add")]
    outs["bias_add_grad"] = [b.op("BiasAddGrad", [dy], name="bias_add_grad")]
    outs["concat"] = [b.op("Concat", [x, dy], {"axis": 1}, name="concat")]
    outs["flatten"] = [b.op("Flatten", [x], name="flatten")]
    outs["transpose"] = [b.op("Transpose", [low["w"]], {"perm": [0, 1, 3, 2]},
                              name="transpose"),  # the last two axes: tile by tile
                         b.op("Transpose", [x], {"perm": [1, 0, 3, 2]}, name="permute")]
    names = [t for ts in outs.values() for t in ts]
    return b.build(outputs=names), feeds, outs


EXACT = {"relu", "relu_grad", "max_pool", "max_pool_rows", "add", "bias_add", "concat",
         "flatten", "transpose"}
FLOAT32 = {"global_avg_pool", "bias_add_grad"}  # reductions: float32 results


OPS = ["bn", "bn_grad", "relu", "relu_grad", "max_pool", "max_pool_grad", "max_pool_rows",
       "max_pool_rows_grad", "avg_pool", "avg_pool_grad", "add", "add_n", "global_avg_pool",
       "bias_add", "bias_add_grad", "concat", "flatten", "transpose"]


def kernel_results(folder, backend: str = "cpu", low: str = "bfloat16"):
    """(graph, outs, the executor's values, the reference's) of the kernels' graph."""
    graph, feeds, outs = graph_and_feeds(low)
    module = build_module(graph, folder, backend)
    got = module.Executor().forward(feeds)
    want = run(graph, feeds, {})
    return graph, outs, got, want


def check_kernel(op: str, results, low: str = "bfloat16", u: float = U) -> None:
    """Op `op`'s outputs against the reference within the bounds above (`u`: the low type's
    unit roundoff)."""
    graph, outs, got, want = results
    for name in outs[op]:
        dtype = graph.tensor(name).dtype
        g, w = np.asarray(got[name]), np.asarray(want[name])
        assert g.dtype == w.dtype == np.dtype(dtype), (name, g.dtype, w.dtype)
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if op in EXACT:
            assert np.array_equal(g64, w64), name
            continue
        m = np.max(np.abs(w64))
        bound = (2 * u * np.abs(w64) if dtype == low else 0.0) + SUM * m
        assert np.all(np.abs(g64 - w64) <= bound), (name, float(np.max(np.abs(g64 - w64))))
    # the low outputs are bfloat16 (half the bytes), the statistics float32
    assert graph.tensor(outs[op][0]).dtype == ("float32" if op in FLOAT32 else low)
