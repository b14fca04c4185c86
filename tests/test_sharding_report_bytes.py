"""planner show's ZeRO-3 report counts each tensor at its dtype's size (planner.dtypes), as
numpy stores it: a float64 or int8 shard is not a float32 one."""

from __future__ import annotations

import numpy as np
import pytest

from planner.dtypes import DTYPE_BYTES
from planner.report.sharding import sharding_report


def _plan(dtype: str, shard: int = 16, whole: int = 20) -> dict:
    return {"graph": {"tensors": [
        {"name": "shard/0/param", "shape": [shard], "role": "param", "dtype": dtype},
        {"name": "shard/0/grad", "shape": [shard], "role": "grad", "dtype": dtype},
        {"name": "shard/0/m", "shape": [shard], "role": "optimizer-state", "dtype": dtype},
        {"name": "gathered/w", "shape": [whole], "role": "activation", "dtype": dtype}],
        "nodes": [{"name": "allgather/0", "op": "AllGather", "inputs": ["shard/0/param"],
                   "outputs": ["gathered/w"], "attrs": {"ranks": 2, "keep": 1}},
                  {"name": "rs", "op": "ReduceScatter", "inputs": ["g"],
                   "outputs": ["shard/0/grad"], "attrs": {"ranks": 2}},
                  {"name": "up", "op": "ApplyMomentum", "inputs": ["shard/0/param",
                   "shard/0/grad", "shard/0/m"], "outputs": [], "attrs": {}}]},
        "ops": [{"name": "allgather/0", "order": 0, "prefetch": 0}], "tensors": []}


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16", "int8", "int64",
                                   "bool"])
def test_held_bytes_follow_the_dtype(dtype):
    r = sharding_report(_plan(dtype))
    # numpy's itemsize is the reference (bfloat16: numpy has none; torch's is 2 bytes)
    size = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    assert DTYPE_BYTES[dtype] == size
    assert r["held_bytes"] == {"parameters": 16 * size, "gradients": 16 * size,
                               "optimizer state": 16 * size}
    assert r["gathers"][0]["bytes"] == 20 * size


def test_an_unknown_dtype_is_refused_naming_a_tensor():
    named = r"plan tensor '(shard/0/\w+|gathered/w)': dtype 'complex32'"
    with pytest.raises(ValueError, match=named):
        sharding_report(_plan("complex32"))
