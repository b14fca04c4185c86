"""In-place outputs (OpDef.in_place): fp16-mixed's UnscaleGrads writes each unscaled gradient
over its scaled input's bytes, where nothing reads the scaled value after it. The plan says so
(an alias at the input's offset), the step's peak holds each gradient once, a replay on real
bytes (noise written over every buffer after its last read) gives the reference interpreter's
step, and verify refuses a plan in which the overwritten value still has a reader. CPU plans
(planner.memory.liveness) and GPU plans, under a budget too (planner.memory.budget.materialize).
tests/codegen/test_loss_scale.py runs such a plan (layout="plan") in the CPU executor."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from planner.frontend.autodiff import LOSS_SCALE, Optimizer, make_training_graph
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.validate import check_graph
from planner.ir.graph import Node, Tensor
from planner.memory import MemoryOptions
from planner.memory.liveness import in_place_aliases, view_aliases
from planner.ops import base
from planner.pipeline import PlanOptions, plan
from planner.report.replay import replay
from planner.target import preset
from planner.verify import verify_plan, verify_plan_data
from planner.zoo import build
from tests.memory.conftest import cpu_plan


def fp16_graph():
    return make_training_graph(build("lenet", image=8, batch=4), Optimizer(kind="momentum"),
                               precision="fp16-mixed")


@pytest.fixture(scope="module")
def graph():
    return fp16_graph()


@pytest.fixture(scope="module")
def planned(graph):
    return cpu_plan(graph)


@pytest.fixture(scope="module")
def gpu_planned(graph):
    return plan(graph, preset("k40c-12gb"))


def unscale(g) -> Node:
    (node,) = [n for n in g.nodes if n.op == "UnscaleGrads"]
    return node


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_unscaled_gradients_sit_at_their_inputs_bytes(graph, planned, gpu_planned, backend):
    planned = gpu_planned if backend == "cuda" else planned
    assert planned.backend == backend and verify_plan(planned) == []
    node = unscale(graph)
    buf = {t.name: t for t in planned.tensors}
    grads = list(zip(node.inputs[:-1], node.outputs[:-1], strict=True))
    assert len(grads) == 10   # LeNet's weights and biases
    for scaled, unscaled in grads:
        root = buf[scaled].alias_of or scaled
        assert buf[unscaled].alias_of == root and buf[unscaled].offset == buf[root].offset
    assert not buf[node.outputs[-1]].alias_of   # found_inf: bytes of its own


def live_at(p, op: str) -> int:
    """Device bytes of the buffers owning bytes while `op` runs (first <= its order <= last)."""
    k = next(o.order for o in p.ops if o.name == op)
    return sum(t.bytes for t in p.tensors if t.placement == "device" and not t.alias_of
               and t.first <= k <= t.last)


def without_in_place(monkeypatch) -> None:
    op = base.REGISTRY["UnscaleGrads"]
    monkeypatch.setitem(base.REGISTRY, "UnscaleGrads", dataclasses.replace(op, in_place=None))


def test_the_step_holds_each_gradient_once(graph, planned, monkeypatch):
    """Without the declaration (the op as before) the bytes live while UnscaleGrads runs hold
    the scaled and the unscaled gradients together: exactly the gradients' bytes more."""
    without_in_place(monkeypatch)
    fresh = cpu_plan(graph)
    assert in_place_aliases(graph) == {}
    node = unscale(graph)
    grads = sum(graph.tensor(t).nbytes for t in node.inputs[:-1])
    assert live_at(fresh, node.name) - live_at(planned, node.name) == grads
    # (the per-op bound counts UnscaleGrads' gradients once: it was LeNet's largest op)
    assert planned.summary.memory.per_op_bound_bytes < fresh.summary.memory.per_op_bound_bytes


def test_the_arena_drops_by_most_of_the_gradients(monkeypatch):
    """A small MLP one op at a time: its peak was UnscaleGrads' (every gradient twice); now
    most of the gradients' bytes come off the arena (the peak moves into backward, where the
    gradients accumulate). Not a small ResNet-18 any more: on the toy target its peak is a
    weight gradient's per-thread scratch (oneDNN's GEMM fallback on 1x1 images)."""
    g = make_training_graph(build("mlp", batch=1, hidden=[512, 512, 512], in_features=256,
                                  classes=10), Optimizer(kind="sgd"), precision="fp16-mixed")
    grads = sum(g.tensor(t).nbytes for t in unscale(g).inputs[:-1])
    arena = cpu_plan(g, "uniform").summary.memory.arena_bytes
    without_in_place(monkeypatch)
    before = cpu_plan(g, "uniform").summary.memory.arena_bytes
    assert before - arena >= 0.7 * grads   # measured: 0.80 (ResNet-18 before: 0.9)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_replay_on_the_planned_bytes_is_the_reference_step(graph, planned, gpu_planned,
                                                           backend):
    """A clean step (a loss scale small enough not to overflow float16): the unscaled
    gradients read from their inputs' bytes update the parameters as the interpreter's."""
    assert_replay_is_reference(graph, gpu_planned if backend == "cuda" else planned)


def test_replay_of_a_gpu_plan_under_a_budget():
    """Offloads and recomputes around the in-place UnscaleGrads (planner.memory.budget.materialize).
    Batch 32: at batch 4 and 16 the float16 gradients' reserved workspaces (no zero-workspace
    algorithm rounds them once: planner.costs.convalgo) set the smallest arena, which no
    offload lowers."""
    g = make_training_graph(build("resnet", batch=32, image=64, width=0.125, depth=18,
                                  classes=5), Optimizer(kind="sgd"), precision="fp16-mixed")
    free = plan(g, preset("k40c-12gb")).summary.memory
    budget = free.per_op_bound_bytes + (free.arena_bytes - free.per_op_bound_bytes) * 6 // 10
    p = plan(g, preset("k40c-12gb"),
             options=PlanOptions(memory=MemoryOptions(budget_bytes=budget)))
    m = p.summary.memory
    assert m.arena_bytes <= budget and m.offloaded_tensors + m.recompute_ops > 0
    node = unscale(g)
    assert all(t.alias_of for t in p.tensors if t.name in node.outputs[:-1])
    assert verify_plan(p) == []
    assert_replay_is_reference(g, p)


def assert_replay_is_reference(graph, planned) -> None:
    feeds, state = random_feeds(graph, seed=3), init_params(graph, seed=3)
    state[LOSS_SCALE] = np.array(64.0, np.float32)
    got_out, got_state = replay(planned, feeds, state)
    want_out, want_state = train_step(graph, feeds, state)
    weights = [t.name for t in graph.tensors if t.role == "param" and t.updates is None]
    assert not any(np.array_equal(want_state[w], state[w]) for w in weights)
    assert want_state[LOSS_SCALE] == 64.0   # no overflow: the step was taken
    for name, value in want_out.items():
        assert np.array_equal(got_out[name], value), name
    for name, value in want_state.items():
        assert np.array_equal(got_state[name], value), name


def test_a_scaled_gradient_read_after_the_op_keeps_its_bytes(graph):
    """A later reader of a scaled gradient: that gradient is not overwritten (the others
    still are), and the plan verifies."""
    node = unscale(graph)
    scaled = node.inputs[0]
    extra = Node(name="late/abs", op="Abs", inputs=(scaled,), outputs=("late/abs",))
    g = graph.model_copy(update={
        "tensors": (*graph.tensors, Tensor(name="late/abs", shape=graph.tensor(scaled).shape,
                                           role="activation")),
        "nodes": (*graph.nodes, extra), "outputs": (*graph.outputs, "late/abs")})
    aliases = in_place_aliases(g)
    assert node.outputs[0] not in aliases and node.outputs[1] in aliases
    p = cpu_plan(g)
    assert verify_plan(p) == []
    assert not next(t for t in p.tensors if t.name == node.outputs[0]).alias_of


def test_a_scaled_gradient_read_after_the_step_keeps_its_bytes(graph):
    """A scaled gradient the step returns, itself or through a view of its bytes (Flatten):
    not overwritten."""
    node = unscale(graph)
    kept = graph.model_copy(update={"outputs": (*graph.outputs, node.inputs[1])})
    assert node.outputs[1] not in in_place_aliases(kept)
    scaled = node.inputs[0]   # conv1's weight gradient, OIHW
    flat = Node(name="late/flatten", op="Flatten", inputs=(scaled,), outputs=("late/flat",))
    o, *rest = graph.tensor(scaled).shape
    viewed = check_graph(graph.model_copy(update={
        "tensors": (*graph.tensors, Tensor(name="late/flat", shape=(o, math.prod(rest)),
                                           role="activation")),
        "nodes": (*graph.nodes, flat), "outputs": (*graph.outputs, "late/flat")}))
    assert view_aliases(viewed)["late/flat"] == scaled
    aliases = in_place_aliases(viewed)
    assert node.outputs[0] not in aliases and node.outputs[1] in aliases


def test_verify_refuses_a_reader_of_the_overwritten_gradient(graph, planned):
    """Hostile plan: a parameter's update rewired, in the embedded graph, to read the scaled
    gradient, which the in-place UnscaleGrads overwrote before the update runs."""
    data = json.loads(planned.to_json())
    assert verify_plan_data(data) == []
    node = unscale(graph)
    scaled, unscaled = node.inputs[2], node.outputs[2]
    (update,) = [n for n in data["graph"]["nodes"] if unscaled in n["inputs"]]
    update["inputs"] = [scaled if t == unscaled else t for t in update["inputs"]]
    problems = verify_plan_data(data)
    assert any(f"written in place over {scaled!r} by {node.name!r}" in p
               and repr(update["name"]) in p for p in problems), problems


def test_verify_refuses_an_in_place_alias_the_op_does_not_declare(graph, planned):
    """found_inf (UnscaleGrads' last output) written over a gradient's bytes: no op says so."""
    data = json.loads(planned.to_json())
    node = unscale(graph)
    buf = {t["name"]: t for t in data["tensors"]}
    found, target = buf[node.outputs[-1]], buf[buf[node.outputs[0]]["alias_of"]]
    found["alias_of"], found["offset"] = target["name"], target["offset"]
    assert any(f"buffer {found['name']!r} aliases {target['name']!r}, but the graph does not "
               f"say" in p for p in verify_plan_data(data))
