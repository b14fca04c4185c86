"""Reading PyTorch programs: torch imported on demand, a saved ExportedProgram to a Graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import UserError
from planner.graph.ir import Graph


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UserError("PyTorch is not installed: a .pt2 program needs torch "
                        "(pip install torch)") from None
    return torch


def load_pt2(path: str | Path, name: str | None = None) -> Graph:
    """The forward Graph of an ExportedProgram saved with torch.export.save, read as data by
    the planner's own reader (docs/security.md): the archive by planner/torch/ziparchive.py,
    its program and tensors by planner/torch/archive.py, replayed and decomposed in this
    process by planner/torch/retrace.py, converted by the same rules as a traced module.
    torch.export.load never sees the file. Raises UserError (no torch, an unreadable or refused
    file, naming the member and field) or TorchImportError (an op the planner lacks)."""
    require_torch()
    from planner.torch.archive import read_archive
    from planner.torch.convert import convert
    from planner.torch.retrace import retrace

    saved = read_archive(path)
    program = retrace(saved, f"{path}: member {saved.member!r}")
    return convert(program, name=name or Path(path).stem).graph
