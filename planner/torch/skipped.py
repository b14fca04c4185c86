"""Frames Dynamo skips under torch.compile(backend="planner"): told once, never silently eager.

Dynamo does not trace some modules at all (nn.GRU, nn.LSTM and nn.RNN while
torch._dynamo.config.allow_rnn is False, its default): the frame that calls one runs eagerly,
the backend is never called, so nothing is planned and, without this, nothing says so. Dynamo
calls its compile callbacks around every frame it compiles: for a compile of the planner's
backend that ends without handing the backend a graph after Dynamo gave up on the frame (its
`unimplemented` counter grew), one PlannerFallback warning names the frame, Dynamo's reason
and its hint, once per frame and reason. torch._dynamo.reset() clears Dynamo's callbacks, so
`install` wraps the handler's `clear` to register them again after it: a script (or notebook)
that resets Dynamo and then compiles a GRU model was told nothing before, since a frame skipped
whole never reaches the backend that would register them again. What the
callbacks read of Dynamo's compile (its `_compile` frame's `compiler_fn`, its counters) is
private: where it is not found, nothing is said, as before (tests/importers/test_backend_edges.py
pins it for the torch installed).
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any

_STATE = threading.local()
# The planner's backend function (install).
_BACKEND: list[Any] = []
_TOLD: set[tuple[str, int, str]] = set()


def backend_called() -> None:
    """The planner's backend got a graph of the frame being compiled."""
    _STATE.called = True


def install(backend: Any) -> None:
    """Register the compile callbacks with Dynamo, where they are not (on import of
    planner.torch, and at every graph the backend gets: torch._dynamo.reset() clears them);
    `backend`: the planner's backend function, whose compiles they watch (handed in: this
    module stays below planner.torch.backend)."""
    import torch._dynamo

    _BACKEND[:] = [backend]

    handler = getattr(torch._dynamo, "callback_handler", None)
    if handler is None or _start in getattr(handler, "start_callbacks", [_start]):
        return
    handler.register_start_callback(_start)
    handler.register_end_callback(_end)
    _kept_through_clear(handler)


def _kept_through_clear(handler: Any) -> None:
    """Make `handler.clear()` (torch._dynamo.reset's) register the callbacks again after it."""
    clear = getattr(handler, "clear", None)
    if clear is None or getattr(clear, "keeps_planner_callbacks", False):
        return

    def clear_keeping_ours() -> None:
        clear()
        handler.register_start_callback(_start)
        handler.register_end_callback(_end)

    clear_keeping_ours.keeps_planner_callbacks = True  # type: ignore[attr-defined]
    try:
        handler.clear = clear_keeping_ours
    except (AttributeError, TypeError):  # a handler that takes no attribute: as before
        pass


def _compiling() -> tuple[Any, Any] | None:
    """(compiler_fn, frame) of the Dynamo `_compile` on this thread's stack, or None."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "_compile" and "compiler_fn" in f.f_locals:
            return f.f_locals["compiler_fn"], f.f_locals.get("frame")
        f = f.f_back
    return None


def _is_planner(fn: Any) -> bool:
    planner_backend = _BACKEND[0] if _BACKEND else None
    for _ in range(8):  # Dynamo's and torch.compile's wrappers around the backend
        if fn is planner_backend or getattr(fn, "func", None) is planner_backend:
            return True
        fn = getattr(fn, "_torchdynamo_orig_backend", None) or getattr(fn, "compiler_fn", None)
        if fn is None:
            return False
    return False


def _start(args: Any) -> None:
    _STATE.watch = None
    try:
        from torch._dynamo.utils import counters

        found = _compiling()
        if found is None or not _is_planner(found[0]):
            return
        _STATE.called = False
        _STATE.watch = (found[1], dict(counters["unimplemented"]))
    except Exception:  # Dynamo's internals moved: say nothing, as before
        _STATE.watch = None


def _end(args: Any) -> None:
    watch, _STATE.watch = getattr(_STATE, "watch", None), None
    if watch is None or getattr(_STATE, "called", True):
        return
    from torch._dynamo.utils import counters

    frame, before = watch
    grown = [k for k, n in counters["unimplemented"].items() if n > before.get(k, 0)]
    if not grown:
        return  # a frame with nothing to compute: nothing to plan either
    code = getattr(frame, "f_code", None)
    where = (f"{code.co_name} at {code.co_filename}:{code.co_firstlineno}" if code is not None
             else "a frame")
    lines = [line.strip() for line in str(grown[0]).splitlines() if line.strip()]
    reason = lines[0] if lines else "unsupported"
    context = next((line.split(":", 1)[1].strip() for line in lines
                    if line.startswith("Developer debug context:")), "")
    hint = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Hint:")),
                "")
    key = (getattr(code, "co_filename", ""), getattr(code, "co_firstlineno", 0), reason)
    if key in _TOLD:
        return
    _TOLD.add(key)
    from planner.torch.piece import PlannerFallback

    said = f" ({context})" if context else ""
    then = f"; Dynamo's hint: {hint}" if hint else ""
    warnings.warn_explicit(f"torch.compile(backend='planner'): Dynamo skipped {where}: "
                           f"{reason}{said}, so it runs eagerly and nothing of it is planned"
                           f"{then}", PlannerFallback, filename="<planner>", lineno=0,
                           module="planner.torch.skipped")
