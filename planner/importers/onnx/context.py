"""The state of one import and what a conversion rule sees of it.

An `Importer` maps every ONNX value name to what it became: a planner tensor (its name in the
GraphBuilder), a `Const` (known at import time, not yet a tensor), or `POISONED` (downstream of
an unsupported node). A rule converts one ONNX node through a `NodeCtx`:

    @rule("Relu")
    def relu(n: NodeCtx) -> None:
        n.emit1("Relu", [n.value(0)], output=0)

`n.value(k)` is input k as whatever it became; `n.emit1(op, inputs, attrs, output=0)` adds a
planner op whose output takes the name of the ONNX node's output 0 and is bound to it; without
`output` the op's output is a fresh intermediate (`<node>/<op>`) that the rule passes on. A Const
input becomes a param or state tensor the first time an op reads it, unless every input is a
foldable Const: then the op runs at import time and its outputs are Consts too. `n.bind(k, v)`
binds output k to an existing value (Identity), `n.fold(k, array)` to a computed one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx

from planner.graph.builder import GraphBuilder, GraphBuildError
from planner.importers.kit import Const, Rules, Unsupported
from planner.importers.onnx.errors import OnnxImportError
from planner.importers.onnx.fold import FOLD_INPUT_LIMIT, FOLD_OUTPUT_LIMIT
from planner.importers.onnx.values import read_attributes
from planner.ir.graph import Tensor
from planner.ops import OpError, TensorType, get_op


class _Poisoned:
    """Marks the outputs of a node that could not be converted."""

    def __repr__(self) -> str:
        return "POISONED"


POISONED = _Poisoned()

Value = str | Const | _Poisoned

# ONNX op type -> conversion rule; filled by the rules_* modules with @rule.
RULES = Rules("ONNX")
rule = RULES.rule


class Importer:
    """Everything one import accumulates. `consts` holds every Const that became a planner
    tensor (param or state), by tensor name, for `OnnxImport.params()`.

    `state_names`: initializers that are BatchNorm running statistics (role "state", not
    trained); `init_hints`: the `init` of params whose role in the model says how a fresh one
    starts (BatchNorm scale "ones", ...; others "he" for rank >= 2, else "zeros"); `used`: every
    value some node or the graph output reads.
    """

    def __init__(self, graph_name: str, opset: int, reserved: Iterable[str],
                 state_names: set[str], init_hints: dict[str, str], used: set[str]) -> None:
        self.builder = GraphBuilder(graph_name)
        self.opset = opset
        self.values: dict[str, Value] = {}
        self.reserved = set(reserved)
        self.state_names = state_names
        self.init_hints = init_hints
        self.used = used
        self.consts: dict[str, Const] = {}
        self.dropouts = 0  # training-mode Dropouts so far: each gets its own mask seed
        self.constant_state: list[str] = []  # constants that became state tensors
        self.filled: set[str] = set()  # constants that became Fill nodes
        self.inference_dropouts: list[str] = []  # Dropouts with a ratio > 0 but no training flag
        self.train_dropout = False  # train those too (import_onnx's train_dropout)

    def fresh(self, base: str) -> str:
        """A name no ONNX value, planner tensor or node, and no earlier fresh name has: base,
        base_1, base_2, ... (reserved from now on: a folded Const may carry it without ever
        becoming a tensor)."""
        name, k = base, 0
        while name in self.reserved or self.builder.unique(name) != name:
            k += 1
            name = f"{base}_{k}"
        self.reserved.add(name)
        return name

    def mark_label(self, name: str) -> None:
        """A graph input read as class labels by a loss gets role "label"."""
        if self.builder.has(name) and self.builder.tensor(name).role == "input":
            self.builder.set_role(name, "label")

    def type_of(self, value: Value, what: str) -> TensorType:
        if isinstance(value, Const):
            return TensorType(value.shape, value.dtype)
        if isinstance(value, _Poisoned):
            raise AssertionError(f"{what} is poisoned")
        return self.builder.type(value)

    def as_tensor(self, value: Value) -> str:
        """A value as a planner tensor name (materializing a Const)."""
        if isinstance(value, Const):
            return self.materialize(value)
        if isinstance(value, _Poisoned):
            raise AssertionError("a poisoned value reached a rule")
        return value

    def materialize(self, c: Const) -> str:
        """The planner tensor holding Const c, made on first use: a param (initializers), a
        state tensor (BatchNorm running statistics), or, for a Constant node or a folded value,
        a Fill node when every element is one finite number (Hardswish's 0.5, GELU's sqrt(2),
        an attention scale) so the graph itself carries the value; other constants are state
        tensors whose values only the import's params() holds (listed in `constant_state`)."""
        if c.name in self.consts or c.name in self.filled:
            return c.name
        if not c.is_planner_dtype:
            raise Unsupported(f"tensor of type {c.dtype}")
        if c.origin != "initializer":
            value = _uniform_value(c)
            if value is not None:
                self.builder.op("Fill", [], {"shape": list(c.shape), "value": value,
                                             "dtype": c.dtype}, name=c.name, outputs=[c.name])
                self.filled.add(c.name)
                return c.name
            self.constant_state.append(c.name)
        role, init = "state", None
        if c.origin == "initializer":
            role = "state" if c.name in self.state_names else "param"
            init = self.init_hints.get(c.name, "he" if len(c.shape) >= 2 else "zeros")
        self.builder.add_tensor(Tensor(name=c.name, shape=c.shape, dtype=c.dtype, role=role,
                                       init=init))
        self.consts[c.name] = c
        return c.name


class NodeCtx:
    """One ONNX node under conversion: its inputs, attributes and outputs, and how to emit
    planner ops for it. `label` names the node in messages and planner node names."""

    def __init__(self, imp: Importer, node: onnx.NodeProto, label: str) -> None:
        self.imp = imp
        self.node = node
        self.label = label
        self.op_type = node.op_type
        self.attrs: dict[str, Any] = read_attributes(node)

    # ---- reading ----------------------------------------------------------------------------
    @property
    def opset(self) -> int:
        return self.imp.opset

    @property
    def n_inputs(self) -> int:
        """Number of inputs, not counting omitted optional ones at the end."""
        names = list(self.node.input)
        while names and not names[-1]:
            names.pop()
        return len(names)

    def has_input(self, k: int) -> bool:
        return k < len(self.node.input) and bool(self.node.input[k])

    def value(self, k: int) -> Value:
        if not self.has_input(k):
            raise OnnxImportError(f"node {self.label!r} ({self.op_type}): input {k} is missing")
        name = self.node.input[k]
        if name not in self.imp.values:
            raise OnnxImportError(f"node {self.label!r} ({self.op_type}): input {name!r} is not "
                                  f"produced by any earlier node, initializer or graph input")
        return self.imp.values[name]

    def type(self, k: int) -> TensorType:
        return self.imp.type_of(self.value(k), self.node.input[k])

    def shape(self, k: int) -> tuple[int, ...]:
        return self.type(k).shape

    def const(self, k: int) -> Const | None:
        """Input k's value when it is known at import time and may be folded, else None."""
        v = self.value(k) if self.has_input(k) else None
        return v if isinstance(v, Const) and v.foldable else None

    def const_array(self, k: int, what: str) -> np.ndarray:
        """Input k's value, which must be known at import time (a shape, axes, pads, ...)."""
        v = self.value(k)
        if not isinstance(v, Const):
            raise Unsupported(f"{self.op_type} (computed {what})")
        return v.value()

    def ints(self, k: int, what: str) -> list[int]:
        return [int(v) for v in self.const_array(k, what).reshape(-1)]

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def require_attr(self, name: str) -> Any:
        if name not in self.attrs:
            raise OnnxImportError(f"node {self.label!r} ({self.op_type}): missing required "
                                  f"attribute {name!r}")
        return self.attrs[name]

    def output(self, k: int) -> str | None:
        names = self.node.output
        return names[k] if k < len(names) and names[k] else None

    def type_of(self, value: Value) -> TensorType:
        return self.imp.type_of(value, self.label)

    # ---- writing ----------------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, *,
             outputs: Sequence[int | None] | None = None) -> list[Value]:
        """Add a planner op. With `outputs` (indices of this node's ONNX outputs, None for a
        planner output no ONNX output stands for) its outputs take those names and are bound;
        otherwise they get fresh intermediate names.

        When every input is a foldable Const (a shape computation), the op runs now, through
        its numpy reference, and its outputs are Consts instead of a node.
        """
        b = self.imp.builder
        opdef = get_op(op)
        try:
            full = opdef.normalize_attrs(dict(attrs or {}))
            opdef.check_arity(len(inputs))
            types = opdef.infer([self.type_of(v) for v in inputs], full)
        except OpError as e:
            raise OnnxImportError(f"node {self.label!r} ({self.op_type}): {e}") from None
        if outputs is None:
            name = self.imp.fresh(f"{self.label}/{op.lower()}")
            out_names = ([name] if len(types) == 1
                         else [self.imp.fresh(f"{name}:{k}") for k in range(len(types))])
        else:
            name = b.unique(self.label)
            out_names = [(None if k is None else self.output(k))
                         or self.imp.fresh(f"{self.label}:{j}") for j, k in enumerate(outputs)]
        results: list[Value]
        if self._foldable(inputs) and sum(t.size for t in types) <= FOLD_OUTPUT_LIMIT:
            arrays = opdef.reference([v.value() for v in inputs], full)
            results = [Const.of(o, np.asarray(a).astype(t.dtype, copy=False).reshape(t.shape))
                       for o, a, t in zip(out_names, arrays, types, strict=True)]
        else:
            try:
                results = list(b.op_n(op, [self.imp.as_tensor(v) for v in inputs], full, name=name,
                                      outputs=out_names))
            except GraphBuildError as e:
                raise OnnxImportError(f"node {self.label!r} ({self.op_type}): {e}") from None
        for k, value in zip(outputs or (), results, strict=False):
            if k is not None and self.output(k) is not None:
                self.imp.values[self.output(k)] = value
        return results

    @staticmethod
    def _foldable(inputs: Sequence[Value]) -> bool:
        """Run the op now? When all inputs are small foldable Consts (shape computations)."""
        return (bool(inputs)
                and all(isinstance(v, Const) and v.foldable and v.is_planner_dtype
                        for v in inputs)
                and sum(int(np.prod(v.shape)) for v in inputs) <= FOLD_INPUT_LIMIT)

    def emit1(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, *,
              output: int | None = None) -> Value:
        """emit() for a one-output op; `output` is the ONNX output index it becomes."""
        return self.emit(op, inputs, attrs, outputs=None if output is None else [output])[0]

    def bind(self, k: int, value: Value) -> None:
        """Bind ONNX output k to an existing value (an alias) or a Const."""
        out = self.output(k)
        if out is not None:
            self.imp.values[out] = value

    def fold(self, k: int, array: Any) -> None:
        """Bind ONNX output k to a value computed at import time."""
        out = self.output(k)
        if out is not None:
            self.imp.values[out] = Const.of(out, np.asarray(array), origin="folded")


def _uniform_value(c: Const) -> float | None:
    """The one value every element of c holds, when a Fill attribute states it exactly (a
    finite float32, or an int64 that a double holds); None otherwise."""
    if c.dtype not in ("float32", "int64"):
        return None
    array = c.value()
    if array.size == 0:
        return 0.0
    first = array.flat[0]
    if not np.all(array == first) or not np.isfinite(first):
        return None
    value = float(first)
    if c.dtype == "int64" and int(value) != int(first):
        return None
    return value
