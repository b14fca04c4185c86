"""The importer's one error type, and the internal signal that a node cannot be expressed."""

from __future__ import annotations

from collections.abc import Mapping


class OnnxImportError(ValueError):
    """The ONNX model cannot be imported. The message is one line naming the file, node or
    tensor; `unsupported` maps each unsupported op (with the variant, e.g. "Conv (3-D)") to
    the name of one node using it, and is empty when the model is broken rather than beyond
    what the planner supports.

    >>> str(OnnxImportError.unsupported_ops({"Foo": "n1", "Bar": "n7"}))
    "unsupported ONNX ops: Bar (node 'n7'), Foo (node 'n1')"
    """

    def __init__(self, message: str, unsupported: Mapping[str, str] | None = None) -> None:
        # One line, whatever names a corrupt file holds.
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))
        self.unsupported: dict[str, str] = dict(unsupported or {})

    @classmethod
    def unsupported_ops(cls, ops: Mapping[str, str]) -> OnnxImportError:
        listing = ", ".join(f"{op} (node {node!r})" for op, node in sorted(ops.items()))
        return cls(f"unsupported ONNX ops: {listing}", ops)


class Unsupported(Exception):
    """Raised by a conversion rule: this node (this op, or this variant of it) has no planner
    equivalent. `what` names it as the user will read it, e.g. "Pad (mode wrap)"."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
