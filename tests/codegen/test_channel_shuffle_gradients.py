"""The generated CPU executor's gradient of every parameter after one step, against the
reference interpreter's, for exported channel-shuffle CNNs (grouped and depthwise convolutions
between Reshape -> Transpose -> Reshape, Split, Slice and Concat) through both front ends (ONNX
and torch.export), as test_executor_gradients.py checks the zoo; plus the same step on the
plan's arena, on a wider team and on another instruction set's kernels (the models:
tests/codegen/channel_shuffle_cases.py). Skipped where torch is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.codegen.channel_shuffle_cases import CASES, onnx_case  # noqa: E402
from tests.codegen.gradients import (  # noqa: E402
    check_gradients,
    gradient_report,
    parameter_gradients,
)
from tests.codegen.helpers import build_module, planned_graph, step_with_values  # noqa: E402


@pytest.fixture(scope="module")
def shuffle_steps(tmp_path_factory):
    """Per front end: the graph, its built executor, start state and feeds (built once)."""
    out = {}
    for name, make in CASES.items():
        graph, start, feeds = make()
        folder = tmp_path_factory.mktemp("grads") / f"shuffle_{name.replace('.', '_')}"
        module = build_module(graph, folder)
        # The graph as planned for this host (its CPU steps' folds), which the executor runs.
        out[name] = planned_graph(module), module, start, feeds
    return out


@pytest.mark.parametrize("front_end", sorted(CASES))
def test_channel_shuffle_step_on_the_plans_arena_gives_the_same_bits(front_end, shuffle_steps,
                                                                   tmp_path_factory):
    """The plan's own layout (tensors sharing arena bytes, in-place outputs, views) runs the
    same kernels at the same thread counts as the every-tensor-its-own-bytes build checked
    above: any difference in the step's result is bytes shared wrongly."""
    graph, own, start, feeds = shuffle_steps[front_end]
    folder = tmp_path_factory.mktemp("grads") / f"shuffle_{front_end.replace('.', '_')}_arena"
    shared = build_module(graph, folder, layout="plan")
    results = []
    for module in (own, shared):
        ex = module.Executor()
        ex.load_params(start)
        loss = np.asarray(ex.step(feeds)[graph.outputs[0]])
        results.append((loss, ex.params()))
    (loss, params), (arena_loss, arena_params) = results
    assert np.array_equal(loss, arena_loss)
    assert params.keys() == arena_params.keys()
    assert [k for k in params if not np.array_equal(params[k], arena_params[k])] == []


@pytest.mark.parametrize("front_end", sorted(CASES))
def test_channel_shuffle_gradients_match_reference(front_end, shuffle_steps):
    graph, module, start, feeds = shuffle_steps[front_end]
    ops = {n.op for n in graph.nodes}
    assert {"Transpose", "Reshape", "Concat", "Conv2DBackpropFilter"} <= ops
    assert ops & {"Split", "Slice"}
    check_gradients(graph, module, start, feeds)


def test_a_wrong_gradient_is_found(shuffle_steps):
    """The check can fail: a weight gradient read with its channels in shuffled order (a
    stride or layout slip), and a forward value one part in 1e4 off, are each refused."""
    graph, module, start, feeds = shuffle_steps["onnx"]
    values = step_with_values(module, graph, start, feeds)
    grads = parameter_gradients(graph)
    (weight,) = (p for p, g in grads.items() if p == "grouped.0.weight")
    shuffled = dict(values)
    g = values[grads[weight]]
    shuffled[grads[weight]] = g.reshape(4, -1, *g.shape[1:]).swapaxes(0, 1).reshape(g.shape)
    _, back, _ = gradient_report(graph, shuffled, feeds, start)
    assert dict((n.split(" ")[0], e) for e, n in back)[weight] > 1

    off = dict(values)
    (conv,) = (n.outputs[0] for n in graph.nodes if n.op == "Conv2D"
               and n.inputs[1] == "grouped.0.weight")
    off[conv] = (values[conv] * (1 + 1e-4)).astype(np.float32)
    forward, _, first = gradient_report(graph, off, feeds, start)
    assert forward[-1][0] > 1 and first.startswith(conv)


def test_channel_shuffle_gradients_on_a_wider_team(tmp_path_factory):
    """The same checks with every op on an 8-thread team (a plan for an 8-core copy of this
    host; the executor runs up to 4 threads per CPU it has): loops and oneDNN primitives split
    their work at other boundaries than on this host's own plan."""
    import os
    import warnings

    from codegen.build import build as build_tree
    from codegen.load import load
    from codegen.render import render
    from planner.pipeline import PlanOptions, plan
    from planner.schedule import ScheduleOptions
    from planner.target.detect import detect
    from planner.target.presets import thread_major_cpus

    team = min(8, 4 * (os.cpu_count() or 1))
    wide = detect(measure=False).model_copy(update={
        "logical_cpus": thread_major_cpus(cores=team, smt=1, cores_per_group=1)})
    graph, start, feeds = onnx_case()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # analytical costs
        planned = plan(graph, wide, options=PlanOptions(schedule=ScheduleOptions(
            strategy="uniform")))
    assert {op.threads for op in planned.ops} == {team}
    folder = tmp_path_factory.mktemp("grads") / "wide_team"
    module = load(build_tree(render(planned, folder, layout="own")).dir)
    check_gradients(planned.graph, module, start, feeds)


SSE41_CHECK = """
import sys
from pathlib import Path
from tests.codegen.helpers import build_module, planned_graph
from tests.codegen.channel_shuffle_cases import onnx_case
from tests.codegen.gradients import check_gradients
graph, start, feeds = onnx_case()
module = build_module(graph, Path(sys.argv[1]))
graph = planned_graph(module)
ex = module.Executor()
ex.load_params(start)
ex.step(feeds)
impls = {o["impl"] for o in ex.stats()["ops"] if o["op"].startswith("Conv")}
assert not any("avx" in i for i in impls), impls
check_gradients(graph, module, start, feeds)
"""


def test_channel_shuffle_gradients_on_another_instruction_sets_kernels(tmp_path):
    """oneDNN picks its convolution kernels by the CPU's instruction set (blocked layouts of 16
    channels on AVX-512, of 8 on AVX2; GEMM-based and SSE4.1 kernels below), so the checks
    above run one set of kernels per machine: here they run again in a process limited to
    SSE4.1's (ONEDNN_MAX_CPU_ISA), which must not be AVX kernels."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "SSE41"}
    done = subprocess.run([sys.executable, "-c", SSE41_CHECK, str(tmp_path / "shuffle_sse41")],
                          env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
