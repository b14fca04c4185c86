"""The CUDA executor of a training plan holding NLLLoss (weights, smoothing, reduction='none'
reduced by the model) and the random ops generates and compiles (no GPU needed); what the
kernels compute is checked on a GPU by tests/cuda/test_cuda_kernels.py's op cases."""

from __future__ import annotations

import pytest

from codegen.build import build
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph import GraphBuilder, Optimizer, check_graph
from tests.codegen.helpers import gpu_plan


def noisy_classifier():
    b = GraphBuilder("noisy")
    x, y = b.input("x", (8, 6)), b.label("y", (8,))
    w = b.param("w", (6, 5), init="glorot")
    cw = b.input("class_weight", (5,))
    noise = b.op("RandomNormal", [], {"shape": [8, 6], "seed": 1, "std": 0.1})
    keep = b.op("Bernoulli", [], {"shape": [8, 1], "seed": 2, "p": 0.8})
    z = b.op("Mul", [b.op("MatMul", [b.op("Add", [x, noise]), w]), keep])
    logp = b.op("LogSoftmax", [z], {"axis": 1})
    per = b.op("NLLLoss", [logp, y, cw], {"reduction": "none", "label_smoothing": 0.1})
    order = b.op("RandomPerm", [], {"n": 8, "seed": 3})  # an int64 output beside the loss
    loss = b.op("ReduceMean", [per], {"axes": [], "keepdims": False}, name="loss")
    ints = b.op("RandomInt", [], {"shape": [4], "seed": 4, "low": 0, "high": 9})
    uniform = b.op("RandomUniform", [], {"shape": [3], "seed": 5})
    return check_graph(b.build(outputs=[loss, order, ints, uniform], loss="loss"))


@pytest.mark.nvcc
def test_a_training_plan_with_nll_and_random_ops_compiles(tmp_path):
    graph = make_training_graph(noisy_classifier(), Optimizer(kind="sgd", lr=0.1))
    assert {"NLLLossGrad", "RandomNormal", "Bernoulli", "RandomPerm"} <= {n.op
                                                                           for n in graph.nodes}
    tree = render(gpu_plan(graph), tmp_path / "noisy", layout="plan")
    result = build(tree)
    assert result.runtime.name.startswith("planner_cuda_rt")
