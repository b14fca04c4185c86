"""Memory budgets of data-parallel plans (plain, ZeRO-1 `--shard-optimizer`, ZeRO-3
`--shard-parameters`): the CPU budget search (planner.memory.cpu_budget) recomputes
activations with the collectives kept on their comm lane and the buckets laid out as
planned. A budget below what liveness alone reaches is met by recomputing (the same budget
with recompute off is refused), the plan verifies, and a ZeRO-3 recompute of a forward op
reads the parameter copy gathered again for backward, after that gather, never the forward
copy freed before. A budget recompute cannot reach is refused in one line naming the
smallest feasible budget, which then plans; recomputing matrix products too
(MemoryOptions.recompute_products) reaches less. (That such plans train as the unbudgeted
plan does on 2 gloo ranks: tests/codegen/test_dp_budget_ranks.py.)"""

from __future__ import annotations

import warnings

import pytest

from planner.errors import InfeasibleBudget
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.memory.options import MemoryOptions
from planner.ops.collective import COLLECTIVE_OPS
from planner.pipeline import PlanOptions, plan
from planner.schedule.parallel import COMM_LANE, DataParallelOptions
from planner.step.collectives import GatherChoice
from planner.target import preset
from planner.verify import verify_plan

GPT = "zoo:gpt?batch=4&seq=32&dim=64&heads=2&layers=2"
KINDS = {"dp": {}, "zero1": {"shard_optimizer": True},
         # the default gather decisions: the budget search alone meets the budget
         "zero3": {"shard_parameters": True, "gathers": GatherChoice()}}


def _plan(kind: str, budget: int | None = None, recompute: str = "cost-aware",
          products: bool = False):
    graph = prepare(GPT, GraphOptions(optimizer=Optimizer(kind="adam")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # a CPU's host store is the same memory: recompute alone
        return plan(graph, preset("xeon-8180"), evaluation=False, options=PlanOptions(
            memory=MemoryOptions(budget_bytes=budget, offload=False, recompute=recompute,
                                 recompute_products=products),
            data_parallel=DataParallelOptions(ranks=2, **KINDS[kind])))


def _smallest(kind: str, budget: int, recompute: str = "cost-aware",
              products: bool = False) -> int:
    with pytest.raises(InfeasibleBudget) as refused:
        _plan(kind, budget, recompute, products)
    return refused.value.smallest_bytes


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_budget_below_liveness_is_met_by_recomputing(kind):
    free = _plan(kind).summary.memory.arena_bytes
    # A budget far below: refused in one line naming the smallest feasible budget ...
    with pytest.raises(InfeasibleBudget, match="the smallest feasible budget is") as refused:
        _plan(kind, free // 4)
    assert "\n" not in str(refused.value)
    budget = refused.value.smallest_bytes
    # ... which recompute alone reaches: without it the same budget is refused
    assert budget < _smallest(kind, budget, recompute="off") and budget < free
    p = _plan(kind, budget)
    m = p.summary.memory
    assert m.arena_bytes <= budget and m.recompute_ops > 0
    assert verify_plan(p) == []
    # the collectives keep their comm lane; every graph node runs once, recomputes besides
    comm = {n.name for n in p.graph.nodes if n.op in COLLECTIVE_OPS}
    assert comm and all(o.stream == COMM_LANE and not o.cpus for o in p.ops if o.name in comm)
    assert all(o.cpus for o in p.ops if o.name not in comm)
    assert {o.name for o in p.ops} >= {n.name for n in p.graph.nodes}


def test_a_zero3_recompute_reads_the_copy_gathered_for_backward():
    budget = _smallest("zero3", 1 << 20)
    p = _plan("zero3", budget)
    order = {o.name: k for k, o in enumerate(p.ops)}
    writer = {t: n.name for n in p.graph.nodes for t in n.outputs}
    buffers = {t.name: t for t in p.tensors}
    recomputes = [m for m in p.memory.ops if m.kind == "recompute"]
    read = [(m, b) for m in recomputes for b in m.inputs
            if buffers[b].tensor.startswith(("gathered/", "regathered/"))]
    assert read, "no recompute of an op reading a parameter"
    for m, b in read:
        tensor = buffers[b].tensor
        node = p.graph.node_map[m.node]
        # the node read the forward copy; its recompute reads the backward one, gathered
        # (its all-gather ordered, and run, before it) and live while it runs
        assert tensor.startswith("regathered/"), (m.name, tensor)
        assert tensor.removeprefix("re") in node.inputs
        gather = writer[tensor]
        assert gather.endswith("/backward") and order[gather] < order[m.name]
        assert buffers[b].first <= order[m.name] <= buffers[b].last
    # the forward copies are not held for them: each is freed by its last forward reader
    forward = {t.name: t for t in p.tensors if t.tensor.startswith("gathered/")}
    for m, b in read:
        copy = forward.get(buffers[b].tensor.removeprefix("re"))
        assert copy is None or copy.last < order[m.name]


def test_verify_refuses_a_recompute_reading_another_parameter():
    p = _plan("zero3", _smallest("zero3", 1 << 20))
    buffers = {t.name: t for t in p.tensors}
    regathered = sorted(t.name for t in p.tensors if t.tensor.startswith("regathered/"))
    m = next(m for m in p.memory.ops if m.kind == "recompute"
             and any(buffers[b].tensor.startswith("regathered/") for b in m.inputs))
    k = next(k for k, b in enumerate(m.inputs) if buffers[b].tensor.startswith("regathered/"))
    other = next(t for t in regathered if t != m.inputs[k])
    wrong = m.model_copy(update={"inputs": (*m.inputs[:k], other, *m.inputs[k + 1:])})
    memory = p.memory.model_copy(update={"ops": tuple(wrong if o is m else o
                                                      for o in p.memory.ops)})
    problems = verify_plan(p.model_copy(update={"memory": memory}))
    assert any(m.name in s and "holds" in s for s in problems), problems


def test_recomputing_matrix_products_reaches_a_smaller_budget():
    """MemoryOptions.recompute_products: below the smallest budget cheap recomputes reach, a
    ZeRO-3 plan recomputes matrix products' outputs too (their weights read from the copies
    gathered for backward), and verifies; without it the plan records nothing new."""
    cheap = _smallest("zero3", 1 << 20)
    assert "recompute_products" not in _plan("zero3").provenance.options["memory"]
    budget = _smallest("zero3", 1 << 20, products=True)
    assert budget < cheap
    p = _plan("zero3", budget, products=True)
    assert p.summary.memory.arena_bytes <= budget < cheap
    recomputed = {m.node for m in p.memory.ops if m.kind == "recompute"}
    assert any(p.graph.node_map[n].op == "MatMul" for n in recomputed), recomputed
    assert p.provenance.options["memory"]["recompute_products"] is True
    assert verify_plan(p) == []
