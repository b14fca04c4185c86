"""ONNX element types, stored ONNX tensors as `Const`s (planner.importers.kit: a value known
at import time, loaded lazily so importing a model with 100M parameters reads only their
shapes), and ONNX attributes as Python values.

Example:
    >>> from onnx import numpy_helper
    >>> import numpy as np
    >>> c = const_from_proto(numpy_helper.from_array(np.arange(3), "k"), origin="constant")
    >>> c.shape, c.dtype, c.foldable, c.value().tolist()
    ((3,), 'int64', True, [0, 1, 2])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from planner.importers.kit import Const, Origin
from planner.importers.onnx.errors import OnnxImportError

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


def const_from_proto(proto: onnx.TensorProto, origin: Origin = "initializer",
                     name: str | None = None) -> Const:
    """The Const of a stored tensor (an initializer, a Constant's value); its value, read on
    demand, is checked against the declared dims."""
    name = proto.name if name is None else name
    try:
        dtype = helper.tensor_dtype_to_np_dtype(proto.data_type).name
    except (KeyError, ValueError):
        raise OnnxImportError(f"tensor {name!r} has unknown element type "
                              f"{proto.data_type}") from None
    shape = tuple(int(d) for d in proto.dims)
    if any(d < 0 for d in shape):
        raise OnnxImportError(f"tensor {name!r} has negative dims {list(shape)}")

    def load() -> np.ndarray:
        try:
            array = np.asarray(numpy_helper.to_array(proto))
        except Exception as e:  # numpy_helper on data that does not fit the dims, a bad type
            raise OnnxImportError(f"tensor {name!r}: cannot read its value ({e})") from None
        if tuple(array.shape) != shape:
            raise OnnxImportError(f"tensor {name!r}: stored value has shape "
                                  f"{list(array.shape)}, declared {list(shape)}")
        return array

    return Const(name, shape, dtype, origin, load)


def const_full(name: str, shape: tuple[int, ...], fill: np.ndarray, origin: Origin) -> Const:
    """A tensor of `shape` holding one value everywhere (ConstantOfShape)."""
    if any(d < 0 for d in shape):
        raise OnnxImportError(f"tensor {name!r}: shape {list(shape)} has a negative dim")
    scalar = np.asarray(fill).reshape(())
    return Const(name, shape, scalar.dtype.name, origin,
                 lambda: np.full(shape, scalar, dtype=scalar.dtype))


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
