"""No cyclic garbage collection while planning.

Planning a large graph makes millions of small container objects (records, dicts, lists) and
keeps most of them: the cyclic collector then traverses the young heap again and again, a
quarter of planning's time on ResNet-1001 at the default thresholds, and still 0.2 s (11 ms on
inception_v3 b16) at a million allocations between young collections. Planning makes no cyclic
garbage: after planning inception_v3 and ResNet-1001 with the collector off, a full collection
finds no unreachable object (tests/test_collection.py keeps it so). So the collector is off
while planning, and reference counting frees everything at once; on exit it is on again if it
was.

The torch doors (planner/torch/training.py, piece.py) hold it off for the whole of a new
graph's or shape's planning, the trace and the import included (torch's distributed
state_dict does the same): in a PyTorch process the heap holds torch's ~430,000 objects, and a
text encoder's construction and 26 new lengths made 85-135 collections taking 1.0-1.2 s, 35
taking 0.26-0.45 s with it off (gc.callbacks; 30-40 of a new length's 62 ms of main-thread
CPU had been the collector's).

Example:
    >>> import gc
    >>> with collector_off():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_off() -> Iterator[None]:
    """Within the block, no cyclic collection runs; on exit the collector is as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
