"""Executors in a fork()ed child: CPU ones run there, CUDA ones are refused, none is freed there.

A child fork()ed from a process that loaded the runtime has only the forking thread: none of the
parent's lane threads. The CPU runtime handles that itself (templates/common/ executor_core.h,
"Fork"): an executor the child inherited runs its ops one at a time on a worker thread the child
makes (a pool of the child's own), each on its planned team with the kernels made in the parent,
so the child's results are the parent's bits; one made in the child runs as in any process; the
forking thread's libgomp pool is let go just before the fork, so its OpenMP teams in the child
(PyTorch's ops too) start a pool of the child's own. What is left here, at the doors:

    arm()                       # the runtime is loaded: watch forks from now on
    track(ex)                   # a package's new executor, kept alive in a child
    refuse_cuda("plan 'p'")     # UserError in a forked child: CUDA does not survive fork()
    lock = ForkLock()           # a threading lock a forked child finds free

Every executor the parent made is kept alive to the child's end (its memory is a copy, freed
with the process): freeing one would join lane threads the child does not have. A Python lock
a parent thread held at the fork would be held forever in the child: the backend's own locks
(executor pools, leases, the lane choice) are ForkLocks, each made anew in the child. An
executor a parent thread was using at the fork (a step on another thread) is refused in the
child in one line (its state there may be half written); the fork start method's children
(multiprocessing, DataLoader workers) otherwise run the planner's models as the parent does.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any

from planner.errors import UserError

# Set in the child of a fork made after arm().
FORKED = False
_ARMED = False
_LIVE: weakref.WeakSet = weakref.WeakSet()
_LOCKS: weakref.WeakSet = weakref.WeakSet()


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


def refuse_cuda(what: str) -> None:
    """UserError naming `what` in a child forked after arm(): a CUDA executor cannot run
    there."""
    if FORKED:
        raise UserError(f"{what}: a CUDA executor cannot run in a forked child process (CUDA "
                        f"does not survive fork()) - use multiprocessing's 'spawn' start method "
                        f"(DataLoader(multiprocessing_context='spawn'))")


class ForkLock:
    """A threading lock (reentrant if asked) made anew in a forked child: a parent thread that
    held it at the fork is not there to let it go. What it guards stays as the fork left it
    (the backend's guard lists whose every change is one step)."""

    def __init__(self, reentrant: bool = False) -> None:
        self._reentrant = reentrant
        self._lock = threading.RLock() if reentrant else threading.Lock()
        _LOCKS.add(self)

    def _after_fork(self) -> None:
        self._lock = threading.RLock() if self._reentrant else threading.Lock()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _fresh_locks() -> None:
    for lock in list(_LOCKS):
        lock._after_fork()


# Whether or not a runtime is loaded yet: the locks exist from the backend's import.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks)
