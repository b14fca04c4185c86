"""Constant folding at import: a node whose inputs are all known (constants, folded shapes) runs
now, through onnx's numpy reference implementation, instead of becoming a planner op.

Exporters compute shapes in the graph: PyTorch's `chunk` divides a Shape by 2 (integer Div),
attention reshapes Gather and Concat pieces of Shapes, a causal mask is a Range compared with
itself. The planner's shapes are static, so every such subgraph has a value at import time;
its ops often have no planner equivalent (integer Div, Mod, Equal, Where on int64, ...) and need
none. Only ops in FOLDABLE are folded this way, only when every input is a foldable Const
(float initializers, the model's weights, stay params), and only when the inputs are small.

The size of what folding makes is checked before anything runs: onnx's shape inference on the
one node gives the output shapes; an output past FOLD_OUTPUT_LIMIT elements is refused with an
error naming the node (a Range of 10**12 values must not allocate 8 TB), and an op whose output
can grow past its inputs (Expand, Tile, ...) is not folded when its output shape is unknown.

Example:
    >>> import numpy as np
    >>> from onnx import helper
    >>> from planner.importers.kit import Const
    >>> node = helper.make_node("Div", ["a", "b"], ["q"])
    >>> a, b = Const.of("a", np.array(7)), Const.of("b", np.array(2))
    >>> [c.value() for c in fold_node(node, [a, b], opset=17, label="div")]
    [array(3)]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from planner.importers.kit import Const
from planner.importers.onnx.errors import OnnxImportError

# ONNX ops folded when all their inputs are known: shape arithmetic, comparisons, selection and
# data movement. Not: random ops, ops with special import rules (Constant, ConstantOfShape,
# Shape, Size, Range: see rules_const.py), nor compute ops on float weights.
FOLDABLE: frozenset[str] = frozenset({
    "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Neg", "Abs", "Sign", "Floor", "Ceil", "Round",
    "Sqrt", "Reciprocal", "Exp", "Log", "Min", "Max", "Sum", "Mean",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "Where", "Cast", "Identity",
    "Gather", "GatherElements", "GatherND", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze",
    "Reshape", "Flatten", "Transpose", "Expand", "Tile", "Trilu", "ScatterND", "ScatterElements",
    "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ArgMax", "ArgMin",
    "CumSum", "NonZero", "OneHot", "EyeLike",
})

# Ops whose output may be larger than their inputs: not folded without a known output shape.
GROWING: frozenset[str] = frozenset({"Expand", "Tile", "OneHot", "NonZero", "EyeLike", "Gather",
                                     "GatherND"})

# Largest total input size (elements) of a folded node: shape computations are tiny.
FOLD_INPUT_LIMIT = 1 << 16

# Largest output (elements) folding may make: a causal mask of a 2048-token sequence fits.
FOLD_OUTPUT_LIMIT = 1 << 22


def can_fold(op_type: str, inputs: Sequence[object]) -> bool:
    """Fold this node? When its op is in FOLDABLE and every input is a small foldable Const."""
    return (op_type in FOLDABLE and bool(inputs)
            and all(isinstance(v, Const) and v.foldable for v in inputs)
            and sum(int(np.prod(v.shape, dtype=np.int64)) for v in inputs) <= FOLD_INPUT_LIMIT)


def fold_node(node: onnx.NodeProto, inputs: Sequence[Const | None], opset: int,
              label: str) -> list[Const] | None:
    """The node's outputs computed now (one Const per output, named as the ONNX outputs), or
    None when the node is better left to its conversion rule (a growing op whose output shape
    is unknown). `inputs` has None for omitted optional inputs. Raises OnnxImportError when an
    output would pass FOLD_OUTPUT_LIMIT or the reference cannot run the node."""
    arrays = [None if c is None else c.value() for c in inputs]
    model = _one_node_model(node, arrays, opset)
    sizes = _output_sizes(model, len(node.output))
    if any(s is None for s in sizes) and node.op_type in GROWING:
        return None
    big = max((s for s in sizes if s is not None), default=0)
    if big > FOLD_OUTPUT_LIMIT:
        raise OnnxImportError(f"node {label!r} ({node.op_type}): its constant output would hold "
                              f"{big} elements, more than the {FOLD_OUTPUT_LIMIT} an import "
                              f"computes")
    from onnx.reference import ReferenceEvaluator

    try:
        with np.errstate(all="ignore"):  # integer division by 0 and the like: as numpy gives
            results = ReferenceEvaluator(model).run(None, {})
    except Exception as e:  # the reference rejecting a malformed node: one line naming it
        raise OnnxImportError(f"node {label!r} ({node.op_type}): cannot compute it at import: "
                              f"{type(e).__name__}: {e}") from None
    out = []
    for name, value in zip(node.output, results, strict=True):
        array = np.asarray(value)
        if array.size > FOLD_OUTPUT_LIMIT:
            raise OnnxImportError(f"node {label!r} ({node.op_type}): its constant output holds "
                                  f"{array.size} elements, more than the {FOLD_OUTPUT_LIMIT} "
                                  f"an import computes")
        out.append(Const.of(name or f"{label}:unused", array, origin="folded"))
    return out


def _one_node_model(node: onnx.NodeProto, arrays: Sequence[np.ndarray | None],
                    opset: int) -> onnx.ModelProto:
    """A model holding just this node, its known inputs as initializers under neutral names
    (x0, x1, ...), its outputs y0, y1, ...: the node's own names never reach onnx's tools."""
    ins = [f"x{k}" if a is not None else "" for k, a in enumerate(arrays)]
    outs = [f"y{k}" for k in range(len(node.output))]
    copy = helper.make_node(node.op_type, ins, outs)
    copy.attribute.extend(node.attribute)
    inits = [numpy_helper.from_array(np.asarray(a), name) for a, name in zip(arrays, ins,
                                                                              strict=True)
             if a is not None]
    graph = helper.make_graph([copy], "fold", [],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                               for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _output_sizes(model: onnx.ModelProto, count: int) -> list[int | None]:
    """Element counts of the node's outputs by onnx's shape inference (None: unknown)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        return [None] * count
    sizes: list[int | None] = []
    for value in inferred.graph.output:
        tt = value.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            sizes.append(int(np.prod([d.dim_value for d in tt.shape.dim], dtype=np.float64)))
        else:
            sizes.append(None)
    return sizes
