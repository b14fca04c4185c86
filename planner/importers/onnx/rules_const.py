"""Rules for values known at import time and for nodes that vanish: Constant, ConstantOfShape,
Shape, Size, Range, Cast, CastLike, Identity, Dropout.

Nothing here emits a planner op but training-mode Dropout: constants become Consts (params or
state tensors only if a compute op reads them), Shape and Size read the static shapes, and
Identity and inference-mode Dropout bind their output to their input.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from planner.dtypes import is_float
from planner.importers.kit import Const, Unsupported
from planner.importers.onnx.context import NodeCtx, rule
from planner.importers.onnx.errors import OnnxImportError
from planner.importers.onnx.fold import FOLD_OUTPUT_LIMIT
from planner.importers.onnx.values import const_from_proto, const_full, planner_dtype


@rule("Constant")
def constant(n: NodeCtx) -> None:
    out = n.output(0) or n.label
    if isinstance(n.attrs.get("value"), onnx.TensorProto):
        n.bind(0, const_from_proto(n.attrs["value"], origin="constant", name=out))
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
        scalar = const_from_proto(fill, "constant", f"{n.label}:value").value().reshape(-1)[:1]
    source = n.value(0)
    # onnx's light_* models stand in for every weight with ConstantOfShape(shape initializer):
    # such a float value is a weight (an initializer), not a foldable constant.
    placeholder = (isinstance(source, Const) and source.origin == "initializer"
                   and scalar.dtype.kind == "f")
    n.bind(0, const_full(n.output(0) or n.label, shape, scalar,
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
    if delta == 0:
        raise OnnxImportError(f"node {n.label!r} (Range): delta is 0")
    # ONNX's count: max(ceil((limit - start) / delta), 0), checked before anything is made.
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    if count > FOLD_OUTPUT_LIMIT:
        raise OnnxImportError(f"node {n.label!r} (Range): {count} values from {start} to "
                              f"{limit} by {delta}, more than the {FOLD_OUTPUT_LIMIT} an "
                              f"import computes")
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
    if is_float(n.type(0).dtype) and is_float(name):  # a mixed-precision model's casts
        n.emit1("Cast", [value], {"to": name}, output=0)
        return
    raise Unsupported(f"Cast (of a computed {n.type(0).dtype} tensor to {name})")


@rule("CastLike")
def cast_like(n: NodeCtx) -> None:
    """Cast to the dtype of input 1, which only lends its type (dynamo exports cast every
    Python scalar like the tensor it meets)."""
    target = np.dtype(n.type(1).dtype)
    c = n.const(0)
    if c is not None:
        n.fold(0, c.value().astype(target))
    elif n.type(0).dtype == target.name:
        n.bind(0, n.value(0))
    else:
        raise Unsupported(f"CastLike (of a computed {n.type(0).dtype} tensor to {target.name})")


@rule("Identity")
def identity(n: NodeCtx) -> None:
    n.bind(0, n.value(0))


@rule("Dropout")
def dropout(n: NodeCtx) -> None:
    """Inference-mode Dropout passes its input through (or, with the import's train_dropout,
    trains like a training-mode one); training-mode Dropout (what PyTorch's training-mode
    export writes) becomes the planner's Dropout with the same ratio and a seed of its own per
    node. Its mask output, if some node reads it, is reported unsupported by
    the driver (it is never bound)."""
    rate = _dropout_ratio(n)
    training = _dropout_training(n)
    if not training and rate > 0.0:
        n.imp.inference_dropouts.append(n.label)
        training = n.imp.train_dropout
    if not training or rate == 0.0:
        n.bind(0, n.value(0))
        return
    if not 0.0 < rate < 1.0:
        raise OnnxImportError(f"node {n.label!r} (Dropout): ratio {rate} is not in [0, 1)")
    n.imp.dropouts += 1
    n.emit1("Dropout", [n.value(0)], {"rate": rate, "seed": n.imp.dropouts}, output=0)


def _dropout_ratio(n: NodeCtx) -> float:
    if n.opset >= 12:
        ratio = float(n.const_array(1, "ratio").reshape(())) if n.has_input(1) else 0.5
    else:
        ratio = float(n.attr("ratio", 0.5))
    # 7 significant digits: ONNX stores the ratio as float32 (0.3 arrives as 0.30000001).
    return float(f"{ratio:.7g}")


def _dropout_training(n: NodeCtx) -> bool:
    """Opset 12+: the training_mode input (a constant; default false). Before opset 12 ONNX
    has no such flag, and converters name the mask output of inference models too (onnx's
    bvlc_alexnet), so an older Dropout is taken as inference: export at opset 12+ to keep it."""
    if n.opset < 12 or not n.has_input(2):
        return False
    return bool(n.const_array(2, "training_mode").reshape(()))
