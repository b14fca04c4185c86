"""GraphBuilder: construct a Graph op by op, with shapes inferred as you go.

Used by the zoo, the importers and autodiff, so every graph is built through the same shape rules
that validation later re-checks.

Example:
    >>> b = GraphBuilder("mlp")
    >>> x = b.input("x", (4, 8))
    >>> w = b.param("w", (8, 2), init="glorot")
    >>> with b.scope("fc"):
    ...     y = b.op("MatMul", [x, w])
    >>> g = b.build(outputs=[y])
    >>> g.tensor(y).shape, g.nodes[0].name
    ((4, 2), 'fc/matmul')
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from planner.ir.graph import Graph, Node, Tensor
from planner.ops import OpError, TensorType, get_op


class GraphBuildError(ValueError):
    pass


class GraphBuilder:
    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._tensors: dict[str, Tensor] = {}
        self._nodes: list[Node] = []
        self._node_names: set[str] = set()
        self._scopes: list[str] = []

    # ---- naming -----------------------------------------------------------------------------
    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix node and tensor names made inside with `name/`."""
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    def scoped(self, name: str) -> str:
        return "/".join([*self._scopes, name])

    def unique(self, base: str) -> str:
        """A node name not used yet: base, base_1, base_2, ..."""
        name, i = base, 0
        while name in self._node_names or name in self._tensors:
            i += 1
            name = f"{base}_{i}"
        return name

    # ---- tensors ------------------------------------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> str:
        if tensor.name in self._tensors:
            raise GraphBuildError(f"tensor {tensor.name!r} defined twice")
        self._tensors[tensor.name] = tensor
        return tensor.name

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32",
              role: str = "input") -> str:
        return self.add_tensor(_tensor(name=self.scoped(name), shape=tuple(shape), dtype=dtype,
                                       role=role))

    def label(self, name: str, shape: Sequence[int], dtype: str = "int64") -> str:
        return self.input(name, shape, dtype, role="label")

    def param(self, name: str, shape: Sequence[int], init: str = "he", dtype: str = "float32",
              role: str = "param") -> str:
        return self.add_tensor(_tensor(name=self.scoped(name), shape=tuple(shape), dtype=dtype,
                                       role=role, init=init))

    def type(self, name: str) -> TensorType:
        t = self._tensors[name]
        return TensorType(t.shape, t.dtype)

    def has(self, name: str) -> bool:
        return name in self._tensors

    def tensor(self, name: str) -> Tensor:
        return self._tensors[name]

    def set_role(self, name: str, role: str) -> None:
        """Change a tensor's role (an importer learning that an input holds labels)."""
        self._tensors[name] = self._tensors[name].model_copy(update={"role": role})

    def set_updates(self, name: str, persistent: str) -> None:
        """Make tensor `name` the next value of persistent tensor `persistent` (an importer
        writing a buffer's value after the step over it): its role and `updates` (ir.Tensor)."""
        role = self._tensors[persistent].role
        self._tensors[name] = self._tensors[name].model_copy(update={"role": role,
                                                                     "updates": persistent})

    def producer(self, tensor: str) -> Node | None:
        """The node writing `tensor`, or None for a tensor from outside the step."""
        return next((n for n in reversed(self._nodes) if tensor in n.outputs), None)

    # ---- nodes --------------------------------------------------------------------------------
    def op(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None, *,
           name: str | None = None, outputs: Sequence[str] | None = None,
           role: str = "activation") -> Any:
        """Add a node; return its output name (or the list of names for multi-output ops)."""
        outs = self.op_n(op, inputs, attrs, name=name, outputs=outputs, role=role)
        return outs[0] if len(outs) == 1 else outs

    def op_n(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None, *,
             name: str | None = None, outputs: Sequence[str] | None = None,
             role: str = "activation") -> list[str]:
        """Add a node; always return the list of its output names."""
        node_name = self.unique(self.scoped(name or op.lower()))
        try:
            opdef = get_op(op)
            opdef.check_arity(len(inputs))
            full = opdef.normalize_attrs(dict(attrs or {}))
            for i in inputs:
                if i not in self._tensors:
                    raise OpError(f"input {i!r} is not defined")
            out_types = opdef.infer([self.type(i) for i in inputs], full)
        except OpError as e:
            raise GraphBuildError(f"node {node_name!r}: {e}") from None
        if outputs is None:
            outputs = ([node_name] if len(out_types) == 1
                       else [f"{node_name}:{k}" for k in range(len(out_types))])
        if len(outputs) != len(out_types):
            raise GraphBuildError(f"node {node_name!r}: {op} has {len(out_types)} outputs, "
                                  f"{len(outputs)} names given")
        for out, t in zip(outputs, out_types, strict=True):
            self.add_tensor(_tensor(name=out, shape=t.shape, dtype=t.dtype, role=role))
        self._node_names.add(node_name)
        self._nodes.append(Node(name=node_name, op=op, inputs=tuple(inputs),
                                outputs=tuple(outputs), attrs=full))
        return list(outputs)

    def build(self, outputs: Sequence[str] = (), kind: str = "inference",
              loss: str | None = None) -> Graph:
        """The Graph: only tensors some node or output uses are kept, in definition order
        (and those a kept tensor `updates`: a buffer written and never read). `loss`: the
        output to train on when no loss op writes it (Graph.loss)."""
        used = {i for n in self._nodes for i in (*n.inputs, *n.outputs)} | set(outputs)
        used |= {self._tensors[u].updates for u in used if self._tensors[u].updates}
        return Graph(name=self.name, kind=kind,
                     tensors=tuple(t for t in self._tensors.values() if t.name in used),
                     nodes=tuple(self._nodes), outputs=tuple(outputs), loss=loss)


def _tensor(**fields: Any) -> Tensor:
    """Tensor(**fields), or GraphBuildError naming it and what it breaks in one line (a shape
    past the limit of 2^56 elements, a dimension below 0), not pydantic's report."""
    try:
        return Tensor(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        why = str(first.get("ctx", {}).get("error") or first["msg"])
        where = "" if why.startswith(field) else f"{field}: "
        raise GraphBuildError(f"tensor {fields.get('name')!r}: {where}{why}") from None
