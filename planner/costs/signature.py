"""Op signatures: what a cost is measured for (op type, input shapes and dtypes, attrs).

Two nodes with equal signatures run the same kernel on the same sizes, so they cost the same and
are profiled once. The attrs are the op's full, normalised attrs (defaults spelled out) when the
op is in the registry, so a node written with and without default attrs gets one signature.

Example:
    >>> s = OpSignature(op="MatMul", shapes=((64, 128), (128, 32)), dtypes=("float32", "float32"),
    ...                 attrs={"transpose_a": False, "transpose_b": False})
    >>> s.key
    'MatMul(float32[64,128], float32[128,32]) {"transpose_a":false,"transpose_b":false}'

A tf32 graph (Graph.math) on a GPU with TF32 runs its float32 convolutions and GEMMs on the
tensor cores: their signatures carry `math_mode="tf32"`, which ends the key (` math=tf32`), so
a cost-table entry measured under TF32 never prices a float32-math plan, nor the reverse.
Without a math mode the key, the JSON and every table written before it stay as they were.
Everywhere else (a CPU, a GPU before sm_80) a tf32 graph runs plain float32 math, as the
executors do, and gets the float32 signatures:

    >>> s.model_copy(update={"math_mode": "tf32"}).key.endswith("} math=tf32")
    True

A CPU step that keeps images channel-blocked (planner.step.blocked) runs its convolutions,
BatchNorms, pools and pointwise ops on blocked operands: no reorders in and out of a
convolution, other loops than on plain ones. Their signatures carry each operand's layout
(`layouts`, inputs then outputs, "plain" for a plain one), which ends the key
(` layouts=nChw16c,plain->nChw16c`), and the profile measures them so (codegen.profiling.
signatures_graph). A table without such an entry prices it by its plain twin's (`plain`,
CostTable.entry): the same kernel, with the reorders a plain step runs. Where every operand is
plain the field is absent, and keys and tables stay as they were:

    >>> b = s.model_copy(update={"op": "Relu", "shapes": ((8, 16, 4, 4),), "dtypes": ("float32",),
    ...                          "attrs": {}, "layouts": ("nChw16c", "nChw16c")})
    >>> b.key, b.plain.key
    ('Relu(float32[8,16,4,4]) layouts=nChw16c->nChw16c', 'Relu(float32[8,16,4,4])')
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from functools import cached_property, partial
from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator

from planner.ir.graph import AttrValue, BlockedLayout, Graph, Node, Record
from planner.ops import OpError, TensorType, get_op
from planner.target.records import GPU

# An operand's layout in OpSignature.layouts where the step keeps it as it is (NCHW).
PLAIN = "plain"


class OpSignature(Record):
    """Op type, per-input shape and dtype, attrs, and the math mode its kernel runs under
    where that changes it (module docstring). `key` is its one-line text form."""

    op: str = Field(min_length=1)
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    attrs: dict[str, AttrValue] = Field(default_factory=dict)
    # "tf32": a float32 convolution or GEMM run on TF32 tensor cores; None: float32 math.
    math_mode: Literal["tf32"] | None = None
    # Each operand's layout, inputs then outputs (PLAIN or a Tensor.layout), where a step keeps
    # some channel-blocked; () where every one is plain (module docstring).
    layouts: tuple[Literal["plain"] | BlockedLayout, ...] = ()

    @model_validator(mode="after")
    def _one_dtype_per_input(self) -> OpSignature:
        if len(self.shapes) != len(self.dtypes):
            raise ValueError(f"signature of {self.op}: {len(self.shapes)} shapes but "
                             f"{len(self.dtypes)} dtypes")
        if self.math_mode is not None and self.math != self.math_mode:
            raise ValueError(f"signature of {self.op}({', '.join(self.dtypes)}): math_mode "
                             f"{self.math_mode!r} is for float32 convolutions and GEMMs only")
        if self.layouts and (len(self.layouts) <= len(self.shapes)
                             or all(x == PLAIN for x in self.layouts)):
            raise ValueError(f"signature of {self.op}: layouts {list(self.layouts)} name every "
                             f"input and output ({len(self.shapes)} inputs), one blocked at "
                             f"least (all plain: none)")
        return self

    @model_serializer(mode="wrap")
    def _without_plain_math(self, handler: Any) -> Any:
        # Float32 math is the field's absence: cost tables keep their bytes (Graph.math too).
        data = handler(self)
        if isinstance(data, dict) and data.get("math_mode") is None:
            data.pop("math_mode", None)
        if isinstance(data, dict) and not data.get("layouts"):
            data.pop("layouts", None)
        return data

    @cached_property  # written once per signature: a plan's costs and variants both ask
    def key(self) -> str:
        """`Op(dtype[shape], ...) {attrs}` and ` math=<mode>` when it has one: unique per
        signature, readable in cost tables."""
        ins = ", ".join(f"{d}[{','.join(map(str, s))}]" for s, d in zip(self.shapes, self.dtypes,
                                                                         strict=True))
        attrs = json.dumps(self.attrs, sort_keys=True, separators=(",", ":"))
        n = len(self.shapes)
        layouts = (f" layouts={','.join(self.layouts[:n])}->{','.join(self.layouts[n:])}"
                   if self.layouts else "")
        return (f"{self.op}({ins})" + (f" {attrs}" if self.attrs else "")
                + (f" math={self.math_mode}" if self.math_mode else "") + layouts)

    @property
    def plain(self) -> OpSignature:
        """This signature with every operand plain: itself where all are."""
        if not self.layouts:
            return self
        return OpSignature(op=self.op, shapes=self.shapes, dtypes=self.dtypes, attrs=self.attrs,
                           math_mode=self.math_mode)

    @property
    def math(self) -> str:
        """The type its kernel computes in (planner.frontend.passes.precision.compute_type)."""
        from planner.frontend.passes.precision import compute_type

        return compute_type(self.op, self.dtypes, self.math_mode)

    @property
    def input_types(self) -> list[TensorType]:
        return [TensorType(tuple(s), d) for s, d in zip(self.shapes, self.dtypes, strict=True)]


def signature_of(op: str, input_types: Sequence[TensorType],
                 attrs: dict[str, AttrValue] | None = None,
                 math: str | None = None, layouts: Sequence[str] = ()) -> OpSignature:
    """The signature of `op` applied to inputs of these types, attrs normalised by the registry,
    under the math mode `math` its kernel runs with (kept only where it changes the kernel's
    compute type: a float32 convolution or GEMM under "tf32"), on operands of `layouts` (inputs
    then outputs; kept only where one is blocked).

    An op the registry does not know (or attrs it rejects) keeps its attrs as given: the
    signature still keys a cost, and the cost model's analytical fallback says what it lacks.
    """
    from planner.frontend.passes.precision import compute_type

    full = dict(attrs or {})
    try:
        full = get_op(op).normalize_attrs(full)
    except OpError:
        pass
    dtypes = tuple(t.dtype for t in input_types)
    return OpSignature(op=op, shapes=tuple(tuple(t.shape) for t in input_types),
                       dtypes=dtypes, attrs=full,
                       math_mode="tf32" if compute_type(op, dtypes, math) == "tf32" else None,
                       layouts=tuple(layouts) if any(x != PLAIN for x in layouts) else ())


def node_signature(node: Node, input_types: Sequence[TensorType],
                   math: str | None = None, layouts: Sequence[str] = ()) -> OpSignature:
    """The signature of a graph node given its inputs' types (and the graph's math mode where
    its device runs it, its operands' layouts where its step keeps some blocked)."""
    if len(input_types) != len(node.inputs):
        raise ValueError(f"node {node.name!r}: {len(node.inputs)} inputs but "
                         f"{len(input_types)} types given")
    return signature_of(node.op, input_types, node.attrs, math, layouts)


def kernel_math(graph: Graph, gpu: GPU | None) -> str | None:
    """The math mode the graph's kernels run under on `gpu` (None: on a CPU): the graph's
    (Graph.math) on a GPU with TF32, None (float32 math) elsewhere, as the executors decide:
    the CPU runtime ignores the mode, the CUDA executor drops it below sm_80."""
    return graph.math if gpu is not None and gpu.has_tf32 else None


def graph_signatures(graph: Graph, gpu: GPU | None = None) -> dict[str, OpSignature]:
    """Node name -> signature, for every node of the graph, in graph order, as its kernels run
    on `gpu` (None: on a CPU; `kernel_math`). Built once per graph and math mode while the
    graph lives (`_BUILT`): a plan asks for its step graph's several times."""
    math = kernel_math(graph, gpu)
    held = _BUILT.get(id(graph))
    if held is None or held[0]() is not graph:
        held = _BUILT[id(graph)] = (weakref.ref(graph, partial(_forget, id(graph))), {})
    built = held[1].get(math)
    if built is None:
        built = held[1][math] = _build_signatures(graph, math)
    return dict(built)  # the caller's own: the built one stays as built


# Per graph (by identity, while it lives) and math mode, its signatures: graphs are frozen
# records, so one build serves the schedule's op costs and memory's variants of one plan.
_BUILT: dict[int, tuple[weakref.ref[Graph], dict[str | None, dict[str, OpSignature]]]] = {}


def _forget(graph_id: int, ref: weakref.ref[Graph]) -> None:
    # The graph is gone: its entry, unless a graph made since at its address holds it now.
    if _BUILT.get(graph_id, (None,))[0] is ref:
        del _BUILT[graph_id]


def _build_signatures(graph: Graph, math: str | None) -> dict[str, OpSignature]:
    types = {t.name: TensorType(t.shape, t.dtype) for t in graph.tensors}
    blocked = {t.name: t.layout for t in graph.tensors if t.layout is not None}
    # Nodes alike (op, input types, attributes) share one signature: a deep graph repeats a
    # few hundred, and building one (attributes normalized, a validated record) is the cost.
    # Attribute values are JSON data, so equal reprs mean equal attributes.
    made: dict[tuple, OpSignature] = {}
    out = {}
    for n in graph.nodes:
        inputs = [types[i] for i in n.inputs]
        layouts = (tuple(blocked.get(t, PLAIN) for t in (*n.inputs, *n.outputs))
                   if blocked else ())
        alike = (n.op, tuple(inputs), repr(n.attrs), layouts)
        sig = made.get(alike)
        if sig is None:
            sig = made[alike] = node_signature(n, inputs, math, layouts)
        out[n.name] = sig
    return out


def unique_signatures(signatures: Sequence[OpSignature]) -> list[OpSignature]:
    """Distinct signatures in first-seen order (what profiling measures)."""
    seen: dict[str, OpSignature] = {}
    for s in signatures:
        seen.setdefault(s.key, s)
    return list(seen.values())
