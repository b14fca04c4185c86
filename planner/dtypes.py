"""Element types and their sizes, shared by the IR and the op definitions."""

from typing import Literal

DType = Literal["float32", "float64", "float16", "int64", "int32", "bool"]

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float64": 8, "float16": 2, "int64": 8, "int32": 4, "bool": 1,
}
