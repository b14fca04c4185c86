"""A backend's bucket alignment (BackendTraits.bucket_alignment) is its arena's: ZeRO-1's
buckets lie side by side in the arena, so their members and shards start where the arena
aligns a buffer."""

from __future__ import annotations

from planner.memory.gpu import DEVICE_ALIGNMENT
from planner.memory.options import MemoryOptions
from planner.ops.collective import DEFAULT_ALIGNMENT
from planner.target.backends import BACKEND_TRAITS


def test_each_backend_aligns_buckets_as_its_arena():
    assert BACKEND_TRAITS["cpu"].bucket_alignment == MemoryOptions().alignment
    assert BACKEND_TRAITS["cuda"].bucket_alignment == DEVICE_ALIGNMENT


def test_the_attr_left_out_is_the_cpu_arena_alignment():
    # plans name the alignment only where it is not the default: CPU plans read as before
    assert DEFAULT_ALIGNMENT == BACKEND_TRAITS["cpu"].bucket_alignment
