"""Importers: model files to planner Graphs (ONNX now; PyTorch later)."""

from planner.importers.onnx import OnnxImport, OnnxImportError, import_onnx, load_onnx

__all__ = ["OnnxImport", "OnnxImportError", "import_onnx", "load_onnx"]
