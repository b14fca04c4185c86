"""The runtime's own weight gradient where oneDNN would run its im2col GEMM fallback
(templates/cpu/runtime/kernels/filter_grads.cpp, Im2colFilterGrad): a float32, one-group
convolution whose geometry oneDNN 3.2's direct kernels refuse (a 3x3 kernel on 2x2 maps:
ResNet-18's last stage, 1.2-1.8 ms a call on the GEMMs, one per image) runs as the whole batch's
columns and one matmul. On every instruction set no such gradient is left on the fallback
(`make test` runs this file again capped at AVX2), and the result is held to the float64
reference within float32's summation bound on one thread and on two."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.profiling import copies_graph, placements_plan, warmed_executor
from planner.costs.signature import OpSignature
from planner.graph.interpret import random_feeds
from planner.ops import get_op
from tests.targets import two_cores

U32 = 2.0 ** -24  # float32's unit roundoff

# (x shape, dy shape, filter shape, geometry): ResNet-18's last stage at 64 px; a tap that
# reads only padding (3x3 on a 1x1 map); strides, dilation and uneven padding
CASES = [((8, 256, 2, 2), (8, 256, 2, 2), (256, 256, 3, 3), {"pads": [1, 1, 1, 1]}),
         ((2, 24, 1, 1), (2, 16, 1, 1), (16, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
         ((2, 12, 5, 4), (2, 8, 2, 2), (8, 12, 3, 3), {"pads": [2, 1, 0, 1], "strides": [2, 2],
                                                      "dilations": [2, 1]})]


@pytest.mark.parametrize(("x_shape", "dy_shape", "w_shape", "geometry"), CASES)
def test_weight_gradient_off_the_gemm_fallback(tmp_path, x_shape, dy_shape, w_shape, geometry):
    attrs = {"strides": [1, 1], "dilations": [1, 1], **geometry, "groups": 1,
             "filter_shape": list(w_shape)}
    sig = OpSignature(op="Conv2DBackpropFilter", shapes=(x_shape, dy_shape),
                      dtypes=("float32", "float32"), attrs=attrs)
    graph = copies_graph(sig, 1)
    feeds = random_feeds(graph, seed=5)
    op = get_op("Conv2DBackpropFilter")
    a = op.normalize_attrs(attrs)
    x, dy = (feeds[k].astype(np.float64) for k in ("in0", "in1"))
    want = op.reference([x, dy], a)[0]
    # Each tap sums k = N x OH x OW rounded products (the padding's exact zeros among them):
    # |error| <= (k + 1) u sum |dy x|.
    k = dy_shape[0] * dy_shape[2] * dy_shape[3]
    bound = (k + 1) * U32 * op.reference([np.abs(x), np.abs(dy)], a)[0] + 1e-30
    target = two_cores()
    for threads in (1, 2):
        plan = placements_plan(graph, target, [(threads, tuple(range(threads)))])
        ex = warmed_executor(plan, tmp_path / f"t{threads}", {}, feeds)
        got = np.asarray(ex.forward(feeds)["out0_0"])
        impl = {r["name"]: r["impl"] for r in ex.stats()["ops"]}["copy0"]
        assert "x64:gemm" not in impl, impl
        assert np.all(np.abs(got - want) <= bound), (threads, impl)
