"""`planner profile --target gpu`: the profiler is the CUDA runtime itself (each convolution
kernel's cuDNN find, the generated kernels at every launch configuration, every other kernel
alone), so here, without a GPU, its plan is generated and compiled against the runtime; on a
GPU, the table it writes, a second run that resumes, and a plan that takes its choices from
the table and still computes the reference's step."""

from __future__ import annotations

import json

import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from codegen.tvm_kernels import BLOCKS
from planner.costs import graph_signatures, load_table
from planner.costs.gpu_profile import launch_blocks
from planner.costs.signature import unique_signatures
from planner.frontend.autodiff import make_training_graph
from planner.frontend.load import load_graph
from planner.graph.interpret import random_feeds, train_step
from planner.graph.optimizer import Optimizer
from planner.target import preset
from planner.verify import verify_plan
from tests.codegen.helpers import rel_error, start_state
from tests.cuda.build_results import import_runtime, schedule_strings

SPEC = "zoo:lenet?image=8&batch=4"


@pytest.fixture(scope="module")
def graph():
    # As `planner profile SPEC --train sgd` builds it (the same SGD signatures).
    return make_training_graph(load_graph(SPEC), Optimizer(kind="sgd"))


@pytest.mark.nvcc
def test_profiling_plan_compiles_against_the_runtime(graph, tmp_path):
    from codegen.gpu_profiling import kind, profile_plan

    sigs = unique_signatures(list(graph_signatures(graph).values()))
    plan = profile_plan(sigs, preset("h100-80gb"))
    blocks = {op.name: op.block for op in plan.ops}
    kinds = [kind(s) for s in sigs]
    assert {"algorithms", "launches", "alone"} <= set(kinds)
    for k, what in enumerate(kinds):
        want = BLOCKS if what == "launches" else (0,)
        assert tuple(blocks[f"s{k}_copy{j}"] for j in range(len(want))) == want
    assert len(plan.ops) == sum(len(BLOCKS) if w == "launches" else 1 for w in kinds)
    assert verify_plan(plan) == []
    tree = render(plan, tmp_path / "profile", layout="plan")
    assert all(f"block={b}".encode() in schedule_strings(tree) for b in BLOCKS)
    result = build(tree)
    runtime = import_runtime(result.runtime)
    assert hasattr(runtime.Executor, "find")


@pytest.mark.gpu
def test_profile_writes_the_table_plans_choose_from(graph, tmp_path, capsys):
    from planner.cli import main
    from planner.pipeline import plan as make_plan
    from planner.target.presets import load_target

    out = tmp_path / "gpu.costs.json"
    args = ["profile", SPEC, "--train", "sgd", "--target", "gpu", "-o", str(out),
            "--repeats", "3", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    table = load_table(out)
    assert table.target == "gpu" and first["failures"] == []
    for sig in unique_signatures(list(graph_signatures(graph).values())):
        e = table.entry(sig)
        assert e is not None, sig.key
        if e.gpu_algorithms:
            names = {a.algorithm for a in e.gpu_algorithms}
            # IMPLICIT_GEMM (ALGO_0) runs every shape without a workspace.
            assert "IMPLICIT_GEMM" in names, (sig.key, names)
            assert all(a.seconds > 0 for a in e.gpu_algorithms)
        elif e.gpu_launches:
            assert [(s.threads_per_block, s.blocks) for s in e.gpu_launches] == \
                [(b, launch_blocks(sig, b)) for b in BLOCKS]
        else:
            assert e.gpu_seconds is not None and e.gpu_seconds > 0, sig.key
    # Byte-identical on reading back; a second run measures nothing new.
    assert out.read_text() == table.to_json()
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["measured"] == 0

    plan = make_plan(graph, load_target("gpu"), table)
    assert verify_plan(plan) == []
    assert plan.memory.convs and all(c.source == "measured" for c in plan.memory.convs)
    assert any(op.block for op in plan.ops)
    ex = load(build(render(plan, tmp_path / "planned", layout="plan")).dir).Executor()
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    ex.load_params(state)
    loss = ex.step(feeds)["loss"]
    reference, _ = train_step(graph, feeds, state)
    assert rel_error(loss, reference["loss"]) < 1e-3
