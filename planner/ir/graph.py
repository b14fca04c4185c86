"""Graph IR: immutable records for tensors, nodes and graphs, with a canonical JSON form.

A Graph is a list of tensors and a list of nodes in topological order. Every tensor is produced
by exactly one node unless its role says it comes from outside the step (input, label, param,
state, optimizer-state). Layout is NCHW for images; shapes are fully static.

Example:
    >>> g = Graph(name="tiny", kind="inference",
    ...     tensors=(Tensor(name="x", shape=(2, 3), role="input"),
    ...              Tensor(name="y", shape=(2, 3))),
    ...     nodes=(Node(name="relu", op="Relu", inputs=("x",), outputs=("y",)),),
    ...     outputs=("y",))
    >>> Graph.from_json(g.to_json()) == g
    True
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from planner.dtypes import DType, num_bytes, num_elements
from planner.ir.record import Record, canonical_json  # noqa: F401 - re-exported

# Where a tensor's bytes come from and how long they persist:
#   input, label      fed by the caller each step
#   param             trainable weights, persistent
#   state             non-trainable persistent state (BatchNorm running statistics)
#   optimizer-state   persistent optimizer slots (momentum, Adam moments, step count)
#   activation        produced and consumed within the step (forward values)
#   grad              produced within the step by the backward pass
Role = Literal["input", "label", "param", "state", "optimizer-state", "activation", "grad"]

# Initialisers for persistent tensors: he (normal, std sqrt(2 / fan_in)), glorot (uniform,
# limit sqrt(6 / (fan_in + fan_out))), normal (std 0.02), embedding (normal, std 1 / sqrt(dim)),
# constant (every element the tensor's `value`: a hyperparameter's first value).
Init = Literal["zeros", "ones", "he", "glorot", "normal", "embedding", "loss-scale", "constant"]

# A channel-blocked image layout (Tensor.layout): nChw<B>c, B channels innermost.
BlockedLayout = Literal["nChw8c", "nChw16c"]


def channel_block(layout: str) -> int:
    """The channels per block of a blocked layout: 16 for nChw16c."""
    return int(layout[4:-1])


EXTERNAL_ROLES: frozenset[str] = frozenset({"input", "label", "param", "state", "optimizer-state"})

# A JSON attribute value: scalars and (nested) lists of them.
AttrValue = int | float | str | bool | list[Any] | None



# Element counts stay far from int64's limit, so sizes and offsets in bytes never wrap.
MAX_ELEMENTS = 2**56


class Tensor(Record):
    """A named, statically shaped tensor. Size in bytes is `nbytes`."""

    name: str = Field(min_length=1)
    shape: tuple[int, ...]
    dtype: DType = "float32"
    role: Role = "activation"
    # How a param or state tensor is initialised (see planner.graph.interpret.init_value).
    init: Init | None = None
    # In-place update: this tensor is the next value of the persistent tensor named here
    # (param, state or optimizer-state). It has that tensor's role, shape and dtype; executors
    # write it over the old bytes, and every other reader of the old value runs before.
    updates: str | None = None
    # The value of every element of an init "constant" tensor (and only of one).
    value: float | None = None
    # How a step graph keeps its bytes (planner.step.blocked): a float32 (N, C, H, W) image
    # in oneDNN's channel-blocked layout, C / B blocks of B channels (N, C/B, H, W, B),
    # nChw16c or nChw8c. None (absent from the JSON): plain NCHW, every tensor's layout
    # before the field existed.
    layout: BlockedLayout | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _value_with_constant(self) -> Tensor:
        if (self.init == "constant") != (self.value is not None):
            raise ValueError(f"tensor {self.name!r}: init 'constant' and `value` go together")
        if self.value is not None and not math.isfinite(self.value):
            raise ValueError(f"tensor {self.name!r}: value must be finite, got {self.value}")
        if self.layout is not None and (len(self.shape) != 4 or self.dtype != "float32"
                                        or self.shape[1] % channel_block(self.layout)
                                        or self.role not in ("activation", "grad")):
            # What crosses to the caller (feeds, parameters, state) is plain.
            raise ValueError(f"tensor {self.name!r}: layout {self.layout} is a float32 (N, C, "
                             f"H, W) activation's or gradient's with C a multiple of "
                             f"{channel_block(self.layout)}; got {self.role} {self.dtype} "
                             f"{list(self.shape)}")
        return self

    @field_validator("shape")
    @classmethod
    def _non_negative(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        if any(d < 0 for d in shape):
            raise ValueError(f"dimensions must be >= 0, got {list(shape)}")
        if num_elements(shape) > MAX_ELEMENTS:
            raise ValueError(f"shape {list(shape)} holds more than 2^56 elements (the most "
                             f"one tensor may hold)")
        return shape

    @property
    def size(self) -> int:
        """Number of elements."""
        return num_elements(self.shape)

    @property
    def nbytes(self) -> int:
        return num_bytes(self.shape, self.dtype)


class Node(Record):
    """One op application. `attrs` holds JSON values, every attr of the op spelled out."""

    name: str = Field(min_length=1)
    op: str = Field(min_length=1)
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    attrs: dict[str, AttrValue] = Field(default_factory=dict)


class Graph(Record):
    """A model graph: tensors, nodes in topological order, and the tensors the step returns.

    `kind` is `inference` for forward graphs (zoo builders, ONNX imports; a zoo graph may end
    in a loss) and `training` for graphs that also hold the backward pass and updates. `math`
    is a math mode of the kernels that no dtype shows: "tf32" lets a GPU's float32
    convolutions and GEMMs round their operands to TF32 on tensor cores (the tf32 precision
    policy, planner/frontend/passes/precision.py); None (absent from the JSON) is plain float32
    math. `loss` names the output to train on when no loss op writes it (a loss of several terms,
    `mse + beta * kl`, traced with the model); None (absent from the JSON): the output a loss
    op writes (planner.frontend.autodiff.find_loss).
    """

    name: str = "graph"
    kind: Literal["inference", "training"] = "inference"
    tensors: tuple[Tensor, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...] = ()
    # Plain float32 math (and no marked loss) is the field's absence, in a plan's graph too
    # (plans keep their other nulls): every graph, plan and digest made before the field
    # existed stands. (exclude_if, not a wrapping model serializer, which made every dump of
    # a graph or of a plan holding one several times slower.)
    math: Literal["tf32"] | None = Field(default=None, exclude_if=lambda v: v is None)
    loss: str | None = Field(default=None, exclude_if=lambda v: v is None)

    # ---- lookups (cached: records are frozen) -------------------------------------------
    @cached_property
    def tensor_map(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.tensors}

    @cached_property
    def node_map(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def producer(self) -> dict[str, Node]:
        """Tensor name -> the node that writes it."""
        return {out: n for n in self.nodes for out in n.outputs}

    @cached_property
    def consumers(self) -> dict[str, tuple[Node, ...]]:
        """Tensor name -> nodes that read it, in graph order."""
        acc: dict[str, list[Node]] = {t.name: [] for t in self.tensors}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                acc.setdefault(i, []).append(n)
        return {k: tuple(v) for k, v in acc.items()}

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensor_map[name]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no tensor {name!r}") from None

    def by_role(self, *roles: str) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.role in roles)

    def fresh_name(self, base: str) -> str:
        """`base`, or `base`_k for the first k that no tensor or node of the graph uses (a
        rewrite's new tensor or node)."""
        taken = set(self.tensor_map) | set(self.node_map)
        k, name = 0, base
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        return name

    # ---- canonical JSON -------------------------------------------------------------------
    def to_json(self) -> str:
        """Canonical JSON: sorted keys, graph order kept, one node or tensor per line."""
        return canonical_json(self.model_dump(mode="json", exclude_none=True))

    @classmethod
    def from_json(cls, text: str) -> Graph:
        return cls.model_validate_json(text)
