"""What an ATen conversion rule sees of one torch.export node, and the import's error type.

The import reuses the ONNX importer's state (`planner.importers.onnx.context.Importer`: the
GraphBuilder, fresh names, and `Const`s that become param or state tensors on first use), so a
parameter, a buffer and a constant (`aten.full`, a lifted tensor) become planner tensors by the
same rule in both front ends. A rule converts one fx node through a `NodeCtx`:

    @rule("aten.relu.default")
    def relu(n: NodeCtx) -> Value:
        return n.emit1("Relu", [n.tensor(0)])

and returns what the node's value became: a planner tensor name, a `Const`, or a tuple of them
for a node with several outputs (`getitem` picks one). An output no planner op stands for
(BatchNorm's saved statistics, max-pool indices) is `UNAVAILABLE`, an error only when read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.graph.builder import GraphBuildError
from planner.importers.kit import Const, ImportFailed, Rules, Unsupported
from planner.importers.onnx.context import Importer


class TorchImportError(ImportFailed):
    """The ExportedProgram cannot be imported; one line naming the node, op or tensor.

    >>> str(TorchImportError.unsupported_ops({"aten.foo.default": "foo_1"},
    ...                                      {"aten.foo.default": "layers.3.attn"}))
    "unsupported ATen ops: aten.foo.default (node 'foo_1' in layers.3.attn)"
    """

    @classmethod
    def unsupported_ops(cls, ops: dict[str, str],
                        modules: dict[str, str] | None = None) -> TorchImportError:
        """ops: ATen op -> the first node using it; modules: ATen op -> that node's module
        path (`layers.3.attn`; absent or empty for the root module)."""
        listing = ", ".join(f"{op} (node {node!r}{_in((modules or {}).get(op, ''))})"
                            for op, node in sorted(ops.items()))
        return cls(f"unsupported ATen ops: {listing}", ops)


def _in(module: str) -> str:
    """" in layers.3.attn" for a module path; a place that starts with a preposition
    (`from logsumexp at model.py:8`, `at model.py:12`: planner/importers/torch/origin.py) as
    it is."""
    if not module:
        return ""
    return f" {module}" if module.startswith(("from ", "at ")) else f" in {module}"


class _Unavailable:
    """An output of a multi-output ATen op that no planner op computes; `why`, when a rule
    says (NodeCtx.unavailable), names it, its node and the reason, for the error of a reader."""

    def __init__(self, why: str = "") -> None:
        self.why = why

    def __repr__(self) -> str:
        return "UNAVAILABLE"


UNAVAILABLE = _Unavailable()

Value = str | Const | tuple | _Unavailable

# str(aten overload), e.g. "aten.convolution.default" -> rule; filled by rules.py.
RULES = Rules("ATen")
rule = RULES.rule


class NodeCtx:
    """One fx node under conversion. `args` are its arguments with every fx node replaced by
    what it became; `out_shape`/`out_dtype` are the node's own (from its FakeTensor metadata),
    `shape(v)`/`dtype(v)` those of a value it reads."""

    def __init__(self, imp: Importer, label: str, op: str, args: Sequence[Any],
                 kwargs: dict[str, Any], shape: tuple[int, ...] | None,
                 dropouts: list[int], dtype: str | None = None, node: Any = None,
                 module: str = "", values: dict[str, Any] | None = None,
                 counts: dict[str, str] | None = None) -> None:
        self.imp = imp
        # each data-dependent size's count tensor, by its symbol (rules_bounded.py)
        self.counts = counts if counts is not None else {}
        self.node = node  # the call's record (planner/importers/torch/record.py Call)
        self._values = values or {}  # value name -> its record Value (shape, dtype, strides)
        self.module = module  # the module path of the node (`layers.3.attn`), for messages
        self.label = label
        self.op = op
        self.args = list(args)
        self.kwargs = kwargs
        self.out_shape = shape
        self.out_dtype = dtype
        self._dropouts = dropouts

    # ---- reading ----------------------------------------------------------------------------
    def arg(self, k: int, name: str, default: Any = None) -> Any:
        """Argument k (or the keyword `name`), else `default`."""
        if k < len(self.args):
            return self.args[k]
        return self.kwargs.get(name, default)

    def tensor(self, k: int, name: str = "") -> str | Const:
        """Argument k, which must be a tensor value."""
        v = self.arg(k, name)
        if isinstance(v, _Unavailable):
            if v.why:
                raise self.fail(f"reads {v.why}")
            raise Unsupported(f"{self.op} (reads an output the planner does not compute)")
        if not isinstance(v, (str, Const)):
            raise self.fail(f"argument {k} is not a tensor")
        return v

    def traced(self, k: int, name: str = "") -> Any:
        """The traced Value (shape, dtype, strides, storage offset) of tensor argument k, as
        the program declares it; None where unknown."""
        from planner.importers.torch.ref import Ref

        if self.node is None:
            return None
        ref = self.node.args[k] if k < len(self.node.args) else self.node.kwargs.get(name)
        return self._values.get(ref.name) if isinstance(ref, Ref) else None

    def shape(self, v: str | Const) -> tuple[int, ...]:
        return self.imp.type_of(v, self.label).shape

    def dtype(self, v: str | Const) -> str:
        return self.imp.type_of(v, self.label).dtype

    def ints(self, k: int, name: str, default: Any = None) -> list[int]:
        v = self.arg(k, name, default)
        if isinstance(v, int):
            return [v]
        if not isinstance(v, (list, tuple)) or not all(isinstance(i, int) for i in v):
            raise self.fail(f"argument {k} must be a list of ints, got {type(v).__name__}")
        return [int(i) for i in v]

    def unavailable(self, output: str, why: str) -> _Unavailable:
        """The node's `output` (`U (the left singular vectors)`), which no planner op computes
        because `why`: an error naming both where a node or the program's output reads it."""
        return _Unavailable(f"{output} of node {self.label!r}{_in(self.module)} ({self.op}), "
                            f"which the planner does not compute: {why}")

    def fail(self, what: str) -> TorchImportError:
        return TorchImportError(f"node {self.label!r}{_in(self.module)} ({self.op}): {what}")

    def next_dropout_seed(self) -> int:
        """Each Dropout gets its own mask stream: seeds 1, 2, ... in graph order."""
        self._dropouts[0] += 1
        return self._dropouts[0]

    # ---- writing ----------------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[str | Const], attrs: dict[str, Any] | None = None,
             n_out: int = 1) -> list[str]:
        """Add a planner op named after the node (`<node>`, then `<node>/<op>`, ... when a
        node becomes several ops); return its output tensor names."""
        name = self.imp.fresh(self.label)
        outs = [name] if n_out == 1 else [self.imp.fresh(f"{name}:{k}") for k in range(n_out)]
        try:
            return self.imp.builder.op_n(op, [self.imp.as_tensor(v) for v in inputs], attrs,
                                         name=name, outputs=outs)
        except GraphBuildError as e:
            raise self.fail(str(e)) from None

    def emit1(self, op: str, inputs: Sequence[str | Const],
              attrs: dict[str, Any] | None = None) -> str:
        (out,) = self.emit(op, inputs, attrs)
        return out

    def const(self, value: Any, dtype: str) -> Const:
        """A scalar or array known now (a Python number in the graph), as a state tensor when
        an op reads it: it carries its value into params(), never a zero placeholder."""
        import numpy as np

        return Const.of(self.imp.fresh(f"{self.label}/const"), np.asarray(value, dtype=dtype),
                        origin="constant")
