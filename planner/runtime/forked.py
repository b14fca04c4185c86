"""Executors in a fork()ed child: refused in one line, never run, never freed there.

A child fork()ed from a process that loaded the runtime has none of the parent's lane threads
and a copy of libgomp's thread pool whose threads stayed in the parent: a step there, or a new
executor's first OpenMP team, waits forever, and freeing an inherited executor joins threads the
child does not have. So in such a child every executor call is refused before it runs anything
(here at the doors: a package's Executor(), a compiled graph's call, a trainer's step; and in the
runtime's bindings, refuse_forked, for a call made straight on an executor), and every executor
the parent made is kept alive to the child's end (its memory is a copy, freed with the process).

    arm()                       # the runtime is loaded: watch forks from now on
    track(ex)                   # a package's new executor, kept alive in a child
    refuse("graph g")           # UserError in a forked child, naming what was called

The fork start method's children (multiprocessing, DataLoader workers) fail at their first
call with the message; the spawn start method's are fresh interpreters and run.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any

from planner.errors import UserError

# Set in the child of a fork made after arm().
FORKED = False
_ARMED = False
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _in_child() -> None:
    global FORKED
    FORKED = True
    for ex in list(_LIVE):
        # One reference never given back: not even the interpreter's end frees it (its
        # destructor would join the parent's threads, forever).
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(ex))


def arm() -> None:
    """Watch forks from now on (once per process; the runtime's library is loaded)."""
    global _ARMED
    if not _ARMED and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_in_child)
        _ARMED = True


def track(ex: Any) -> Any:
    """`ex`, a new executor, kept alive in any child forked while it lives."""
    _LIVE.add(ex)
    return ex


def refuse(what: str) -> None:
    """UserError naming `what` in a child forked after arm(); nothing otherwise."""
    if FORKED:
        raise UserError(f"{what}: called in a forked child process; the planner's executors "
                        f"cannot run after fork() (their threads and OpenMP teams stay in the "
                        f"parent) - use multiprocessing's 'spawn' start method "
                        f"(DataLoader(multiprocessing_context='spawn'))")
