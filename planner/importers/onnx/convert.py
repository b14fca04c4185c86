"""The import driver: a checked ModelProto to a planner Graph, node by node.

    read_model        bytes / file -> ModelProto (one-line errors for anything not ONNX)
    input_types       static shapes of the graph inputs (input_shapes fills symbolic dims)
    bind_sources      initializers -> Consts, graph inputs -> "input" tensors
    convert_nodes     each node through its rule (rules_*.py); ops whose inputs are all known
                      (shape computations) run at import time instead of becoming nodes
                      (fold.py, or the rule's own planner op through its reference); an
                      unsupported node poisons what it feeds, so that one pass finds every
                      unsupported op
    cross_check       each converted value's shape against onnx's shape inference
    build             graph outputs, GraphBuilder.build

Raises OnnxImportError listing every unsupported op (with one node each) at once.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from planner.importers.kit import Const, Unsupported
from planner.importers.onnx import (  # noqa: F401  (registering the rules)
    rules_composite,
    rules_const,
    rules_dense,
    rules_loss,
    rules_math,
    rules_nn,
    rules_norm,
    rules_rnn,
    rules_shape,
    rules_transformer,
)
from planner.importers.onnx.context import POISONED, RULES, Importer, NodeCtx
from planner.importers.onnx.errors import OnnxImportError
from planner.importers.onnx.fold import FOLDABLE, can_fold, fold_node
from planner.importers.onnx.read import (
    DEFAULT_DOMAINS,
    Source,
    inferred_shapes,
    input_types,
    opset_version,
    read_model,
)
from planner.importers.onnx.values import const_from_proto
from planner.ir.graph import Graph
from planner.ops import get_op


@dataclass(frozen=True)
class Converted:
    """A converted model: the graph, and the Const behind each of its param and state tensors."""

    graph: Graph
    consts: Mapping[str, Const]


def convert(source: Source, name: str | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            train_dropout: bool = False) -> Converted:
    model, label = read_model(source)
    g = model.graph
    initializers = {t.name for t in g.initializer}
    inputs = input_types(model, initializers, input_shapes or {})
    kinds = _export_kinds(g)
    buffers = {k for k, v in kinds.items() if v == "BUFFER"}
    imp = Importer(graph_name=name or g.name or "onnx", opset=opset_version(model) or 1,
                   reserved=_value_names(g), state_names=_running_stats(g) | buffers,
                   init_hints=_init_hints(g), used=_used(g))
    imp.train_dropout = train_dropout
    unnamed = []
    for t in g.initializer:
        origin = "initializer"
        if kinds and t.name not in kinds:
            # A dynamo export: what the program's signature does not name is the exporter's.
            if _size(t) <= 1:
                origin = "constant"  # a scalar of the computation (GELU's sqrt(2)), not trained
            else:
                unnamed.append(t.name)
        imp.values[t.name] = const_from_proto(t, origin=origin)
    for input_name, t in inputs.items():
        if input_name in imp.values:
            raise OnnxImportError(f"{label}: graph input {input_name!r} is declared twice")
        imp.values[input_name] = imp.builder.input(input_name, t.shape, t.dtype)
    if g.sparse_initializer:
        raise OnnxImportError.unsupported_ops(
            {"sparse initializer": g.sparse_initializer[0].values.name or "?"})
    _convert_nodes(imp, g, inferred_shapes(model, inputs))
    outputs = []
    for out in g.output:
        value = imp.values.get(out.name)
        if value is None:
            raise OnnxImportError(f"{label}: graph output {out.name!r} is produced by no node")
        try:
            outputs.append(imp.as_tensor(value))
        except Unsupported as e:
            raise OnnxImportError.unsupported_ops({e.what: out.name}) from None
    # GraphBuilder applied every op's rules; the order is topological by construction, so
    # check_graph (which callers run, e.g. planner.frontend.load) would find nothing new here.
    graph = imp.builder.build(outputs=outputs)
    training = imp.dropouts > 0 or any(  # a BatchNorm in training mode
        get_op(n.op).running_statistics and n.attrs.get("training") for n in graph.nodes)
    if imp.inference_dropouts and training and not train_dropout:
        names = imp.inference_dropouts
        warnings.warn(f"{label}: Dropout node(s) {names[:5]}{' and more' if len(names) > 5 else ''}"
                      f" have no training flag in this training-mode export, so they pass "
                      f"their input through where PyTorch's train() drops (nn.MultiheadAttention's "
                      f"attention dropout is exported this way); import with "
                      f"train_dropout=True (planner graph/plan --train-dropout) to train them",
                      stacklevel=3)
    trained = {t.name for t in graph.by_role("param")}
    unnamed = [u for u in unnamed if u in trained]
    if unnamed:
        warnings.warn(f"{label}: param(s) {unnamed[:5]}{' and more' if len(unnamed) > 5 else ''}"
                      f" are no parameter or buffer of the exported program (the dynamo "
                      f"exporter folded or merged them: a transposed weight, equal-valued "
                      f"weights shared); they train under these names, which map back to no "
                      f"state_dict key: export with dynamo=False to keep state_dict names",
                      stacklevel=3)
    if imp.constant_state:
        warnings.warn(f"{label}: constant(s) {imp.constant_state[:5]}"
                      f"{' and more' if len(imp.constant_state) > 5 else ''} are state tensors: "
                      f"their values are in the import's params(), not in the graph "
                      f"(Executor(init=True) starts them at 0)", stacklevel=3)
    return Converted(graph, {t.name: imp.consts[t.name] for t in graph.tensors
                             if t.name in imp.consts})


def _convert_nodes(imp: Importer, g: onnx.GraphProto,
                   inferred: Mapping[str, tuple[int, ...]]) -> None:
    """Convert every node. A node that cannot be converted poisons its outputs and the nodes
    downstream are skipped, so that one pass finds every unsupported op; then raise the list
    of those, or else the first error."""
    unsupported: dict[str, str] = {}
    first_error: OnnxImportError | None = None
    for k, node in enumerate(g.node):
        label = node.name or next((o for o in node.output if o), f"{node.op_type}_{k}")
        known = node.domain in DEFAULT_DOMAINS and (node.op_type in RULES
                                                    or node.op_type in FOLDABLE)
        poisoned = any(imp.values.get(i) is POISONED for i in node.input if i)
        if not known or poisoned:
            if not known:
                op = node.op_type if node.domain in DEFAULT_DOMAINS else \
                    f"{node.domain}.{node.op_type}"
                unsupported.setdefault(op, label)
            _poison(imp, node)
            continue
        ctx = NodeCtx(imp, node, label)
        try:
            if not _fold(imp, node, label):
                if node.op_type not in RULES:
                    raise Unsupported(f"{node.op_type} (of computed tensors)")
                RULES[node.op_type](ctx)
            _check_outputs(ctx, inferred)
        except Unsupported as e:
            unsupported.setdefault(e.what, label)
            _poison(imp, node)
        except OnnxImportError as e:
            first_error = first_error or e
            _poison(imp, node)
        except Exception as e:
            # A corrupt model can break a rule in ways no check foresaw (attributes of the
            # wrong type, ...): still one line naming the node.
            first_error = first_error or OnnxImportError(
                f"node {label!r} ({node.op_type}): cannot convert: {type(e).__name__}: {e}")
            _poison(imp, node)
    # Unsupported ops first: the list of everything missing is what the user acts on.
    if unsupported:
        raise OnnxImportError.unsupported_ops(unsupported)
    if first_error is not None:
        raise first_error


def _fold(imp: Importer, node: onnx.NodeProto, label: str) -> bool:
    """Compute the node now when all its inputs are known (fold.py); False when it is not."""
    if node.op_type not in FOLDABLE:
        return False
    inputs = [imp.values.get(i) if i else None for i in node.input]
    if not can_fold(node.op_type, [v for v in inputs if v is not None]) or \
            any(v is None for i, v in zip(node.input, inputs, strict=True) if i):
        return False
    outputs = fold_node(node, inputs, imp.opset, label)
    if outputs is None:
        return False
    for name, value in zip(node.output, outputs, strict=True):
        if name:
            imp.values[name] = value
    return True


def _poison(imp: Importer, node: onnx.NodeProto) -> None:
    for o in node.output:
        if o:
            imp.values[o] = POISONED


def _check_outputs(n: NodeCtx, inferred: Mapping[str, tuple[int, ...]]) -> None:
    """Every output some node reads is bound, with the shape onnx's inference gives it."""
    for k, out in enumerate(n.node.output):
        if not out:
            continue
        if out not in n.imp.values:
            if out in n.imp.used:
                raise Unsupported(f"{n.op_type} (output {k})")
            continue
        shape = n.imp.type_of(n.imp.values[out], out).shape
        if out in inferred and inferred[out] != shape:
            raise OnnxImportError(f"node {n.label!r} ({n.op_type}): output {out!r} has shape "
                                  f"{list(shape)} after import, but {list(inferred[out])} by "
                                  f"onnx shape inference")


def _value_names(g: onnx.GraphProto) -> set[str]:
    names = {v.name for v in (*g.input, *g.output, *g.value_info)}
    names |= {t.name for t in g.initializer}
    for node in g.node:
        names.update(node.input)
        names.update(node.output)
    names.discard("")
    return names


def _used(g: onnx.GraphProto) -> set[str]:
    return {i for node in g.node for i in node.input if i} | {o.name for o in g.output}


# Inputs that are persistent but not trained: BatchNorm's running statistics, and the
# initial states of recurrent layers (PyTorch's are no parameters).
STATE_INPUTS = {"BatchNormalization": (3, 4), "LSTM": (5, 6), "GRU": (5,)}


_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"


def _export_kinds(g: onnx.GraphProto) -> dict[str, str]:
    """What torch.export's graph signature says each named value is (PARAMETER, BUFFER,
    USER_INPUT, ...), as the dynamo exporter records it in metadata; empty for other models."""
    kinds = {}
    for info in (*g.value_info, *g.input, *g.initializer):
        for prop in info.metadata_props:
            if prop.key == _KIND:
                kinds[info.name] = prop.value
    return kinds


def _size(t: onnx.TensorProto) -> int:
    size = 1
    for d in t.dims:
        size *= d
    return size


def _running_stats(g: onnx.GraphProto) -> set[str]:
    """Initializers read as STATE_INPUTS: state, not trained."""
    return {node.input[k] for node in g.node for k in STATE_INPUTS.get(node.op_type, ())
            if k < len(node.input) and node.input[k]}


def _init_hints(g: onnx.GraphProto) -> dict[str, str]:
    """How a fresh copy of a param starts, where its role in the model says it: BatchNorm's
    scale and variance at 1, its bias and mean at 0."""
    hints: dict[str, str] = {}
    for node in g.node:
        if node.op_type == "BatchNormalization":
            for k, init in zip(range(1, 5), ("ones", "zeros", "zeros", "ones"), strict=True):
                if k < len(node.input):
                    hints[node.input[k]] = init
    return hints
