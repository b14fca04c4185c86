"""GPU stream plans under budgets: sound (verify), correct (replayed on real bytes against the
reference interpreter), within budget, monotone in the budget, and clear when infeasible."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.costs import CostModel, graph_signatures
from planner.costs.convalgo import conv_algorithms
from planner.memory import InfeasibleBudget, MemoryOptions
from planner.ops import get_op
from planner.pipeline import PlanOptions, place, plan
from planner.schedule import ScheduleOptions, stream_schedule
from planner.target import preset
from planner.verify import verify_plan_data
from planner.verify.memory import verify_memory_data
from tests.memory.conftest import training
from tests.memory.replay_check import same_step

FAST = ("best-fit-size", "best-fit-breadth", "first-fit-start")
MODEL = CostModel(preset("k40c-12gb"))


def gpu_plan(graph, model, memory, strategy="uniform"):
    """The pipeline's plan of `graph` on the model's GPU under memory options: one compute
    stream unless asked (co-running plans under budgets: tests/schedule/test_gpu_streams.py;
    each would plan memory twice, for the guard)."""
    return plan(graph, model.target, model.table, PlanOptions(
        memory=memory, schedule=ScheduleOptions(strategy=strategy)))


def options(budget=None, **kw) -> MemoryOptions:
    return MemoryOptions(budget_bytes=budget, alignment=4, heuristics=FAST, **kw)


def smallest(graph, **kw) -> int:
    with pytest.raises(InfeasibleBudget) as e:
        gpu_plan(graph, MODEL, options(1, **kw))
    return e.value.smallest_bytes


@pytest.fixture(scope="module")
def alexnet():
    return training("alexnet", "momentum", batch=16, image=63, width=0.125, classes=4)


@pytest.fixture(scope="module")
def resnet():
    return training("resnet", "momentum", batch=4, image=16, width=0.25, depth=18, classes=4)


def sound(plan) -> bool:
    data = json.loads(plan.to_json())
    return verify_memory_data(data) == [] and verify_plan_data(data) == []


def test_unbounded_plan(alexnet):
    p = gpu_plan(alexnet, MODEL, options())
    m = p.summary.memory
    assert p.target.streams == ("compute", "d2h", "h2d")
    assert sound(p) and same_step(p, alexnet)
    assert m.naive_bytes > m.liveness_load_bytes
    assert m.arena_bytes <= 1.02 * m.load_bytes
    # Without a budget every convolution gets its fastest algorithm.
    sigs = graph_signatures(alexnet)
    gpu = MODEL.target.gpus[0]
    assert p.memory.convs
    for c in p.memory.convs:
        assert c.seconds == min(a.seconds for a in conv_algorithms(sigs[c.node], gpu))
    assert p.summary.step_seconds >= p.summary.lower_bound_seconds * (1 - 1e-12)  # rounding


@pytest.mark.parametrize("strategy", ["cost-aware", "memory-centric", "speed-centric"])
def test_budgets_from_tight_to_loose(resnet, strategy):
    low = smallest(resnet, recompute=strategy)
    high = gpu_plan(resnet, MODEL, options()).summary.memory.liveness_load_bytes
    peaks = []
    for budget in np.linspace(low, high, 4).astype(int):
        p = gpu_plan(resnet, MODEL, options(int(budget), recompute=strategy))
        m = p.summary.memory
        assert m.arena_bytes <= budget and m.budget_bytes == budget
        assert sound(p) and same_step(p, resnet)
        peaks.append(m.peak_bytes)
    assert peaks == sorted(peaks)  # a tighter budget never plans a higher peak
    tight = gpu_plan(resnet, MODEL, options(low, recompute=strategy)).summary.memory
    assert tight.recompute_ops > 0 and tight.offloaded_tensors > 0
    # Every decision is an op whose time shows in the step: more ops, a longer step.
    assert tight.recompute_seconds > 0 and tight.transfer_bytes > 0


def test_memory_centric_recomputes_more(resnet):
    low = max(smallest(resnet, recompute="memory-centric"),
              smallest(resnet, recompute="speed-centric"))
    mem = gpu_plan(resnet, MODEL, options(low, recompute="memory-centric")).summary.memory
    speed = gpu_plan(resnet, MODEL, options(low, recompute="speed-centric")).summary.memory
    assert mem.recompute_ops >= speed.recompute_ops > 0


def test_batchnorm_recompute_reads_saved_statistics(resnet):
    p = gpu_plan(resnet, MODEL, options(smallest(resnet)))
    bn = [m for m in p.memory.ops if m.kind == "recompute"
          and resnet.node_map[m.node].op == "BatchNorm"]
    assert bn
    for m in bn:
        node = resnet.node_map[m.node]
        held = {t.name: t.tensor for t in p.tensors}
        assert [held[b] for b in m.inputs[3:]] == list(node.outputs[3:])
        # Its running statistics go to scratch, never over the state.
        assert all(held[b] != node.inputs[k] for b, k in zip(m.outputs[1:3], (3, 4),
                                                               strict=True))


def test_offload_and_recompute_switches(alexnet):
    low = smallest(alexnet)
    assert smallest(alexnet, offload=False) >= low
    assert smallest(alexnet, recompute="off") >= low
    only = gpu_plan(alexnet, MODEL, options(smallest(alexnet, recompute="off"),
                                            recompute="off")).summary.memory
    assert only.recompute_ops == 0


def test_workspaces_follow_free_memory(alexnet):
    loose = gpu_plan(alexnet, MODEL, options(10**10))
    none = gpu_plan(alexnet, MODEL, options(10**10, workspaces=False))
    assert any(c.workspace_bytes for c in loose.memory.convs)
    assert not any(c.workspace_bytes for c in none.memory.convs)
    assert loose.summary.step_seconds < none.summary.step_seconds
    workspaces = [t for t in loose.tensors if t.name.endswith("@workspace")]
    assert workspaces and all(t.first == t.last for t in workspaces)


@pytest.mark.parametrize("budget", [None, 10**10])
def test_every_device_buffer_is_256_byte_aligned(alexnet, budget):
    """cuDNN workspaces and the CUDA kernels' scratch are promised 256-byte-aligned bytes
    (templates/cuda/runtime/kernel.h), whatever alignment the options ask for (4 here)."""
    p = gpu_plan(alexnet, MODEL, options(budget))
    device = [t for t in p.tensors if t.placement == "device"]
    assert any(t.name.endswith("@workspace") for t in device)
    assert [t.name for t in device if t.offset % 256] == []


def test_own_layout_aligns_scratch_areas_to_256_bytes(alexnet):
    from codegen.layout import own_layout

    lay = own_layout(alexnet, gpu_plan(alexnet, MODEL, options(10**10)).tensors)
    assert lay.scratch and [op for op, (o, _) in lay.scratch.items() if o % 256] == []


def test_infeasible_budget_names_the_smallest(alexnet):
    low = smallest(alexnet)
    with pytest.raises(InfeasibleBudget, match=f"smallest feasible budget is {low} bytes"):
        gpu_plan(alexnet, MODEL, options(low - 1))
    assert gpu_plan(alexnet, MODEL, options(low)).summary.memory.arena_bytes <= low


def test_gpu_memory_keeps_the_stream_schedules_order(alexnet):
    schedule = stream_schedule(alexnet, MODEL)
    free = place(alexnet, MODEL, schedule, options())
    budget = free.summary.liveness_load_bytes * 9 // 10
    tight = place(alexnet, MODEL, schedule, options(budget))
    assert tight.summary.arena_bytes <= budget and tight.inserted
    nodes = [o.name for o in tight.ops if o.name in alexnet.node_map]
    assert nodes == [o.name for o in schedule.ops]


def test_gpu_plans_name_their_backend_and_streams(alexnet):
    p = gpu_plan(alexnet, MODEL, options(smallest(alexnet)), "optimized")
    assert p.backend == "cuda" and p.target.core_of == ()
    assert all(not o.cpus and o.stream in p.target.streams for o in p.ops)
    # The copy streams, then the compute streams co-running kernels use besides `compute`.
    assert p.target.streams == ("compute", "d2h", "h2d", "compute1", "compute2", "compute3")
    assert {o.stream for o in p.ops} >= {"compute", "compute1", "d2h", "h2d"}
    with pytest.raises(ValueError, match="scheduling options .* are for CPU targets"):
        plan(alexnet, MODEL.target, options=PlanOptions(
            schedule=ScheduleOptions(strategy="paper")))
    # Strategy uniform: one compute stream.
    one = plan(alexnet, MODEL.target, options=PlanOptions(
        schedule=ScheduleOptions(strategy="uniform"), memory=options(smallest(alexnet))))
    assert {o.stream for o in one.ops} == {"compute", "d2h", "h2d"}
    assert one.target.streams == ("compute", "d2h", "h2d")


def test_plans_are_deterministic_and_round_trip(alexnet):
    from planner.plan import Plan

    budget = smallest(alexnet)
    a = gpu_plan(alexnet, MODEL, options(budget))
    assert a.to_json() == gpu_plan(alexnet, MODEL, options(budget)).to_json()
    assert Plan.from_json(a.to_json()) == a


def test_an_asymmetric_pad_convolutions_padded_copy_is_planned_with_its_workspace():
    """The CUDA kernel copies the image into an explicitly padded buffer (cuDNN takes symmetric
    pads only): OpDef.gpu_scratch, planned in the convolution's workspace area, so that the
    kernel gets no block outside the arena at load. 2 x 3 x (7+1) x (7+1) floats = 1536 bytes."""
    from planner.ir.graph import Graph, Node, Tensor

    def conv_graph(pads):
        side = 7 + pads[0] + pads[2] - 1  # a 2 x 2 kernel, stride 1
        return Graph(name="c", tensors=(Tensor(name="x", shape=(2, 3, 7, 7), role="input"),
                                        Tensor(name="w", shape=(4, 3, 2, 2), role="param"),
                                        Tensor(name="y", shape=(2, 4, side, side))),
                     nodes=(Node(name="conv", op="Conv2D", inputs=("x", "w"), outputs=("y",),
                                 attrs={"pads": pads}),), outputs=("y",), kind="inference")

    def workspace(pads, **kw):
        p = plan(conv_graph(pads), preset("h100-80gb"),
                 options=PlanOptions(memory=MemoryOptions(**kw)))
        (choice,) = p.memory.convs
        area = [t.bytes for t in p.tensors if t.name == "conv@workspace"]
        return choice.workspace_bytes, area

    plain, none = workspace([0, 0, 0, 0], workspaces=False)  # symmetric: cuDNN pads itself
    padded, area = workspace([0, 0, 1, 1], workspaces=False)
    assert (plain, none, padded, area) == (0, [], 1536, [1536])
    fastest, area = workspace([0, 0, 1, 1])
    assert fastest >= 1536 and area == [fastest]


@pytest.mark.parametrize("model", ["lenet", "gpt"])  # a loss's partials; LayerNormGrad's too
def test_kernel_scratch_is_planned_for_every_op_that_needs_it(model):
    """The CUDA kernels' temporaries (OpDef.gpu_scratch: loss partial sums, LayerNormGrad's
    column partials, PReluGrad's contributions) are plan tensors with the op's lifetime, not
    blocks the executor allocates at load outside the arena and the budget."""
    from planner.costs import graph_signatures
    from planner.costs.convalgo import kernel_scratch
    from tests.codegen.zoo_cases import MODELS

    graph = training(model, "sgd", **MODELS[model])
    sigs = graph_signatures(graph)
    need = {n.name: kernel_scratch(sigs[n.name]) for n in graph.nodes
            if not get_op(n.op).convolution}
    need = {k: v for k, v in need.items() if v}
    assert need
    for budget in (None, 10**10):
        p = gpu_plan(graph, MODEL, options(budget))
        areas = {t.writer: t.bytes for t in p.tensors if t.name.endswith("@workspace")}
        assert {k: areas.get(k) for k in need} == need
        assert sound(p)
