"""Values known at import time, ONNX element types, and ONNX attributes as Python values.

A `Const` is a tensor whose value the importer knows without running the model: an
initializer, a `Constant` node, a `ConstantOfShape` placeholder, or the folded result of a
shape computation (`Shape`, `Gather`, `Concat`, ... on static shapes). Its value is loaded
lazily, so importing a model with 100M parameters reads only their shapes.

Example:
    >>> import numpy as np
    >>> c = Const.of("k", np.arange(3), origin="constant")
    >>> c.shape, c.dtype, c.foldable
    ((3,), 'int64', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import onnx
from onnx import helper, numpy_helper

from planner.dtypes import DTYPE_BYTES
from planner.importers.onnx.errors import OnnxImportError

# Where a Const comes from: a graph initializer (or a ConstantOfShape placeholder standing in
# for one, as in onnx's light_* models), a Constant node, or a folded computation.
Origin = Literal["initializer", "constant", "folded"]

# ONNX element type -> planner dtype, for the types a planner tensor may have.
PLANNER_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.BOOL: "bool",
}


def onnx_type_name(elem_type: int) -> str:
    """ONNX's own name of an element type, e.g. "UINT8"."""
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"element type {elem_type}"


def planner_dtype(elem_type: int, what: str) -> str:
    """The planner dtype of an ONNX element type; ValueError naming `what` when there is none."""
    if elem_type not in PLANNER_DTYPES:
        raise ValueError(f"{what} has type {onnx_type_name(elem_type)}; the planner supports "
                         f"{sorted(set(PLANNER_DTYPES.values()))}")
    return PLANNER_DTYPES[elem_type]


@dataclass(frozen=True)
class Const:
    """A tensor value known at import time. `name` is the ONNX value it was first bound to;
    `load()` returns the numpy array (computed on demand, not cached)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    origin: Origin
    load: Callable[[], np.ndarray] = field(repr=False, compare=False)

    @classmethod
    def of(cls, name: str, value: Any, origin: Origin = "folded") -> Const:
        array = np.asarray(value)
        return cls(name, tuple(array.shape), array.dtype.name, origin, lambda: array)

    @classmethod
    def from_proto(cls, proto: onnx.TensorProto, origin: Origin = "initializer",
                   name: str | None = None) -> Const:
        """The Const of a stored tensor (an initializer, a Constant's value)."""
        name = proto.name if name is None else name
        try:
            dtype = helper.tensor_dtype_to_np_dtype(proto.data_type).name
        except (KeyError, ValueError):
            raise OnnxImportError(f"tensor {name!r} has unknown element type "
                                  f"{proto.data_type}") from None
        shape = tuple(int(d) for d in proto.dims)
        if any(d < 0 for d in shape):
            raise OnnxImportError(f"tensor {name!r} has negative dims {list(shape)}")
        return cls(name, shape, dtype, origin, lambda: numpy_helper.to_array(proto))

    @classmethod
    def full(cls, name: str, shape: tuple[int, ...], fill: np.ndarray,
             origin: Origin) -> Const:
        """A tensor of `shape` holding one value everywhere (ConstantOfShape)."""
        if any(d < 0 for d in shape):
            raise OnnxImportError(f"tensor {name!r}: shape {list(shape)} has a negative dim")
        scalar = np.asarray(fill).reshape(())
        return cls(name, shape, scalar.dtype.name, origin,
                   lambda: np.full(shape, scalar, dtype=scalar.dtype))

    @property
    def foldable(self) -> bool:
        """May shape computations consume this value at import time? Not for float
        initializers: they are the model's weights, which stay params (trainable, and shared
        by every op that reads them) instead of being copied into reshaped constants
        (bfloat16 is a float type too)."""
        return not (self.origin == "initializer" and self.dtype.startswith(("float", "bfloat")))

    @property
    def is_planner_dtype(self) -> bool:
        return self.dtype in DTYPE_BYTES

    def value(self) -> np.ndarray:
        try:
            array = np.asarray(self.load())
        except Exception as e:  # numpy_helper on data that does not fit the dims, a bad type
            raise OnnxImportError(f"tensor {self.name!r}: cannot read its value ({e})") from None
        if tuple(array.shape) != self.shape:
            raise OnnxImportError(f"tensor {self.name!r}: stored value has shape "
                                  f"{list(array.shape)}, declared {list(self.shape)}")
        return array


def read_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values: ints, floats, str (decoded), lists, TensorProto."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", errors="replace") for v in value]
        out[a.name] = value
    return out
