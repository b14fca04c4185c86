"""CPU plans under a memory budget run: the recompute and transfer ops memory planning adds are
rendered and run by the CPU executor like graph nodes, on the plan's offsets, with the host
store a block of its own; the step matches the unconstrained plan's bit for bit (uniform
plans: every op, and every recompute of it, at the same thread count) and the reference."""

from __future__ import annotations

import json
import resource

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.errors import InfeasibleBudget, PlanError
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, train_step, widened
from planner.graph.optimizer import Optimizer
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.plan import Plan
from planner.schedule import ScheduleOptions
from planner.verify import verify_plan
from planner.zoo import build as zoo
from tests.codegen.budget_cases import graph_of, host, run_steps
from tests.codegen.helpers import rel_error, start_state
from tests.codegen.zoo_cases import END_TO_END, MODELS, SLOW, allowed

# Models whose smallest budget needs recompute or transfers at these sizes (on the others,
# running one op at a time with updates moved up reaches it alone). Not lenet and alexnet
# since their convolutions' scratch is planned as oneDNN books it: a weight gradient's
# scratch is then their peak, which no recompute lowers.
ADDS_OPS = {"resnet", "bert", "gpt"}


def budget_plan(graph, budget: int | None) -> Plan:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, host(), options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform"),
            memory=MemoryOptions(budget_bytes=budget)))


def smallest_feasible(graph) -> int:
    try:
        budget_plan(graph, 64)
    except InfeasibleBudget as e:
        return e.smallest_bytes
    raise AssertionError("64 bytes fit")


# Every zoo model at the zoo test's small size; the larger ones `slow` (2-core CI).
@pytest.mark.parametrize("model", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW
                                   else pytest.param(m, marks=pytest.mark.ci_sample)
                                   for m in MODELS])
def test_budget_plans_match_unconstrained_bit_for_bit_and_reference(model, tmp_path):
    """At the budget halfway between the per-op bound and the unconstrained arena, and at the
    smallest feasible one: the step equals the unconstrained plan's bit for bit (uniform plans:
    a recompute reruns its node's kernel at the same thread count) and the float64 reference
    as the zoo test holds it; the executor holds exactly the plan's arena and host store."""
    graph = make_training_graph(zoo(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1))
    free = budget_plan(graph, None)
    m = free.summary.memory
    small = smallest_feasible(graph)
    mid = (m.per_op_bound_bytes + m.arena_bytes) // 2
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    single, single_state = train_step(graph, feeds, state)
    exact, exact_state = train_step(widened(graph), feeds, state)
    ex0, (out0,) = run_steps(free, tmp_path / "free", state, feeds)
    params0 = ex0.params()
    added = set()
    for label, budget in (("mid", max(mid, small)), ("small", small)):
        p = budget_plan(graph, budget)
        assert p.summary.memory.arena_bytes <= budget
        added |= {op.kind for op in p.memory.ops}
        ex, (out,) = run_steps(p, tmp_path / label, state, feeds)
        assert np.array_equal(out["loss"], out0["loss"]), label
        got = ex.params()
        assert [k for k in params0 if not np.array_equal(got[k], params0[k])] == [], label
        assert rel_error(out["loss"], exact["loss"]) < allowed(single["loss"], exact["loss"])
        stats = ex.stats()
        # Measured = planned: the arena and the host store are the plan's sizes.
        assert stats["arena_bytes"] == p.summary.memory.arena_bytes
        assert stats["host_store_bytes"] == p.summary.memory.host_bytes
        assert stats["held_bytes"] == (stats["arena_bytes"] + stats["host_store_bytes"]
                                       + stats["unplanned_scratch_bytes"])
    if model in ADDS_OPS:
        assert added, "the smallest budget adds recompute or transfer ops"
    if model in END_TO_END:
        off = [k for k in exact_state if k in params0 and rel_error(params0[k], exact_state[k])
               >= allowed(single_state[k], exact_state[k])]
        assert off == []


def test_smallest_budget_plan_adds_ops_that_run(tmp_path):
    graph = graph_of("alexnet")
    p = budget_plan(graph, smallest_feasible(graph))
    kinds = {m.kind for m in p.memory.ops}
    assert kinds & {"recompute", "offload"}, kinds
    ex, _ = run_steps(p, tmp_path / "small", start_state(graph), random_feeds(graph, seed=2))
    calls = {o["name"]: o["calls"] for o in ex.stats()["ops"]}
    assert all(calls[m.name] == 1 for m in p.memory.ops)


def test_co_running_budget_plan_runs_and_matches_the_reference(tmp_path):
    """The schedule's lanes kept under a budget (planner.memory.cpu_budget): an LSTM whose plan
    co-runs ops on two lanes, at its smallest budget, still co-runs, verifies and trains as the
    reference does."""
    graph = make_training_graph(zoo("lstm", **MODELS["lstm"]), Optimizer(kind="sgd", lr=0.1))

    def planned(budget):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return plan(graph, host(), options=PlanOptions(
                schedule=ScheduleOptions(strategy="optimized"),
                memory=MemoryOptions(budget_bytes=budget)))

    free = planned(None)
    if len({o.lane for o in free.ops}) < 2:
        pytest.skip("this host's plan does not co-run ops")
    with pytest.raises(InfeasibleBudget) as e:
        planned(64)
    p = planned(e.value.smallest_bytes)
    assert p.summary.memory.arena_bytes < free.summary.memory.arena_bytes
    assert p.summary.mean_corun > 1.0 and verify_plan(p) == []
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    single, single_state = train_step(graph, feeds, state)
    exact, exact_state = train_step(widened(graph), feeds, state)
    ex, (out,) = run_steps(p, tmp_path / "lanes", state, feeds)
    assert rel_error(out["loss"], exact["loss"]) < allowed(single["loss"], exact["loss"])
    got = ex.params()
    off = [k for k in exact_state if k in got and rel_error(got[k], exact_state[k])
           >= allowed(single_state[k], exact_state[k])]
    assert off == []


def test_a_step_allocates_nothing(tmp_path):
    graph = graph_of("alexnet")
    p = budget_plan(graph, smallest_feasible(graph))
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    ex, _ = run_steps(p, tmp_path / "rss", state, feeds, steps=3)
    # The plan's schedule throughout: a variant's kernels are made (allocated) at its first run.
    ex.set_variant("main")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    for _ in range(20):
        ex.step(feeds)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown <= 8, f"{grown} KiB over 20 steps"


# ---- hostile plans: refused by verify and by build, one line naming the op ------------------

def _data(p: Plan) -> dict:
    return json.loads(p.to_json())


def _hostile(p: Plan, edit) -> Plan:
    data = _data(p)
    edit(data)
    return Plan.model_validate(data)


@pytest.fixture(scope="module")
def offload_plan():
    graph = graph_of("lenet")
    p = budget_plan(graph, smallest_feasible(graph))
    assert any(m.kind == "offload" for m in p.memory.ops)
    return p


def _first(data, kind):
    return next(m for m in data["memory"]["ops"] if m["kind"] == kind)


def _missing_tensor(data):
    _first(data, "offload")["inputs"] = ["no-such-buffer"]


def _small_slot(data):
    m = _first(data, "offload")
    slot = next(t for t in data["tensors"] if t["name"] == m["outputs"][0])
    slot["bytes"] = 4


def _freed_input(data):
    m = _first(data, "prefetch")
    src = next(t for t in data["tensors"] if t["name"] == m["inputs"][0])
    src["readers"] = []
    src["last"] = src["first"]


@pytest.mark.parametrize("edit,words", [
    (_missing_tensor, "which the plan does not have"),
    (_small_slot, "a slot of 4 bytes"),
    (_freed_input, "not live when it runs"),
])
def test_hostile_added_ops_are_refused_naming_the_op(offload_plan, edit, words, tmp_path):
    bad = _hostile(offload_plan, edit)
    problems = verify_plan(bad)
    assert any(words in q and "added op '" in q for q in problems), problems
    with pytest.raises(PlanError, match="added op '") as e:
        render(bad, tmp_path / "bad")
    assert "\n" not in str(e.value)


def test_a_host_slot_outside_the_host_store_is_refused_at_load(offload_plan, tmp_path):
    """The loader holds every copy to its own block: a schedule edited to shrink the host
    store below its slots is refused, naming the slot."""
    import re

    tree = render(offload_plan, tmp_path / "shrunk")
    path = tree.dir / "schedule.cpp"
    src = path.read_text()
    m = re.search(r"\n    \d+, (?P<v>\d+),\n    kPlan", src)
    assert int(m.group("v")) == offload_plan.summary.memory.host_bytes > 0
    path.write_text(src[:m.start("v")] + "0" + src[m.end("v"):])
    module = load(build(tree).dir)
    with pytest.raises(RuntimeError, match=r"tensor '.*@host': bytes \[\d+, \+\d+\) lie "
                                           r"outside the 0-byte host store"):
        module.Executor()
