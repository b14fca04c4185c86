"""An executor rendered from a plan with a memory plan uses its arena offsets (tensors share
bytes when one's last use happens before the other's write) and still steps like the
reference."""

from __future__ import annotations

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.graph.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, train_step
from planner.graph.optimizer import Optimizer
from planner.zoo import build as zoo
from tests.codegen.helpers import host_plan, rel_error, start_state


def test_memory_planned_lenet_shares_bytes_and_matches_reference(tmp_path):
    graph = make_training_graph(zoo("lenet", batch=4, image=12), Optimizer(kind="sgd", lr=0.1))
    plan = host_plan(graph)
    module = load(build(render(plan, tmp_path / "lenet_mem").dir).dir)
    ex = module.Executor()
    state = start_state(graph)
    ex.load_params(state)
    feeds = random_feeds(graph, seed=2)
    out = ex.step(feeds)
    want, new_state = train_step(graph, feeds, state)
    assert rel_error(out["loss"], want["loss"]) < 1e-4
    got = ex.params()
    assert max(rel_error(got[k], new_state[k]) for k in new_state) < 1e-4
    own = sum(-(-t.nbytes // 64) * 64 for t in graph.tensors if not t.updates)
    assert ex.stats()["tensor_bytes"] < own  # bytes are shared
