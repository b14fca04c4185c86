"""Reading an ONNX model: bytes or a file to a checked ModelProto, graph input types with
static shapes, and the shapes onnx's own shape inference gives (used as a cross-check).

Every failure is an OnnxImportError of one line: a truncated or non-ONNX file never surfaces
as a protobuf traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import onnx

from planner.importers.onnx.errors import OnnxImportError
from planner.importers.onnx.values import planner_dtype
from planner.ops import TensorType

Source = str | os.PathLike | bytes | bytearray | memoryview | onnx.ModelProto

# The ONNX domains whose ops this importer maps ("" and "ai.onnx" are the same domain).
DEFAULT_DOMAINS = ("", "ai.onnx")


def read_model(source: Source) -> tuple[onnx.ModelProto, str]:
    """Parse `source` (path, bytes or ModelProto); return the model and a label for messages.

    >>> read_model(b"not an onnx file")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    planner.importers.onnx.errors.OnnxImportError: ONNX bytes: not an ONNX model (protobuf ...
    """
    if isinstance(source, onnx.ModelProto):
        label = source.graph.name or "ONNX model"
        _check_header(source, label)
        return source, label
    data, label, base_dir = _read_bytes(source)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf's DecodeError, whichever backend raises it
        raise OnnxImportError(f"{label}: not an ONNX model (protobuf cannot parse it: "
                              f"truncated or another format)") from None
    _check_header(model, label)
    if base_dir is not None:
        _load_external_data(model, base_dir, label)
    return model, label


def _read_bytes(source: Source) -> tuple[bytes, str, Path | None]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "ONNX bytes", None
    path = Path(source)
    try:
        return path.read_bytes(), str(path), path.parent
    except OSError as e:
        raise OnnxImportError(f"{path}: cannot read: {e.strerror or e}") from None


def _check_header(model: onnx.ModelProto, label: str) -> None:
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise OnnxImportError(f"{label}: not an ONNX model (no IR version or no graph; is the "
                              f"file truncated?)")
    if model.ir_version > onnx.IR_VERSION:
        raise OnnxImportError(f"{label}: IR version {model.ir_version} is newer than this onnx "
                              f"package reads ({onnx.IR_VERSION}), or the file is corrupt")
    if model.ir_version >= 3 and opset_version(model) is None:
        raise OnnxImportError(f"{label}: no opset for the default ONNX domain (opset_import "
                              f"lists {[o.domain for o in model.opset_import]}; is the file "
                              f"truncated?)")
    if not model.graph.output:
        raise OnnxImportError(f"{label}: the graph has no outputs")
    bad = next((name for name in _names(model) if not isinstance(name, str)), None)
    if bad is not None:
        raise OnnxImportError(f"{label}: name {bad!r} is not valid UTF-8 (is the file "
                              f"corrupt?)")
    g = model.graph
    if not all(v.name for v in (*g.input, *g.output, *g.initializer)):
        raise OnnxImportError(f"{label}: a graph input, output or initializer has an empty "
                              f"name")


def _names(model: onnx.ModelProto) -> Iterator[str | bytes]:
    """Every name the import reads. protobuf hands back bytes for a string field that is not
    valid UTF-8, which only a corrupt file holds."""
    g = model.graph
    yield g.name
    yield from (o.domain for o in model.opset_import)
    for value in (*g.input, *g.output, *g.value_info, *g.initializer):
        yield value.name
    for node in g.node:
        yield from (node.name, node.op_type, node.domain, *node.input, *node.output)
        yield from (a.name for a in node.attribute)


def _load_external_data(model: onnx.ModelProto, base_dir: Path, label: str) -> None:
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    if not any(uses_external_data(t) for t in model.graph.initializer):
        return
    try:
        load_external_data_for_model(model, str(base_dir))
    except Exception as e:
        raise OnnxImportError(f"{label}: cannot load external tensor data: {e}") from None


def opset_version(model: onnx.ModelProto) -> int | None:
    """The opset of the default domain, or None when the model imports none. Models from before
    opset_import (IR version < 3) are opset 1."""
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return int(o.version)
    return 1 if model.ir_version < 3 else None


def input_types(model: onnx.ModelProto, initializers: set[str],
                overrides: Mapping[str, Sequence[int]]) -> dict[str, TensorType]:
    """Static types of the graph inputs that are not initializers, in graph order.

    A dimension must be a number: a symbolic one (`batch`) or an unknown one needs its input's
    shape in `overrides`, which also replaces declared shapes.
    """
    unknown = set(overrides) - {i.name for i in model.graph.input}
    if unknown:
        raise OnnxImportError(f"input_shapes names {sorted(unknown)}, which are not graph "
                              f"inputs (inputs: {[i.name for i in model.graph.input][:8]})")
    out: dict[str, TensorType] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            raise OnnxImportError(f"graph input {value.name!r} is not a tensor (sequence and map "
                                  f"inputs are not supported)")
        tt = value.type.tensor_type
        try:
            dtype = planner_dtype(tt.elem_type, f"graph input {value.name!r}")
        except ValueError as e:
            raise OnnxImportError(str(e)) from None
        if value.name in overrides:
            shape = tuple(int(d) for d in overrides[value.name])
        else:
            shape = _static_shape(value)
        if any(d < 0 for d in shape):
            raise OnnxImportError(f"graph input {value.name!r}: shape {list(shape)} has a "
                                  f"negative dimension")
        out[value.name] = TensorType(shape, dtype)
    return out


def _static_shape(value: onnx.ValueInfoProto) -> tuple[int, ...]:
    tt = value.type.tensor_type
    if not tt.HasField("shape"):
        raise OnnxImportError(f"graph input {value.name!r} has no shape; pass "
                              f"input_shapes={{{value.name!r}: [...]}}")
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            what = f"symbolic dimension {d.dim_param!r}" if d.dim_param else "an unknown dimension"
            raise OnnxImportError(f"graph input {value.name!r} has {what} at axis {k}; the "
                                  f"planner needs static shapes: pass "
                                  f"input_shapes={{{value.name!r}: [...]}}")
    return tuple(dims)


def inferred_shapes(model: onnx.ModelProto,
                    inputs: Mapping[str, TensorType]) -> dict[str, tuple[int, ...]]:
    """Static shapes onnx's shape inference finds for the graph's values, given the input
    shapes the import uses; empty when inference fails (it is a cross-check, not a need)."""
    probe = _without_weights(model)
    for value in probe.graph.input:
        if value.name in inputs:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for d in inputs[value.name].shape:
                dims.add().dim_value = d
    # Declared shapes of inner values and outputs may be stale (input_shapes changed the
    # batch): let inference derive them all from the inputs.
    del probe.graph.value_info[:]
    for value in probe.graph.output:
        value.type.tensor_type.ClearField("shape")
    # Data propagation computes shape values through the graph, and onnx's computes a Range
    # in full: Range(0, 10**12) would allocate terabytes. Without it, inference still reads
    # initializer values; only shapes computed through a Range go unchecked.
    data_prop = not any(node.op_type == "Range" for node in probe.graph.node)
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False,
                                                     data_prop=data_prop)
    except Exception:
        return {}
    out: dict[str, tuple[int, ...]] = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        tt = value.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            out[value.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return out


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the model for shape inference: initializers keep their dims, but only small
    integer ones (shapes, axes: what inference reads values of) keep their data, so a model
    with gigabytes of weights is not copied."""
    probe = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                            functions=model.functions)
    g, p = model.graph, probe.graph
    p.name = g.name
    p.node.extend(g.node)
    p.input.extend(g.input)
    p.output.extend(g.output)
    for init in g.initializer:
        if init.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and \
                _elements(init) <= 64:
            p.initializer.append(init)
        else:
            p.initializer.add(name=init.name, dims=init.dims, data_type=init.data_type)
    return probe


def _elements(init: onnx.TensorProto) -> int:
    n = 1
    for d in init.dims:
        n *= int(d)
    return n
