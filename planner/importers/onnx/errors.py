"""The ONNX importer's one error type."""

from __future__ import annotations

from collections.abc import Mapping

from planner.importers.kit import ImportFailed


class OnnxImportError(ImportFailed):
    """The ONNX model cannot be imported. The message is one line naming the file, node or
    tensor; `unsupported` maps each unsupported op (with the variant, e.g. "Conv (3-D)") to
    the name of one node using it, and is empty when the model is broken rather than beyond
    what the planner supports.

    >>> str(OnnxImportError.unsupported_ops({"Foo": "n1", "Bar": "n7"}))
    "unsupported ONNX ops: Bar (node 'n7'), Foo (node 'n1')"
    """

    @classmethod
    def unsupported_ops(cls, ops: Mapping[str, str]) -> OnnxImportError:
        listing = ", ".join(f"{op} (node {node!r})" for op, node in sorted(ops.items()))
        return cls(f"unsupported ONNX ops: {listing}", ops)

