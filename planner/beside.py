"""A pure computation run beside the caller, in a forked child process.

A training plan plans two graphs that do not depend on each other: the step's and its
evaluation graph's (planner/evaluation.py, a third of inception_v3's planning time). With a
second core free, the evaluation graph is planned in a child forked once the costs are priced,
while the parent plans the step; its result comes back pickled through a pipe. A fork copies the
whole interpreter, so the child computes exactly what the parent would have: the plan is the same
bytes either way (tests/test_beside.py). The parent computes it itself, the same pure call,
wherever a fork is impossible, unsafe or not worth it, and when the child fails in any way (an
error the computation raises is then raised by the parent's own call, with its traceback):

    no os.fork (Windows), or one usable CPU          nothing to gain
    another Python thread is running                 a fork copies only the calling thread: a
                                                     lock another thread held stays held in the
                                                     child (a user's DataLoader, a logger)
    PLANNER_PLAN_PROCESSES=1 in the environment      one process (a profiler follows only it)
    `worth` is False                                 the caller's estimate: forking and pickling
                                                     cost about 20 ms

The child shares the parent's open files but writes none: it leaves by os._exit, which flushes
no inherited buffer and runs no atexit handler twice. A parent that stops waiting (an error in
its own part) kills the child.

Example:
    >>> with beside(lambda: sum(range(10)), worth=True) as result:
    ...     mine = 2 * 3  # the caller's own work meanwhile
    ...     result() + mine
    51
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

# Set to "1", planning stays in one process.
PROCESSES_ENV = "PLANNER_PLAN_PROCESSES"


def can_fork() -> bool:
    """Whether a child may compute beside this process (module docstring's table)."""
    if not hasattr(os, "fork") or os.environ.get(PROCESSES_ENV, "").strip() == "1":
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cpus or 1) > 1 and threading.active_count() == 1


@contextmanager
def beside(compute: Callable[[], T], worth: bool) -> Iterator[Callable[[], T]]:
    """Within the block, `compute()` runs in a forked child where it can and is `worth` it;
    the callable yielded waits for its result (or computes it, where no child does)."""
    if not (worth and can_fork()):
        yield compute
        return
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, leave without unwinding the parent's stack
        status = 1
        try:
            os.close(read_end)
            payload = pickle.dumps(compute(), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    read = False

    def result() -> T:
        nonlocal read
        # To the end of the pipe: the child closes it once the whole pickle is written, and
        # leaves (reaped when the block ends, off the caller's path). A child that failed or
        # died wrote nothing, or a pickle cut short that does not load.
        with os.fdopen(read_end, "rb") as pipe:
            read = True
            payload = pipe.read()
        if payload:
            try:
                return pickle.loads(payload)
            except Exception:  # noqa: BLE001 - a broken payload: compute it here
                pass
        return compute()

    try:
        yield result
    finally:
        if not read:
            os.kill(pid, signal.SIGKILL)
            os.close(read_end)
        os.waitpid(pid, 0)
