"""Batched weight gradients (planner/frontend/passes/weight_grads.py): the structure of the rewrite,
that it computes the same sum, that it leaves alone what it must not touch, and that the step's
cores decide between chunks and one GEMM (a BiLSTM trained so still matches PyTorch)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.frontend.passes.weight_grads import batch_weight_gradients
from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import random_feeds, run
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from planner.step.for_cores import for_cores
from planner.target.presets import load_target
from planner.zoo import build


def gemm_sum(steps: int, *, rows: int = 3, m: int = 4, n: int = 5, reread: bool = False,
             transpose_b: bool = False) -> Graph:
    """sum over t of A_t^T B_t written as reverse mode writes it: MatMuls and one AddN."""
    b = GraphBuilder("sum")
    parts = []
    for t in range(steps):
        a = b.input(f"a{t}", (rows + t, m))
        y = b.input(f"y{t}", (n, rows + t) if transpose_b else (rows + t, n))
        parts.append(b.op_n("MatMul", [a, y], {"transpose_a": True, "transpose_b": transpose_b},
                            name=f"dw{t}", role="grad")[0])
    total = b.op_n("AddN", parts, name="dw/sum", role="grad")[0]
    outputs = [total, *parts[:1]] if reread else [total]
    return b.build(outputs=outputs)


@pytest.mark.parametrize("steps", [2, 3, 5, 9, 10, 35])
def test_same_sum_in_ceil_sqrt_chunks(steps: int) -> None:
    g = gemm_sum(steps)
    fused = check_graph(batch_weight_gradients(g))
    chunks = math.ceil(steps / math.ceil(math.sqrt(steps)))
    assert sum(n.op == "MatMul" for n in fused.nodes) == chunks
    assert sum(n.op == "AddN" for n in fused.nodes) == (chunks > 1)
    assert fused.outputs == g.outputs and fused.tensor("dw/sum") == g.tensor("dw/sum")
    feeds = random_feeds(g, seed=steps)
    np.testing.assert_allclose(run(fused, feeds, {})["dw/sum"], run(g, feeds, {})["dw/sum"],
                               rtol=1e-5, atol=1e-5)


def test_each_chunk_waits_only_for_its_own_steps() -> None:
    fused = batch_weight_gradients(gemm_sum(9))
    first = fused.node_map["dw/sum/gemm0"]
    assert fused.node_map[first.inputs[0]].inputs == ("a0", "a1", "a2")
    assert fused.node_map[first.inputs[1]].inputs == ("y0", "y1", "y2")
    assert fused.node_map["dw/sum"].inputs == ("dw/sum/gemm0", "dw/sum/gemm1", "dw/sum/gemm2")


@pytest.mark.parametrize("graph", [gemm_sum(4, reread=True), gemm_sum(4, transpose_b=True)],
                         ids=["partial-read-elsewhere", "transpose_b"])
def test_left_alone(graph: Graph) -> None:
    assert batch_weight_gradients(graph) == graph


def test_lstm_training_graph_uses_chunked_gemms() -> None:
    g = make_training_graph(build("lstm", batch=2, seq=9, hidden=4, vocab=11),
                            Optimizer(kind="sgd"))
    check_graph(g)
    for layer in (1, 2):
        total = g.node_map[f"grad/layer{layer}/weight/sum"]
        assert total.op == "AddN" and len(total.inputs) == 3
        assert all(g.producer[i].op == "MatMul" for i in total.inputs)
    # No weight-sized partial per step is left.
    assert not any(n.op == "MatMul" and g.tensor(n.outputs[0]).shape == (8, 16)
                   and "/step" in n.name for n in g.nodes)


def two_sums(steps: int) -> Graph:
    """Two independent sums of `steps` A^T B GEMMs (a BiLSTM's two directions)."""
    b = GraphBuilder("two")
    totals = []
    for d in ("fw", "bw"):
        parts = [b.op_n("MatMul", [b.input(f"{d}/a{t}", (2, 3)), b.input(f"{d}/y{t}", (2, 4))],
                        {"transpose_a": True}, name=f"{d}/dw{t}", role="grad")[0]
                 for t in range(steps)]
        totals.append(b.op_n("AddN", parts, name=f"{d}/sum", role="grad")[0])
    return b.build(outputs=totals, kind="training")


@pytest.mark.parametrize(("cores", "gemms"), [(None, 3), (1, 1), (2, 1), (3, 3), (64, 3)])
def test_one_gemm_per_sum_where_no_core_is_left_for_chunks(cores, gemms) -> None:
    g = two_sums(9)
    # The chunks, then as planned for the step's cores (planner/step/for_cores.py).
    fused = check_graph(for_cores(batch_weight_gradients(g), cores))
    for d in ("fw", "bw"):
        total = fused.node_map[f"{d}/sum"]
        assert total.op == ("MatMul" if gemms == 1 else "AddN")
        assert sum(n.op == "MatMul" and n.name.startswith(d) for n in fused.nodes) == gemms
    feeds = random_feeds(g, seed=3)
    want, got = run(g, feeds, {}), run(fused, feeds, {})
    for d in ("fw", "bw"):
        np.testing.assert_allclose(got[f"{d}/sum"], want[f"{d}/sum"], rtol=1e-5, atol=1e-5)


def test_step_cores_of_cpu_and_gpu_targets() -> None:
    assert load_target("xeon-8180").step_cores == load_target("xeon-8180").cores > 2
    assert load_target("k40c-12gb").step_cores is None


def test_bilstm_with_one_gemm_per_direction_matches_pytorch() -> None:
    """An exported bidirectional nn.LSTM trained for a 2-core step (one weight-gradient GEMM
    per direction; the runtime packs the recurrent weights once per step: weight_packs.h)
    takes PyTorch's SGD step, as with chunks."""
    torch = pytest.importorskip("torch")
    from tests.importers.torch_step import (
        export,
        mismatches,
        planner_step,
        torch_step,
        training_graph,
    )

    class BiLSTM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 5, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(10, 3)

        def forward(self, x):
            return self.head(self.lstm(x)[0].mean(1))

    torch.manual_seed(0)
    model = BiLSTM()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 9, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 2).astype(np.int64)
    onnx = export(model, torch.from_numpy(x))
    for cores, sum_op in ((None, "AddN"), (2, "MatMul")):
        graph, _ = training_graph(onnx, cores)
        sums = [n.op for n in graph.nodes if n.name.endswith("/sum") and n.op != "Concat"]
        assert sums.count(sum_op) == 2, sums  # the recurrent weight's, per direction
        ours, start = planner_step(onnx, x, labels, cores)
        f32 = torch_step(model, x, labels, torch.float32, start)
        f64 = torch_step(model, x, labels, torch.float64, start)
        assert set(f64.state) <= set(ours.state)
        assert mismatches(ours, f32, f64) == []
