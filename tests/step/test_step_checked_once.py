"""Each rewritten step graph is validated once: every pass of planner.step checks the
graph it rewrites, step_graph does not check it again, and the sharded rewrites check their
graph once with its clip and loss scaling put back (not after each)."""

from __future__ import annotations

import pytest

from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph import validate
from planner.graph.optimizer import Optimizer
from planner.step import STEP_PASSES, StepChoices, step_graph
from planner.step.collectives import Collectives

MLP = "zoo:mlp?batch=4&hidden=8&in_features=4&classes=2"


def _counted(monkeypatch) -> list[int]:
    """A list that grows by one at each check_graph call (its first rule, looked up at call
    time)."""
    calls: list[int] = []
    first = validate._check_names

    def counting(graph):
        calls.append(1)
        return first(graph)

    monkeypatch.setattr(validate, "_check_names", counting)
    return calls


@pytest.mark.parametrize("rewrite", ["all-reduce", "sharded-updates", "sharded-parameters"])
def test_each_rewriting_pass_validates_its_graph_once(monkeypatch, rewrite):
    # clip_grad_norm and fp16-mixed's loss scaling: the sharded rewrites put both back over
    # the shards, each once a check of its own before
    options = GraphOptions(optimizer=Optimizer(kind="adam", clip_grad_norm=1.0),
                           precision="fp16-mixed")
    graph = prepare(MLP, options)
    choices = StepChoices(cores=2, collectives=Collectives(ranks=2, bucket_bytes=64,
                                                           rewrite=rewrite))
    rewritten = 0
    g = graph
    for _, step_pass in STEP_PASSES:  # unchecked here: which passes rewrite at all
        out = step_pass(g, choices)
        rewritten += out is not g
        g = out
    assert rewritten >= 1  # the collectives, at least
    calls = _counted(monkeypatch)
    step = step_graph(graph, choices)
    assert len(calls) == rewritten
    assert step.to_json() == g.to_json()
    assert {"ShardedClipGradNorm", "ShardedUnscaleGrads"} <= {n.op for n in step.nodes} or \
        rewrite == "all-reduce"


def test_a_pass_with_nothing_to_do_validates_nothing(monkeypatch):
    graph = prepare(MLP, GraphOptions(optimizer=Optimizer(kind="sgd")))
    calls = _counted(monkeypatch)
    assert step_graph(graph, StepChoices()) is graph
    assert calls == []
