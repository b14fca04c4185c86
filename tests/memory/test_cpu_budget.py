"""CPU plans under a memory budget (planner.memory.cpu_budget): below the liveness arena the
plan adds recomputes and offloads to a host store and keeps the schedule's co-running lanes; what it
states is what the executor needs (tests/codegen/test_memory_exec.py runs them)."""

from __future__ import annotations

import pytest

from planner.costs import CostModel
from planner.errors import InfeasibleBudget
from planner.fit import fit
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.memory.budget.search import State
from planner.memory.cpu_budget import cpu_steps
from planner.memory.options import MemoryOptions
from planner.memory.stash import analyze
from planner.pipeline import PlanOptions, place, plan
from planner.schedule import ScheduleOptions, cpu_schedule
from planner.step.collectives.data_parallel import compute_graph
from planner.target import preset
from planner.verify import verify_plan
from planner.zoo import build

TARGET = preset("xeon-8180")


def cpu_plan(graph, budget=None, **memory):
    return plan(graph, TARGET, options=PlanOptions(
        memory=MemoryOptions(budget_bytes=budget, **memory)))


@pytest.fixture(scope="module")
def alexnet():
    return make_training_graph(build("alexnet", batch=4, image=63, classes=4),
                               Optimizer(kind="sgd"))


def smallest(graph, **memory) -> int:
    with pytest.raises(InfeasibleBudget) as e:
        cpu_plan(graph, 64, **memory)
    return e.value.smallest_bytes


def test_budget_plans_fit_verify_and_keep_the_host_store_apart(alexnet):
    free = cpu_plan(alexnet).summary.memory
    low = smallest(alexnet)
    assert low < free.arena_bytes
    p = cpu_plan(alexnet, low)
    m = p.summary.memory
    assert m.arena_bytes <= low and verify_plan(p) == []
    kinds = {op.kind for op in p.memory.ops}
    assert "offload" in kinds and "recompute" in kinds
    host = [t for t in p.tensors if t.placement == "host"]
    assert host and m.host_bytes == max(t.offset + t.bytes for t in host)
    # The arena holds no host slot: its size is the device buffers' extent.
    device = [t for t in p.tensors if t.placement == "device"]
    assert m.arena_bytes >= max(t.offset + t.bytes for t in device)
    # Every op, added ones too, on CPUs of the target (verify: never two at once on one).
    ops = sorted(p.ops, key=lambda o: o.order)
    assert all(o.cpus for o in ops)
    # A recompute runs its node at the node's thread count (the same kernel, the same bits).
    threads = {o.name: o.threads for o in ops}
    assert all(threads[r.name] == threads[r.node] for r in p.memory.ops if r.kind == "recompute")


def test_budget_plans_keep_the_lanes_co_running(alexnet):
    """The unconstrained plan co-runs ops on its lanes; at the midpoint budget ops still run
    at the same time (ordered by data and by the arena's reuse alone), and the plan verifies:
    never two ops on one CPU at once, every byte shared in order."""
    free = cpu_plan(alexnet).summary
    low = smallest(alexnet)
    mid = cpu_plan(alexnet, (free.memory.per_op_bound_bytes + free.memory.arena_bytes) // 2)
    assert mid.summary.memory.arena_bytes < free.memory.arena_bytes and verify_plan(mid) == []
    assert free.mean_corun > 1.5 and mid.summary.mean_corun > 1.3
    ops = sorted(mid.ops, key=lambda o: o.start)
    assert any(b.start < a.end - 1e-12 for a, b in zip(ops, ops[1:], strict=False))
    # Less memory, more order: the step is no faster than unconstrained, and the smallest
    # budget's plan (with added ops) runs no more ops at once than the midpoint's.
    tight = cpu_plan(alexnet, low)
    assert tight.memory.ops and verify_plan(tight) == []
    assert mid.summary.step_seconds >= free.step_seconds
    assert tight.summary.mean_corun <= mid.summary.mean_corun


def test_a_budget_plan_keeps_its_lanes_unless_one_lane_is_faster(alexnet):
    """Under a budget the arena's reuse orders more of the lanes' ops one after another, each
    still on its lane's few threads; the plan keeps the lanes unless every op on all threads
    one at a time is min_gain shorter (the main strategy by default: issue 89), and a budget
    either of them meets is met (the smallest feasible is the smaller one); a switch says
    why."""
    free = cpu_plan(alexnet).summary
    model = CostModel(TARGET)
    lanes = cpu_schedule(compute_graph(alexnet), model)
    uniform = cpu_schedule(compute_graph(alexnet), model, ScheduleOptions(strategy="uniform"))
    assert lanes.strategy != "uniform" and free.mean_corun > 1.5
    low = smallest(alexnet)
    with pytest.raises(InfeasibleBudget) as e:
        place(alexnet, model, uniform, MemoryOptions(budget_bytes=64))
    low_uniform = e.value.smallest_bytes
    mid = (free.memory.per_op_bound_bytes + free.memory.arena_bytes) // 2
    chosen = {}
    for budget in (low, low_uniform, mid):
        p = cpu_plan(alexnet, budget)
        chosen[budget] = p.summary.strategy
        steps = {}
        for s in (lanes, uniform):
            try:
                m = place(alexnet, model, s, MemoryOptions(budget_bytes=budget))
                steps[s.strategy] = max(o.end for o in m.ops or s.ops)  # re-timed, if ordered
            except InfeasibleBudget as e:
                assert e.smallest_bytes >= low
        keep = steps.get("uniform", float("inf")) >= steps.get(lanes.strategy, float("inf")) \
            * (1 - ScheduleOptions().min_gain)
        assert p.summary.strategy == (lanes.strategy if keep else "uniform")
        assert (p.summary.strategy_switch is None) == keep
        assert p.summary.step_seconds == pytest.approx(steps[p.summary.strategy], rel=1e-9)
    # Here: the midpoint keeps the lanes; at the smallest budget all threads per op meets,
    # they are not min_gain slower; below it, only the lanes' plan fits.
    assert low < low_uniform < mid
    assert chosen == {mid: lanes.strategy, low_uniform: lanes.strategy, low: lanes.strategy}


def test_without_recompute_and_offload_liveness_is_the_floor(alexnet):
    """The floor: the smaller liveness arena of the lanes' schedule and of every op on all
    threads one at a time (fewer tensors live at once)."""
    free = cpu_plan(alexnet).summary.memory
    uniform = cpu_schedule(compute_graph(alexnet), CostModel(TARGET),
                           ScheduleOptions(strategy="uniform"))
    one_at_a_time = place(alexnet, CostModel(TARGET), uniform).summary.arena_bytes
    assert one_at_a_time < free.arena_bytes
    assert smallest(alexnet, offload=False, recompute="off") == one_at_a_time
    assert smallest(alexnet, offload=False) <= free.arena_bytes
    only = cpu_plan(alexnet, smallest(alexnet, offload=False), offload=False)
    assert {op.kind for op in only.memory.ops} <= {"recompute"}


def test_a_smaller_budget_never_plans_a_larger_arena(alexnet):
    free = cpu_plan(alexnet).summary.memory
    low = smallest(alexnet)
    arenas = [cpu_plan(alexnet, low + (free.arena_bytes - low) * k // 4).summary.memory
              .arena_bytes for k in range(5)]
    assert arenas == sorted(arenas)


def test_fit_on_a_cpu_target():
    r = fit("zoo:lenet?image=16", TARGET, budget_bytes=2 << 20, vary="batch",
            optimizer="sgd", multiple=8)
    assert r.value > 0 and r.peak_bytes <= 2 << 20
    g = make_training_graph(build("lenet", image=16, batch=r.value + 8), Optimizer(kind="sgd"))
    with pytest.raises(InfeasibleBudget):
        cpu_plan(g, 2 << 20)


def test_a_cpu_offload_costs_both_copies_in_full(alexnet):
    """On a CPU a copy to the host store takes a core: nothing runs beside it, so the budget
    search charges an offload the full time of its two copies, where on a GPU a copy engine
    hides what the compute covers (there an offload costs only the uncovered part)."""
    s = cpu_schedule(alexnet, CostModel(TARGET), ScheduleOptions(strategy="paper"))
    stash = analyze(cpu_steps(alexnet, s), "cost-aware")
    cpu = State(stash, TARGET.cpu.core_bandwidth, overlapped=False)
    gpu = State(stash, TARGET.cpu.core_bandwidth)
    moves = [m for m in cpu.moves_at(cpu.peak_key()) if m.kind == "offload"]
    assert moves
    for m in moves:
        assert m.cost == pytest.approx(2 * cpu.copy_seconds(m.tensor), rel=1e-12)
    hidden = {m.tensor: m.cost for m in gpu.moves_at(gpu.peak_key()) if m.kind == "offload"}
    assert all(hidden[m.tensor] < m.cost for m in moves)
