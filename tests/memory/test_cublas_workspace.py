"""cuBLAS's workspace planned like cuDNN's: with the target's cublas_workspace_bytes, every
MatMul of the graph (counted here from the graph's nodes) gets a scratch area of that size in
the arena, aligned for cuBLAS and live only while it runs; without it, plans stay as they
were."""

from __future__ import annotations

from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from planner.target import preset
from planner.zoo import build

WORKSPACE = 2**20


def h100(workspace: int | None):
    t = preset("h100-80gb")
    return t.model_copy(update={"gpus": (t.gpus[0].model_copy(
        update={"cublas_workspace_bytes": workspace}),)})


def test_every_matmul_gets_the_workspace_in_the_arena():
    graph = make_training_graph(build("gpt", layers=1), Optimizer(kind="sgd"))
    matmuls = {n.name for n in graph.nodes if n.op == "MatMul"}
    assert matmuls
    bare, planned = plan(graph, h100(None)), plan(graph, h100(WORKSPACE))
    areas = {t.writer: t for t in planned.tensors if t.name.endswith("@workspace")}
    assert matmuls <= set(areas)
    for name in matmuls:
        area = areas[name]
        assert area.bytes >= WORKSPACE and area.offset % 256 == 0
        assert area.first == area.last  # its op's time only: reused by the ops after it
        assert area.offset + area.bytes <= planned.summary.memory.arena_bytes
    before = {t.writer for t in bare.tensors if t.name.endswith("@workspace")}
    assert not matmuls & before
    # One op's time at a time on one stream: the arena grows by about one workspace, not one
    # per MatMul.
    grown = planned.summary.memory.arena_bytes - bare.summary.memory.arena_bytes
    assert 0 < grown <= 2 * WORKSPACE < len(matmuls) * WORKSPACE


def test_the_plan_json_names_the_field_only_when_set():
    assert "cublas_workspace_bytes" not in h100(None).to_json()
    assert "cublas_workspace_bytes" in h100(WORKSPACE).to_json()
