"""A GPU budget holds the arena and the library handles of each stream that runs kernels (the
target's stream_library_bytes): the arena is planned to the rest, and the smallest feasible
budget named by InfeasibleBudget counts them. The streams are counted here from the plan's
ops, not by the planner's own count."""

from __future__ import annotations

import pytest

from planner.memory import InfeasibleBudget, MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.schedule.streams import is_compute
from planner.target import preset
from tests.memory.conftest import training

FAST = ("best-fit-size", "best-fit-breadth", "first-fit-start")
PER_STREAM = 3 * 2**20  # a handle pair's bytes, larger than the arena's gaps here


def with_libraries(per_stream: int | None):
    t = preset("k40c-12gb")
    return t.model_copy(update={"gpus": (t.gpus[0].model_copy(
        update={"stream_library_bytes": per_stream}),)})


def gpu_plan(graph, target, budget, strategy="uniform"):
    return plan(graph, target, options=PlanOptions(
        memory=MemoryOptions(budget_bytes=budget, alignment=4, heuristics=FAST),
        schedule=ScheduleOptions(strategy=strategy)))


def smallest(graph, target, strategy="uniform") -> int:
    with pytest.raises(InfeasibleBudget) as e:
        gpu_plan(graph, target, 1, strategy)
    return e.value.smallest_bytes


def kernel_streams(p) -> int:
    return len({o.stream for o in p.ops if is_compute(o.stream) or o.stream == "comm"})


@pytest.fixture(scope="module")
def alexnet():
    return training("alexnet", "momentum", batch=16, image=63, width=0.125, classes=4)


def test_the_smallest_budget_counts_each_kernel_streams_handles(alexnet):
    bare = smallest(alexnet, with_libraries(None))
    target = with_libraries(PER_STREAM)
    low = smallest(alexnet, target)
    p = gpu_plan(alexnet, target, low)
    assert kernel_streams(p) == 1 and low == bare + PER_STREAM
    assert p.summary.memory.arena_bytes + PER_STREAM <= low
    with pytest.raises(InfeasibleBudget, match=r"library handles .*stream_library_bytes"):
        gpu_plan(alexnet, target, low - 1)


def test_a_budget_below_the_handles_leaves_no_arena(alexnet):
    with pytest.raises(InfeasibleBudget, match="is infeasible") as e:
        gpu_plan(alexnet, with_libraries(PER_STREAM), PER_STREAM // 2)
    assert e.value.smallest_bytes > PER_STREAM


def test_co_running_streams_each_count(alexnet):
    """The optimized schedule co-runs kernels on several compute streams: each holds a pair."""
    free = gpu_plan(alexnet, with_libraries(None), None, "optimized")
    k = kernel_streams(free)
    assert k > 1
    budget = free.summary.memory.arena_bytes + k * PER_STREAM
    p = gpu_plan(alexnet, with_libraries(PER_STREAM), budget, "optimized")
    assert kernel_streams(p) == k
    assert p.summary.memory.arena_bytes + k * PER_STREAM <= budget
    # Handles that cost more than the whole arena: the plan keeps fewer streams or a smaller
    # arena, whichever it chose, inside the same budget.
    dear = PER_STREAM + free.summary.memory.arena_bytes // k
    q = gpu_plan(alexnet, with_libraries(dear), budget, "optimized")
    assert q.summary.memory.arena_bytes + kernel_streams(q) * dear <= budget


def test_unset_counts_nothing_and_stays_out_of_the_json():
    t = preset("k40c-12gb")
    assert t.gpus[0].stream_library_bytes is None and t.gpus[0].library_bytes(4) == 0
    assert "stream_library_bytes" not in t.to_json()
    assert '"stream_library_bytes": 5' in with_libraries(5).to_json().replace(":5", ": 5")
