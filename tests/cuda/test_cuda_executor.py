"""The CUDA executor as users run it: the planned layout (planned offsets, buffers reused, not
one buffer per tensor), on the plan's streams, on one stream, on a hand-made two-stream plan and
replayed as a CUDA graph, each step against the float64 reference; and the executor's fixes
(device check at load, step_async with device feeds, views on the executor's device) on a GPU.
tests/codegen/test_cuda_sources.py holds the same fixes to account without one."""

from __future__ import annotations

import re

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, train_step, widened
from planner.graph.optimizer import Optimizer
from planner.plan import Plan
from planner.schedule.record import lane_numbers
from planner.verify import verify_plan
from planner.zoo import build as zoo
from tests.codegen.helpers import gpu_plan, rel_error, start_state
from tests.codegen.zoo_cases import END_TO_END, MODELS, allowed

TOL = 1e-3  # the GPU executor's promise with TF32 off (tests/cuda/test_cuda_zoo.py)
OPTIONS = {"streams": {}, "one-stream": {"streams": False}, "cuda-graph": {"cuda_graph": True}}


def _graph(model: str):
    return make_training_graph(zoo(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1))


def _module(plan: Plan, folder):
    return load(build(render(plan, folder, layout="plan")).dir)


def check_planned_step(model: str, plan: Plan, module, **options) -> None:
    """One step on the planned layout: the loss and every updated tensor against the float64
    reference (intermediates share bytes there, so only what outlives the step is read)."""
    graph = plan.graph
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    ex = module.Executor(**options)
    ex.load_params(state)
    loss = ex.step(feeds)["loss"]
    # Every kernel's scratch is a plan tensor (OpDef.gpu_scratch): nothing allocated at load.
    assert ex.stats()["unplanned_scratch_bytes"] == 0
    outputs, new_state = train_step(graph, feeds, state)
    exact_out, exact_state = train_step(widened(graph), feeds, state)
    assert rel_error(loss, exact_out["loss"]) < allowed(outputs["loss"], exact_out["loss"], TOL)
    if model in END_TO_END:
        got = ex.params()
        errors = sorted((rel_error(got[name], exact_state[name])
                         / allowed(new_state[name], exact_state[name], TOL), name)
                        for name in exact_state if name in got)
        assert errors and errors[-1][0] < 1, f"{model}: off the reference: {errors[-3:]}"


@pytest.mark.gpu
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_planned_layout_matches_reference(model, option, tmp_path_factory):
    plan = gpu_plan(_graph(model))
    assert any(t.offset for t in plan.tensors)  # a real layout, not one buffer per tensor
    module = _module(plan, tmp_path_factory.mktemp("planned") / f"{model}_{option}")
    check_planned_step(model, plan, module, **OPTIONS[option])


def two_stream_plan(plan: Plan) -> Plan:
    """`plan` (one compute stream) with every update on a second stream ("d2h", free in plans
    without offload): its ordering edges stay, so each update waits for its gradient through
    an event and the next op on the compute stream for it. Times are the plan's, so the
    updates, which never overlapped on one stream, do not on theirs either."""
    ops = [p.model_copy(update={"stream": "d2h"}) if p.op in ("SGD", "Momentum", "Adam")
           else p for p in plan.ops]
    # A lane is a stream: the updates' stream is a lane of its own.
    ops = tuple(p.model_copy(update={"lane": lane})
                for p, lane in zip(ops, lane_numbers(ops), strict=True))
    # The compute stream now idles while updates run: that is stall (verify re-derives it).
    step = max(p.end for p in ops)
    busy = sum(p.end - p.start for p in ops if p.stream == "compute")
    memory = plan.summary.memory.model_copy(update={"stall_seconds": max(0.0, step - busy)})
    return plan.model_copy(update={
        "ops": ops, "summary": plan.summary.model_copy(update={"memory": memory})})


def test_the_two_stream_plan_verifies_and_crosses_streams():
    """No GPU: the hand-made plan is a valid plan whose waits cross streams (render)."""
    from codegen.render import render_files

    plan = two_stream_plan(gpu_plan(_graph("lenet"), "uniform"))
    assert verify_plan(plan) == []
    assert {p.stream for p in plan.ops} == {"compute", "d2h"}
    schedule = render_files(plan, "lenet2")["schedule.cpp"]
    assert re.search(r"on 2 lane\(s\)", schedule)


@pytest.mark.gpu
@pytest.mark.parametrize("model", ["lenet", "resnet", "lstm", "gpt"])
def test_a_two_stream_plan_matches_reference(model, tmp_path_factory):
    plan = two_stream_plan(gpu_plan(_graph(model), "uniform"))
    module = _module(plan, tmp_path_factory.mktemp("two") / model)
    assert module.Executor().lanes == 2
    check_planned_step(model, plan, module)
    check_planned_step(model, plan, module, cuda_graph=True)


def _patched_module(folder, pattern: str, replacement: str):
    """The mlp's executor with its schedule's device fields rewritten (the runtime is built
    for the plan's own architecture: only the executor's check sees the change)."""
    plan = gpu_plan(_graph("mlp"))
    tree = render(plan, folder, layout="plan")
    schedule = tree.dir / "schedule.cpp"
    text = schedule.read_text()
    patched = re.sub(pattern, replacement, text)
    assert patched != text
    schedule.write_text(patched)
    return load(build(tree).dir)


@pytest.mark.gpu
def test_the_executor_refuses_another_architecture(tmp_path):
    module = _patched_module(tmp_path / "mlp_cc", r"\n    (\d+), (\d+),\n};",
                             r"\n    35, \2,\n};")
    with pytest.raises(RuntimeError, match=r"compute capability 3\.5, device '.*' is \d\.\d: "
                                           r"re-plan for it"):
        module.Executor()


@pytest.mark.gpu
def test_the_executor_refuses_a_device_with_less_memory(tmp_path):
    module = _patched_module(tmp_path / "mlp_mem", r"\n    (\d+), (\d+),\n};",
                             r"\n    \1, 1000000000000000,\n};")
    with pytest.raises(RuntimeError, match=r"a GPU with 953674316 MiB, device '.*' has \d+ MiB"):
        module.Executor()


@pytest.mark.gpu
def test_step_async_device_feeds_may_be_refilled_at_once(tmp_path):
    """step_async promises the feeds are copied when it returns: overwriting a CUDA feed on
    another stream right after it must not reach the step."""
    torch = pytest.importorskip("torch")
    graph = _graph("mlp")
    plan = gpu_plan(graph)
    module = _module(plan, tmp_path / "mlp_async")
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    want = float(train_step(graph, feeds, state)[0]["loss"])
    ex = module.Executor()
    ex.load_params(state)
    side = torch.cuda.Stream()
    for _ in range(5):
        dev = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in feeds.items()}
        torch.cuda.synchronize()
        ex.step_async(dev)
        with torch.cuda.stream(side):
            for v in dev.values():
                v.zero_()
        got = float(ex.wait()["loss"])
        ex.load_params(state)
        assert abs(got - want) <= TOL * abs(want)


@pytest.mark.gpu
def test_views_carry_the_executors_device(tmp_path):
    """params(copy=False) on device 1 while the calling thread's device is 0."""
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    graph = _graph("mlp")
    module = _module(gpu_plan(graph), tmp_path / "mlp_dev1")
    ex = module.Executor(device=1)
    ex.load_params(start_state(graph))
    torch.cuda.set_device(0)
    views = ex.params(copy=False)
    assert {v.__dlpack_device__() for v in views.values()} == {(2, 1)}
