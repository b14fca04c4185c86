"""max_unpool's indices are the user's: an index outside its plane is refused in one line naming
the op and the index, by the reference and by the CPU executor, before the step runs."""

from __future__ import annotations

import numpy as np
import pytest

from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import run
from planner.ops import OpError
from tests.codegen.helpers import build_module


@pytest.fixture(scope="module")
def unpool():
    b = GraphBuilder("unpool")
    v = b.input("v", (1, 2, 2, 2))
    idx = b.input("idx", (1, 2, 2, 2), "int64")
    y = b.op("PoolScatter", [v, idx], {"spatial": [3, 3]})
    return check_graph(b.build(outputs=[y]))


def test_indices_in_range_unpool(unpool, tmp_path):
    v = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2) + 1
    idx = np.array([0, 4, 8, 2, 1, 3, 5, 7], np.int64).reshape(1, 2, 2, 2)
    want = np.zeros((2, 9), np.float32)
    np.put_along_axis(want, idx.reshape(2, 4), v.reshape(2, 4), axis=1)
    ex = build_module(unpool, tmp_path / "unpool").Executor()
    got = ex.forward({"v": v, "idx": idx})[unpool.outputs[0]]
    np.testing.assert_array_equal(got, want.reshape(1, 2, 3, 3))
    np.testing.assert_array_equal(run(unpool, {"v": v, "idx": idx}, {})[unpool.outputs[0]],
                                  want.reshape(1, 2, 3, 3))
    for bad in (9, -1):
        idx[0, 1, 1, 0] = bad
        with pytest.raises(RuntimeError,
                           match=rf"PoolScatter.*index {bad} .*out of range \[0, 9\)"):
            ex.forward({"v": v, "idx": idx})
        with pytest.raises(OpError, match=rf"PoolScatter: index {bad} out of range \[0, 9\)"):
            run(unpool, {"v": v, "idx": idx}, {})
