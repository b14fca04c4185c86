"""ONNX models to planner Graphs.

    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    >>> model = helper.make_model(helper.make_graph(
    ...     [helper.make_node("Relu", ["x"], ["y"], name="act")], "tiny", [x], [y]))
    >>> g = load_onnx(model.SerializeToString())
    >>> [(n.name, n.op) for n in g.nodes], g.tensor("y").shape
    ([('act', 'Relu')], (2, 3))

Contract:
  - shapes are static: symbolic input dims need `input_shapes`; everything after is inferred by
    the planner's own op rules and cross-checked against onnx's shape inference;
  - initializers become params (BatchNormalization's running mean and variance: state);
    values of Constant nodes and folded shape computations that a compute op reads become state
    tensors; graph inputs that are not initializers become inputs;
  - tensors keep their ONNX names; the planner op writing an ONNX node's output takes the
    node's name (its first output's when it has none), ops before it `<node>/<op>`;
  - the graph is a forward graph, in the mode it was exported in: inference exports lose
    Dropout and use BatchNormalization's running statistics; training-mode exports
    (`training=torch.onnx.TrainingMode.TRAINING`) keep Dropout with its ratio and normalize
    with batch statistics, updating the running ones as PyTorch's train() (rules_norm.py);
    Identity vanishes; SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss become the planner's
    loss, and `planner.frontend.loss.attach_loss` adds one to a model exported without;
  - subgraphs whose inputs are all known (shape arithmetic) are computed at import (fold.py);
  - errors are one OnnxImportError: every unsupported op at once, or one line saying what is
    wrong with the file or which node does not fit.

The conversion rules live in rules_*.py, one module per op family; `convert.py` is the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.importers.kit import Const
from planner.importers.onnx.convert import convert
from planner.importers.onnx.errors import OnnxImportError
from planner.importers.onnx.read import Source
from planner.ir.graph import Graph

__all__ = ["OnnxImport", "OnnxImportError", "import_onnx", "load_onnx"]


@dataclass(frozen=True)
class OnnxImport:
    """An imported model: its graph, and the values of its param and state tensors, read from
    the model when `params()` asks for them."""

    graph: Graph
    consts: Mapping[str, Const]

    def params(self) -> dict[str, np.ndarray]:
        """Every param and state tensor's value (initializers as stored; onnx's light_* models'
        ConstantOfShape placeholders filled), in graph order, in the tensor's dtype."""
        out = {}
        for t in self.graph.by_role("param", "state"):
            value = self.consts[t.name].value()
            out[t.name] = value.astype(t.dtype, copy=False)
        return out


def import_onnx(source: Source, *, name: str | None = None,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                train_dropout: bool = False) -> OnnxImport:
    """Import an ONNX model (file path, bytes or onnx.ModelProto) with its weights.

    `name` names the graph (default: the ONNX graph's name); `input_shapes` gives the static
    shape of inputs whose declared shape is symbolic or unknown (or replaces a declared one).
    `train_dropout`: Dropout nodes with a ratio but no training flag train too (a training-mode
    export writes nn.MultiheadAttention's attention dropout so; the import warns naming them
    when the rest of the export is in training mode). Raises OnnxImportError.
    """
    converted = convert(source, name, input_shapes, train_dropout)
    return OnnxImport(converted.graph, converted.consts)


def load_onnx(source: Source, *, name: str | None = None,
              input_shapes: Mapping[str, Sequence[int]] | None = None,
              train_dropout: bool = False) -> Graph:
    """The inference Graph of an ONNX model (see `import_onnx`; weights are not read)."""
    return convert(source, name, input_shapes, train_dropout).graph
