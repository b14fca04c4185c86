"""Loading a model: the GRAPH argument every command takes, the front end's first step
(planner.frontend.prepare).

A GRAPH argument is one of
  - a zoo spec: `zoo:resnet?depth=50&batch=32`,
  - an ONNX file (recognised by its `.onnx` suffix, or by failing to parse as JSON),
  - a graph JSON file as written by `planner graph -o`,
  - a PyTorch ExportedProgram saved by `torch.export.save` (`.pt2`, planner.torch).
"""

from __future__ import annotations

import json
from pathlib import Path

from planner.errors import UserError
from planner.graph import Graph, check_graph
from planner.io.read import graph_from_data, parse_json_bytes


def load_graph(spec: str, train_dropout: bool = False) -> Graph:
    """Load and validate a graph from a zoo spec, an ONNX file or a graph JSON file.

    `train_dropout`: an ONNX file's Dropouts without a training flag train too (see
    planner.importers.onnx.import_onnx); other sources ignore it."""
    if spec.startswith("zoo:"):
        from planner.zoo import from_spec

        return check_graph(from_spec(spec))
    path = Path(spec)
    if not path.exists():
        raise UserError(f"{spec}: no such file (a GRAPH is an .onnx file, a graph .json file "
                        f"or a zoo spec such as 'zoo:resnet?depth=50&batch=32')")
    if path.is_dir():
        raise UserError(f"{spec}: is a directory, not a graph file")
    if not path.is_file():
        raise UserError(f"{spec}: is not a regular file")  # a FIFO would block the read
    suffix = path.suffix.lower()
    try:
        if suffix == ".pt2":  # its reader opens the file itself, once (importers/pt2/archive.py)
            from planner.importers.pt2.program import load_pt2

            return check_graph(load_pt2(path, name=path.stem))
        try:
            data = path.read_bytes()
        except OSError as e:  # EIO (/proc/self/mem), EACCES: name the file
            raise UserError(f"{spec}: cannot read ({e.strerror})") from None
        if suffix == ".onnx" or (suffix != ".json" and not _looks_like_json(data)):
            from planner.importers import load_onnx

            return check_graph(load_onnx(path, name=path.stem, train_dropout=train_dropout))
        return graph_from_data(parse_json_bytes(data, spec), source=spec)
    except ValueError as e:  # GraphError, OpError, OnnxImportError: name the file too
        if str(e).startswith(spec):
            raise
        raise UserError(f"{spec}: {e}") from None


def _looks_like_json(data: bytes) -> bool:
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        return False
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    except RecursionError:
        return True  # JSON, nested too deeply: graph_from_json says so
    return True
