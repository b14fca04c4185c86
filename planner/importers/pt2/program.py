"""Reading PyTorch programs: torch imported on demand, a saved ExportedProgram to a Graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import UserError
from planner.ir.graph import Graph


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UserError("PyTorch is not installed: a .pt2 program needs torch "
                        "(pip install torch)") from None
    return torch


def load_pt2(path: str | Path, name: str | None = None) -> Graph:
    """The forward Graph of an ExportedProgram saved with torch.export.save, read as data by
    the planner's own reader (docs/security.md): the archive by planner/importers/pt2/ziparchive.py,
    its program and tensors by planner/importers/pt2/archive.py, replayed and decomposed in this
    process by planner/importers/pt2/retrace.py, converted by the same rules as a traced module.
    torch.export.load never sees the file. Raises UserError (no torch, an unreadable or refused
    file, naming the member and field) or TorchImportError (an op the planner lacks)."""
    require_torch()
    from planner.importers.pt2.archive import read_archive
    from planner.importers.pt2.retrace import retrace
    from planner.importers.torch.convert import convert

    saved = read_archive(path)
    program = retrace(saved, f"{path}: member {saved.member!r}")
    return convert(program, name=name or Path(path).stem).graph
