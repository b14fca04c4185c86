"""Element types and their sizes, shared by the IR and the op definitions.

bfloat16 and float16 are the low-precision float types of mixed-precision training
(planner/graph/precision.py). numpy has neither bfloat16 natively nor an exactly rounding one
for it: importing `ml_dtypes` registers `np.dtype("bfloat16")`, whose conversions round to
nearest even as oneDNN, cuDNN and PyTorch do, so the reference interpreter emulates a low-type
result exactly by computing in float32 and rounding once (`astype`).

    >>> import numpy as np
    >>> float(np.float32(1 + 2**-8 + 2**-10).astype("bfloat16"))  # 8 bits: rounds up
    1.0078125
"""

import math
from typing import Literal

import ml_dtypes  # noqa: F401  (registers the "bfloat16" numpy dtype name)

DType = Literal["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"]

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "bool": 1,
}

# Float types that a kernel computes with float32 accumulation and whose values float32 holds
# exactly (so widening one to float32 loses nothing).
LOW_FLOATS: frozenset[str] = frozenset({"bfloat16", "float16"})


def is_float(dtype: str) -> bool:
    """A floating-point type (the ones gradients flow through)."""
    return dtype.startswith("float") or dtype == "bfloat16"


def num_elements(shape: tuple[int, ...]) -> int:
    """Elements of a tensor of this shape (1 for a scalar)."""
    return math.prod(shape)


def num_bytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * DTYPE_BYTES[dtype]
