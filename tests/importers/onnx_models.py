"""Helpers for the importer tests: build small ONNX models with onnx.helper, and check an
import against onnx's own reference evaluator (the oracle for ONNX semantics) by running the
planner graph through the numpy reference interpreter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from planner.graph import Graph, check_graph
from planner.graph.interpret import run
from planner.importers import import_onnx

ONNX_DATA = Path(onnx.__file__).parent / "backend/test/data"

ELEM = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("float64"): TensorProto.DOUBLE,
        np.dtype("int64"): TensorProto.INT64, np.dtype("int32"): TensorProto.INT32}


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, np.ndarray | tuple],
               outputs: Sequence[str], initializers: Mapping[str, np.ndarray] | None = None,
               opset: int = 17) -> onnx.ModelProto:
    """A model over `nodes`. inputs: name -> an example array (its shape and type are
    declared) or a (shape, TensorProto type) pair, e.g. (["N", 3], TensorProto.FLOAT)."""
    declared = []
    for name, spec in inputs.items():
        if isinstance(spec, tuple):
            shape, elem = spec
        else:
            shape, elem = list(spec.shape), ELEM[spec.dtype]
        declared.append(helper.make_tensor_value_info(name, elem, shape))
    graph = helper.make_graph(
        list(nodes), "test", declared,
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check_against_onnx(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                       rtol: float = 1e-5, expected: Sequence[np.ndarray] | None = None) -> Graph:
    """Import `model`, validate the graph, run it, and compare every output with onnx's
    ReferenceEvaluator (or with `expected`, where that evaluator departs from the ONNX spec);
    return the graph for further checks."""
    imported = import_onnx(model)
    graph = check_graph(imported.graph)
    if expected is None:
        expected = ReferenceEvaluator(model).run(None, dict(feeds))
    got = run(graph, feeds, imported.params(), keep="outputs")
    assert len(graph.outputs) == len(expected)
    for name, want in zip(graph.outputs, expected, strict=True):
        want = np.asarray(want)
        assert got[name].shape == want.shape, (name, got[name].shape, want.shape)
        assert got[name].dtype == want.dtype, (name, got[name].dtype, want.dtype)
        atol = 1e-6 * max(1.0, float(np.abs(want).max(initial=0)))
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)
    return graph


def rand(*shape: int, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
