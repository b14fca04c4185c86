"""cpu_memory on co-running CPU plans: buffers placed, verify passes, LOAD <= arena, and
budget errors that name the smallest feasible budget."""

from __future__ import annotations

import json

import pytest

from planner.costs import CostModel
from planner.memory import InfeasibleBudget, MemoryOptions, cpu_memory
from planner.ops import TensorType, get_op
from planner.plan import Plan
from planner.schedule import cpu_schedule
from planner.verify import verify_plan_data
from planner.verify.memory import verify_memory_data
from tests.memory.conftest import SMALL, cpu_plan, replan, toy_target, training


@pytest.mark.parametrize("name", sorted(SMALL))
def test_plans_verify_and_arena_is_close_to_load(small_plans, name):
    planned = replan(small_plans[name], MemoryOptions(alignment=1))
    data = json.loads(planned.to_json())
    assert verify_memory_data(data) == []
    assert verify_plan_data(data) == []  # reuse edges hold in the predicted times
    m = planned.summary.memory
    assert m.naive_bytes > m.load_bytes > 0
    assert m.load_bytes <= m.arena_bytes <= 1.02 * m.load_bytes
    assert m.fragmentation == pytest.approx(m.arena_bytes / m.load_bytes - 1)
    assert m.per_op_bound_bytes <= m.load_bytes
    held = {t.tensor for t in planned.tensors if t.tensor}
    assert held == {t.name for t in planned.graph.tensors}
    # Every op whose kernel needs scratch (its rule, at its planned threads, gives bytes; the
    # widening rule of a float32 op gives none) has an area of its own, live while it alone
    # runs.
    scratch = {t.writer: t for t in planned.tensors if not t.tensor}
    g = planned.graph
    threads = {op.name: op.threads for op in planned.ops}

    def needs_scratch(n) -> bool:
        rule = get_op(n.op).scratch
        types = [[TensorType(g.tensor(t).shape, g.tensor(t).dtype) for t in ts]
                 for ts in (n.inputs, n.outputs)]
        return rule is not None and rule(*types, n.attrs, threads[n.name]) > 0

    assert set(scratch) == {n.name for n in g.nodes if needs_scratch(n)}
    for op, t in scratch.items():
        assert t.name == f"{op}@scratch" and t.readers == (op,) and t.first == t.last


def test_round_trip_and_determinism(small_plans):
    a = replan(small_plans["lenet"])
    assert Plan.from_json(a.to_json()) == a
    assert replan(small_plans["lenet"]).to_json() == a.to_json()


def test_reuse_edges_are_added_only_where_needed(small_plans):
    graph = small_plans["inception_v3"].graph
    model = CostModel(toy_target())
    schedule = cpu_schedule(graph, model)
    decision = cpu_memory(graph, schedule, model)
    old = {(e.before, e.after) for e in schedule.edges}
    new = {(e.before, e.after) for e in decision.edges} - old
    assert len(new) == decision.summary.reuse_edges > 0
    # A serial plan orders everything already: no edge is needed.
    serial = cpu_plan(training("lenet", batch=4), strategy="uniform")
    assert replan(serial).summary.memory.reuse_edges == 0


def test_alignment_rounds_offsets(small_plans):
    planned = replan(small_plans["lenet"], MemoryOptions(alignment=256))
    assert all(t.offset % 256 == 0 for t in planned.tensors)


def test_budget_below_the_arena_names_the_smallest():
    # Batch 16: at batch 4 the weight gradients' per-thread scratch (16 threads) is the arena's
    # peak alone, so no recompute or offload could go below it.
    plan = cpu_plan(training("lenet", "momentum", batch=16))
    arena = replan(plan).summary.memory.arena_bytes
    assert replan(plan, MemoryOptions(budget_bytes=arena)).summary.memory \
        .budget_bytes == arena
    # Without recompute or offload, liveness alone is what a CPU plan has: the lanes' or,
    # smaller, every op on all threads one at a time.
    floor = min(arena, cpu_plan(plan.graph, "uniform").summary.memory.arena_bytes)
    with pytest.raises(InfeasibleBudget, match=f"smallest feasible budget is {floor} bytes") \
            as e:
        replan(plan, MemoryOptions(budget_bytes=floor - 1, offload=False, recompute="off"))
    assert e.value.smallest_bytes == floor
    # With them, it runs one op at a time and recomputes or offloads to get under the budget.
    tight = replan(plan, MemoryOptions(budget_bytes=arena - 1)).summary.memory
    assert tight.arena_bytes <= arena - 1
