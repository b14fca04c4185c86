"""Rules for values known at import time and for nodes that vanish: Constant, ConstantOfShape,
Shape, Size, Range, Cast, Identity, Dropout.

Nothing here emits a planner op: constants become Consts (params or state tensors only if a
compute op reads them), Shape and Size read the static shapes, and Identity and inference-mode
Dropout bind their output to their input.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from planner.importers.onnx.context import FOLD_LIMIT, NodeCtx, rule
from planner.importers.onnx.errors import Unsupported
from planner.importers.onnx.values import Const, planner_dtype


@rule("Constant")
def constant(n: NodeCtx) -> None:
    out = n.output(0) or n.label
    if isinstance(n.attrs.get("value"), onnx.TensorProto):
        n.bind(0, Const.from_proto(n.attrs["value"], origin="constant", name=out))
        return
    scalars = {"value_float": np.float32, "value_floats": np.float32,
               "value_int": np.int64, "value_ints": np.int64}
    for key, dtype in scalars.items():
        if key in n.attrs:
            n.bind(0, Const.of(out, np.asarray(n.attrs[key], dtype=dtype), origin="constant"))
            return
    raise Unsupported(f"Constant ({', '.join(sorted(n.attrs)) or 'no value'})")


@rule("ConstantOfShape")
def constant_of_shape(n: NodeCtx) -> None:
    shape = tuple(n.ints(0, "shape"))
    fill = n.attr("value")
    scalar = np.zeros(1, dtype=np.float32)
    if isinstance(fill, onnx.TensorProto):
        scalar = Const.from_proto(fill, "constant", f"{n.label}:value").value().reshape(-1)[:1]
    source = n.value(0)
    # onnx's light_* models stand in for every weight with ConstantOfShape(shape initializer):
    # such a float value is a weight (an initializer), not a foldable constant.
    placeholder = (isinstance(source, Const) and source.origin == "initializer"
                   and scalar.dtype.kind == "f")
    n.bind(0, Const.full(n.output(0) or n.label, shape, scalar,
                         "initializer" if placeholder else "folded"))


@rule("Shape")
def shape(n: NodeCtx) -> None:
    dims = list(n.shape(0))
    start, end = n.attr("start", 0), n.attr("end", None)
    n.fold(0, np.asarray(dims[slice(start, end)], dtype=np.int64))


@rule("Size")
def size(n: NodeCtx) -> None:
    n.fold(0, np.asarray(int(np.prod(n.shape(0), dtype=np.int64)), dtype=np.int64))


@rule("Range")
def range_(n: NodeCtx) -> None:
    start, limit, delta = (n.const_array(k, name).reshape(()) for k, name in
                           enumerate(("start", "limit", "delta")))
    if delta == 0 or not all(np.isfinite(v) for v in (start, limit, delta)):
        raise Unsupported(f"Range({start}, {limit}, {delta}): needs a finite, non-zero step")
    count = max(0, math.ceil((float(limit) - float(start)) / float(delta)))
    if count > FOLD_LIMIT:  # computed before anything is allocated
        raise Unsupported(f"Range of {count} elements (values computed at import are limited "
                          f"to {FOLD_LIMIT} elements)")
    n.fold(0, np.arange(start, limit, delta, dtype=np.result_type(start, limit, delta)))


@rule("Cast")
def cast(n: NodeCtx) -> None:
    to = int(n.require_attr("to"))
    value = n.value(0)
    target = helper.tensor_dtype_to_np_dtype(to)
    c = n.const(0)
    if c is not None:
        n.fold(0, c.value().astype(target))
        return
    if n.type(0).dtype == target.name:
        n.bind(0, value)
        return
    try:
        name = planner_dtype(to, "the cast's result")
    except ValueError:
        name = target.name
    raise Unsupported(f"Cast (of a computed {n.type(0).dtype} tensor to {name})")


@rule("Identity")
def identity(n: NodeCtx) -> None:
    n.bind(0, n.value(0))


@rule("Dropout")
def dropout(n: NodeCtx) -> None:
    # The import is an inference graph: Dropout passes its input through. Its mask output,
    # if some node reads it, is reported unsupported by the driver (it is never bound).
    n.bind(0, n.value(0))
