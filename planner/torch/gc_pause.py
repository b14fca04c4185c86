"""Python's cyclic garbage collector paused while a door plans.

Planning a new graph or shape makes and drops hundreds of thousands of small records (the
import's values, the front end's nodes, the step graph's tensors), each freed by its reference
count. The cyclic collector does not know that: every 700 allocations it scans the young
objects, and every few dozen scans the whole heap, which in a PyTorch process holds torch's
own half a million objects. Measured with gc.callbacks on bench/first_step_loop.py's text
fine-tune (71 lengths, the 2-core VM at load 6-8): 6.2 s of collection in the trainer's run
(2,846 young, 259 middle and 17 full scans, the longest 0.55 s) and 7.8 s in the backend's,
a fifth of each run; per new length, 30-40 of the trainer's 62 ms of main-thread CPU.

So the doors pause it while they plan (PyTorch does the same around its distributed
state_dict: torch.distributed.checkpoint.state_dict._gc_context) and give it back as it was:
what became cyclic garbage meanwhile is collected at the collector's next turn. A user who
disabled it keeps it disabled.

>>> import gc
>>> with gc_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector disabled inside, enabled again after where it was (nested
    pauses: the outermost gives it back); usable as a decorator."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
