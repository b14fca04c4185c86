"""Properties over random DAGs and budgets: no plan exceeds its budget, every plan verifies and
computes the reference step on real bytes, and a tighter budget never plans a higher peak."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.costs import CostModel
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.graph.builder import GraphBuilder
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.memory import InfeasibleBudget, MemoryOptions
from planner.memory.gpu import DEVICE_ALIGNMENT
from planner.pipeline import PlanOptions, plan
from planner.report.replay import replay
from planner.target import preset
from planner.verify import verify_plan_data
from planner.verify.memory import verify_memory_data

MODEL = CostModel(preset("k40c-12gb"))


def gpu_plan(graph, model, memory):
    """The pipeline's plan of `graph` on the model's GPU under memory options."""
    return plan(graph, model.target, model.table, PlanOptions(memory=memory))
FAST = ("best-fit-size", "best-fit-breadth", "first-fit-start")
LAYERS = ("linear", "relu", "tanh", "sigmoid", "add", "dropout", "mul")


@st.composite
def random_training_graphs(draw):
    """A random DAG of dense layers with skips (any earlier value may feed a layer), a loss,
    and its training graph (SGD)."""
    batch, width = draw(st.sampled_from([(4, 8), (8, 16), (16, 32)]))
    b = GraphBuilder("random")
    values = [b.input("x", (batch, width))]
    for k in range(draw(st.integers(2, 9))):
        layer = draw(st.sampled_from(LAYERS))
        x = values[draw(st.integers(0, len(values) - 1))]
        if layer == "linear":
            w = b.param(f"w{k}", (width, width), init="glorot")
            y = b.op("MatMul", [x, w], name=f"fc{k}")
        elif layer in ("add", "mul"):
            other = values[draw(st.integers(0, len(values) - 1))]
            y = b.op(layer.capitalize(), [x, other], name=f"{layer}{k}")
        elif layer == "dropout":
            y = b.op("Dropout", [x], {"rate": 0.25, "seed": k}, name=f"drop{k}")
        else:
            y = b.op(layer.capitalize(), [x], name=f"{layer}{k}")
        values.append(y)
    w = b.param("head", (width, 3), init="glorot")
    logits = b.op("MatMul", [values[-1], w], name="logits")
    loss = b.op("SoftmaxCrossEntropy", [logits, b.label("labels", (batch,))], name="loss")
    return make_training_graph(b.build(outputs=[loss]), Optimizer(kind="sgd"))


def plan_or_none(graph, budget: int):
    try:
        return gpu_plan(graph, MODEL, MemoryOptions(budget_bytes=budget, alignment=4,
                                                   heuristics=FAST))
    except InfeasibleBudget:
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_training_graphs(), st.lists(st.floats(0.0, 1.2), min_size=2, max_size=3))
def test_budgets_hold_and_peaks_are_monotone(graph, fractions):
    free = gpu_plan(graph, MODEL, MemoryOptions(alignment=4, heuristics=FAST)).summary.memory
    low, high = free.per_op_bound_bytes, free.liveness_load_bytes
    # Device buffers start at multiples of 256 bytes (what CUDA kernels are promised), which
    # the liveness load does not count: up to 255 bytes per buffer (tensor or op scratch).
    slack = DEVICE_ALIGNMENT * (len(graph.tensors) + len(graph.nodes))
    budgets = sorted({int(low + f * (high - low)) for f in fractions} | {2 * high + slack})
    feeds, state = random_feeds(graph), init_params(graph)
    want_out, want_state = train_step(graph, feeds, state)
    peaks = []
    for budget in budgets:
        plan = plan_or_none(graph, budget)
        if plan is None:
            assert not peaks, "a looser budget failed after a tighter one succeeded"
            continue
        m = plan.summary.memory
        assert m.arena_bytes <= budget
        data = json.loads(plan.to_json())
        assert verify_memory_data(data) == [] and verify_plan_data(data) == []
        out, new = replay(plan, feeds, state)
        assert all(np.array_equal(out[k], want_out[k]) for k in want_out)
        assert all(np.array_equal(new[k], want_state[k]) for k in want_state)
        peaks.append(m.peak_bytes)
    assert peaks == sorted(peaks)
    assert peaks, "twice the liveness load (plus alignment) must be a feasible budget"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_training_graphs(), st.floats(0.0, 1.0))
def test_infeasible_budgets_name_a_budget_that_works(graph, fraction):
    free = gpu_plan(graph, MODEL, MemoryOptions(alignment=4, heuristics=FAST)).summary.memory
    budget = max(1, int(fraction * free.per_op_bound_bytes))
    try:
        plan = gpu_plan(graph, MODEL, MemoryOptions(budget_bytes=budget, alignment=4,
                                                   heuristics=FAST))
    except InfeasibleBudget as e:
        assert e.smallest_bytes > budget
        assert plan_or_none(graph, e.smallest_bytes) is not None
    else:
        assert plan.summary.memory.arena_bytes <= budget
