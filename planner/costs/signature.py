"""Op signatures: what a cost is measured for (op type, input shapes and dtypes, attrs).

Two nodes with equal signatures run the same kernel on the same sizes, so they cost the same and
are profiled once. The attrs are the op's full, normalised attrs (defaults spelled out) when the
op is in the registry, so a node written with and without default attrs gets one signature.

Example:
    >>> s = OpSignature(op="MatMul", shapes=((64, 128), (128, 32)), dtypes=("float32", "float32"),
    ...                 attrs={"transpose_a": False, "transpose_b": False})
    >>> s.key
    'MatMul(float32[64,128], float32[128,32]) {"transpose_a":false,"transpose_b":false}'
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import Field, model_validator

from planner.graph.ir import AttrValue, Graph, Node, Record
from planner.ops import OpError, TensorType, get_op


class OpSignature(Record):
    """Op type, per-input shape and dtype, attrs. `key` is its one-line text form."""

    op: str = Field(min_length=1)
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    attrs: dict[str, AttrValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_dtype_per_input(self) -> OpSignature:
        if len(self.shapes) != len(self.dtypes):
            raise ValueError(f"signature of {self.op}: {len(self.shapes)} shapes but "
                             f"{len(self.dtypes)} dtypes")
        return self

    @property
    def key(self) -> str:
        """`Op(dtype[shape], ...) {attrs}`: unique per signature, readable in cost tables."""
        ins = ", ".join(f"{d}[{','.join(map(str, s))}]" for s, d in zip(self.shapes, self.dtypes,
                                                                         strict=True))
        attrs = json.dumps(self.attrs, sort_keys=True, separators=(",", ":"))
        return f"{self.op}({ins})" + (f" {attrs}" if self.attrs else "")

    @property
    def math(self) -> str:
        """The type its kernel computes in (planner.graph.precision.compute_type)."""
        from planner.graph.precision import compute_type

        return compute_type(self.op, self.dtypes)

    @property
    def input_types(self) -> list[TensorType]:
        return [TensorType(tuple(s), d) for s, d in zip(self.shapes, self.dtypes, strict=True)]


def signature_of(op: str, input_types: Sequence[TensorType],
                 attrs: dict[str, AttrValue] | None = None) -> OpSignature:
    """The signature of `op` applied to inputs of these types, attrs normalised by the registry.

    An op the registry does not know (or attrs it rejects) keeps its attrs as given: the
    signature still keys a cost, and the cost model's analytical fallback says what it lacks.
    """
    full = dict(attrs or {})
    try:
        full = get_op(op).normalize_attrs(full)
    except OpError:
        pass
    return OpSignature(op=op, shapes=tuple(tuple(t.shape) for t in input_types),
                       dtypes=tuple(t.dtype for t in input_types), attrs=full)


def node_signature(node: Node, input_types: Sequence[TensorType]) -> OpSignature:
    """The signature of a graph node given its inputs' types."""
    if len(input_types) != len(node.inputs):
        raise ValueError(f"node {node.name!r}: {len(node.inputs)} inputs but "
                         f"{len(input_types)} types given")
    return signature_of(node.op, input_types, node.attrs)


def graph_signatures(graph: Graph) -> dict[str, OpSignature]:
    """Node name -> signature, for every node of the graph, in graph order."""
    types = {t.name: TensorType(t.shape, t.dtype) for t in graph.tensors}
    # Nodes alike (op, input types, attributes) share one signature: a deep graph repeats a
    # few hundred, and building one (attributes normalized, a validated record) is the cost.
    # Attribute values are JSON data, so equal reprs mean equal attributes.
    made: dict[tuple, OpSignature] = {}
    out = {}
    for n in graph.nodes:
        inputs = [types[i] for i in n.inputs]
        alike = (n.op, tuple(inputs), repr(n.attrs))
        sig = made.get(alike)
        if sig is None:
            sig = made[alike] = node_signature(n, inputs)
        out[n.name] = sig
    return out


def unique_signatures(signatures: Sequence[OpSignature]) -> list[OpSignature]:
    """Distinct signatures in first-seen order (what profiling measures)."""
    seen: dict[str, OpSignature] = {}
    for s in signatures:
        seen.setdefault(s.key, s)
    return list(seen.values())
