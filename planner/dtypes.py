"""Element types and their sizes, shared by the IR and the op definitions.

bfloat16 and float16 are the low-precision float types of mixed-precision training
(planner/frontend/passes/precision.py). numpy has neither bfloat16 natively nor an exactly rounding
one for it: importing `ml_dtypes` registers `np.dtype("bfloat16")`, whose conversions round to
nearest even as oneDNN, cuDNN and PyTorch do, so the reference interpreter emulates a low-type
result exactly by computing in float32 and rounding once (`astype`).

    >>> import numpy as np
    >>> float(np.float32(1 + 2**-8 + 2**-10).astype("bfloat16"))  # 8 bits: rounds up
    1.0078125
"""

import math
from typing import Literal

import ml_dtypes  # noqa: F401  (registers the "bfloat16" numpy dtype name)

DType = Literal["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                "uint8", "bool"]

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "bool": 1,
}

# The integer types, widest first. int16, int8 and uint8 are storage types (quantized codes,
# image bytes): they cast, compare (as int32) and reduce; the integer kernels compute in them
# with PyTorch's wrapping (templates/cpu/runtime/kernels/integer.cpp).
INTEGER_DTYPES: tuple[str, ...] = ("int64", "int32", "int16", "int8", "uint8")

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


def float32_value(value: float) -> float:
    """`value`, where float32 (what a step reads a hyperparameter as) holds it as a finite
    number that is 0 only where `value` is; ValueError saying what float32 makes of it
    otherwise (1e39 would be inf, 1e-46 zero: a step would silently train with either).

    >>> float32_value(0.1), float32_value(0.0)
    (0.1, 0.0)
    >>> float32_value(1e39)
    Traceback (most recent call last):
    ValueError: 1e+39 is not a finite float32 (at most 3.4e+38)
    >>> float32_value(1e-46)
    Traceback (most recent call last):
    ValueError: 1e-46 is 0 in float32 (the smallest float32 above 0 is 1.4e-45)
    """
    import numpy as np

    with np.errstate(over="ignore"):
        held = float(np.float32(value))
    if not math.isfinite(held):
        raise ValueError(f"{value!r} is not a finite float32 (at most 3.4e+38)")
    if held == 0 and value != 0:
        raise ValueError(f"{value!r} is 0 in float32 (the smallest float32 above 0 is 1.4e-45)")
    return value
