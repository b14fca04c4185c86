"""planner.limits: a target's memory is its backend's, whatever else the target lists."""

import pytest

from planner.pipeline import plan
from planner.target import preset
from planner.zoo import build

MLP = build("mlp", batch=64, hidden=[256], in_features=256, classes=10)


def cpu_with_gpu(host_bytes: int):
    """xeon-8180 with `host_bytes` of memory and an H100 listed: still a CPU target."""
    h100 = preset("h100-80gb").gpus[0]
    return preset("xeon-8180").model_copy(update={"host_memory_bytes": host_bytes,
                                                  "gpus": (h100,)})


def test_a_cpu_target_listing_a_gpu_is_held_to_host_memory():
    arena = plan(MLP, preset("xeon-8180")).summary.memory.arena_bytes
    target = cpu_with_gpu(arena // 2)  # above its largest node, below its arena
    assert target.backend == "cpu" and target.gpus[0].memory_bytes > 10 * arena
    with pytest.raises(ValueError, match=f"needs a {arena}-byte arena, more than the "
                                         f"{arena // 2} bytes"):
        plan(MLP, target)


def test_a_cpu_target_listing_a_gpu_refuses_a_node_beyond_host_memory():
    target = cpu_with_gpu(1000)
    with pytest.raises(ValueError, match="more than the 1000 bytes of memory"):
        plan(MLP, target)


def test_a_gpu_target_is_held_to_the_gpus_memory():
    target = preset("k40c-12gb")
    big = build("mlp", batch=2**20, hidden=[4096], in_features=4096, classes=10)
    with pytest.raises(ValueError, match=f"more than the {target.gpus[0].memory_bytes} bytes"):
        plan(big, target)
