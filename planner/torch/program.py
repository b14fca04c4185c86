"""Reading PyTorch programs: torch imported on demand, a saved ExportedProgram to a Graph."""

from __future__ import annotations

import logging
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
    """The forward Graph of an ExportedProgram saved with torch.export.save. Raises UserError
    (no torch, unreadable file) or TorchImportError (an op the planner lacks)."""
    torch = require_torch()
    from planner.torch.convert import convert

    log = logging.getLogger("torch.export")  # logs a traceback before raising: one line here
    quiet, log.disabled = log.disabled, True
    try:
        program = torch.export.load(str(path))
    except Exception as e:  # not a .pt2 archive, a truncated one, ...
        first = str(e).splitlines()[0] if str(e) else ""
        raise UserError(f"{path}: not a saved torch.export program ({type(e).__name__}: "
                        f"{first})") from None
    finally:
        log.disabled = quiet
    return convert(program, name=name or Path(path).stem).graph
