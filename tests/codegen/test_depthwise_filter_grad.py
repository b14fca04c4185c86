"""The runtime's direct depthwise weight gradient (templates/cpu/runtime/kernels/conv.cpp,
DepthwiseFilterGrad): where oneDNN has no depthwise kernel for a geometry and falls back to
one im2col GEMM per group (mobilenet_v2's 480 channels of 2x2 maps: 1.1 ms a call), the
executor runs its own loop. Which one runs depends on oneDNN's kernels for this CPU's
instruction set (an AVX-512 CPU may have a depthwise kernel where AVX2 takes GEMMs; `make test`
runs this file again capped at AVX2 there): on every one, no such gradient is left on the GEMM
fallback, the result is held to the float64 reference within float32's summation bound, and the
direct loop to the same bits on one thread and on two (the team splits channels, each summed in
one fixed order)."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.profiling import copies_graph, placements_plan, warmed_executor
from planner.costs.signature import OpSignature
from planner.graph.interpret import random_feeds
from planner.ops import get_op
from tests.targets import two_cores

U32 = 2.0 ** -24  # float32's unit roundoff

# (x shape, dy shape, geometry): mobilenet_v2's last stage, and strides, dilations and uneven
# padding on the direct path
CASES = [((8, 480, 2, 2), (8, 480, 2, 2), {"pads": [1, 1, 1, 1]}),
         ((2, 32, 5, 4), (2, 32, 2, 2), {"pads": [2, 1, 0, 1], "strides": [2, 2],
                                         "dilations": [2, 1]})]


def _attrs(x_shape, geometry) -> dict:
    c = x_shape[1]
    return {"strides": [1, 1], "dilations": [1, 1], **geometry, "groups": c,
            "filter_shape": [c, 1, 3, 3]}


@pytest.mark.parametrize(("x_shape", "dy_shape", "geometry"), CASES)
def test_direct_depthwise_weight_gradient(tmp_path, x_shape, dy_shape, geometry):
    attrs = _attrs(x_shape, geometry)
    sig = OpSignature(op="Conv2DBackpropFilter", shapes=(x_shape, dy_shape),
                      dtypes=("float32", "float32"), attrs=attrs)
    graph = copies_graph(sig, 1)
    feeds = random_feeds(graph, seed=3)
    target = two_cores()
    got, impls = {}, set()
    for threads in (1, 2):
        plan = placements_plan(graph, target, [(threads, tuple(range(threads)))])
        ex = warmed_executor(plan, tmp_path / f"t{threads}", {}, feeds)
        got[threads] = np.asarray(ex.forward(feeds)["out0_0"])
        impls.add({r["name"]: r["impl"] for r in ex.stats()["ops"]}["copy0"])
    assert not any("gemm" in impl for impl in impls), impls
    if impls == {"direct:depthwise"}:
        assert np.array_equal(got[1].view(np.uint32), got[2].view(np.uint32))
    op = get_op("Conv2DBackpropFilter")
    a = op.normalize_attrs(attrs)
    x, dy = (feeds[k].astype(np.float64) for k in ("in0", "in1"))
    want = op.reference([x, dy], a)[0]
    # Each tap sums at most k = N x OH x OW rounded products: |error| <= (k + 1) u sum |dy x|.
    k = dy_shape[0] * dy_shape[2] * dy_shape[3]
    bound = (k + 1) * U32 * op.reference([np.abs(x), np.abs(dy)], a)[0] + 1e-30
    assert np.all(np.abs(got[1] - want) <= bound)
