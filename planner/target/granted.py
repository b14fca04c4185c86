"""The CPUs this process was granted: its affinity mask as the launcher set it.

A data-parallel executor of ranks that share a host confines every thread of its process to
its rank's share of the cores (planner.runtime.distributed.settle). The host this process
runs on is still the whole host: a later plan in the same process (a trainer's next input
shape, a second trainer, the CLI's plan run beside a trainer) is made for the host and shared
among the ranks again (planner.schedule.ranks). So the mask is remembered before the first
narrowing, and `detect` reads the remembered one.

    >>> granted() == (set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None)
    True
"""

from __future__ import annotations

import os

_BEFORE: set[int] | None = None  # the mask before this process narrowed it, once it has


def granted() -> set[int] | None:
    """The CPUs granted to this process (None where the OS has no affinity masks)."""
    if _BEFORE is not None:
        return set(_BEFORE)
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def narrowing() -> None:
    """Called before this process narrows its own mask: remember the granted one (the first
    time only: a second executor's narrowing starts from the first's)."""
    global _BEFORE
    if _BEFORE is None and hasattr(os, "sched_getaffinity"):
        _BEFORE = set(os.sched_getaffinity(0))
