"""Reading PyTorch programs: torch imported on demand, a saved ExportedProgram to a Graph."""

from __future__ import annotations

import io
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
    """The forward Graph of an ExportedProgram saved with torch.export.save. The archive is
    checked before torch reads it (planner.torch.archive: no member that could run code), and
    torch reads the checked bytes, not the file again. Raises UserError (no torch, an unreadable
    or refused file, with torch's warnings about it) or TorchImportError (an op the planner
    lacks)."""
    torch = require_torch()
    from planner.torch.archive import read_archive
    from planner.torch.convert import convert

    data = read_archive(path)
    warnings = _Warnings()
    # torch logs why it refuses (a traceback, "check the warnings above"): kept for the message
    loggers = [logging.getLogger(n) for n in ("torch.export", "torch._export")]
    saved = [(log.handlers, log.propagate, log.disabled) for log in loggers]
    for log in loggers:  # torch's own handlers print tracebacks: only ours, for this load
        log.handlers, log.propagate, log.disabled = [warnings], False, False
    try:
        program = torch.export.load(io.BytesIO(data))
    except Exception as e:  # a truncated archive, a malformed program, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UserError(f"{path}: not a saved torch.export program ({type(e).__name__}: "
                        f"{first}){warnings.said()}") from None
    finally:
        for log, (handlers, propagate, disabled) in zip(loggers, saved, strict=True):
            log.handlers, log.propagate, log.disabled = handlers, propagate, disabled
    return convert(program, name=name or Path(path).stem).graph


class _Warnings(logging.Handler):
    """torch's warnings while loading, each as one line (with the error it logged)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = " ".join(record.getMessage().split())
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            said = str(error).strip().splitlines()
            line += f" ({type(error).__name__}: {said[0] if said else ''})"
        self.lines.append(line)

    def said(self) -> str:
        return "".join(f"; torch warned: {line}" for line in self.lines)
