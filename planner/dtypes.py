"""Element types and their sizes, shared by the IR and the op definitions."""

import math
from typing import Literal

DType = Literal["float32", "float64", "float16", "int64", "int32", "bool"]

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float64": 8, "float16": 2, "int64": 8, "int32": 4, "bool": 1,
}


def num_elements(shape: tuple[int, ...]) -> int:
    """Elements of a tensor of this shape (1 for a scalar)."""
    return math.prod(shape)


def num_bytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * DTYPE_BYTES[dtype]
