"""Lifetimes, LOAD, naive and the per-op bound on a hand-made graph and schedule."""

from __future__ import annotations

import numpy as np
import pytest

from planner.graph.builder import GraphBuilder
from planner.ir.graph import Graph
from planner.memory.liveness import (
    OpTimes,
    graph_buffers,
    load_bytes,
    naive_bytes,
    per_op_bound,
    resident_bytes,
)
from tests.memory.conftest import training


def chain() -> Graph:
    # x (input) -> relu a -> neg b -> relu c (output); 4 float32 = 16 bytes each.
    b = GraphBuilder("chain")
    x = b.input("x", (4,))
    y = b.op("Relu", [x], name="a")
    z = b.op("Neg", [y], name="b")
    return b.build(outputs=[b.op("Relu", [z], name="c")])


def serial(names, seconds=1.0) -> OpTimes:
    n = len(names)
    return OpTimes(names=tuple(names), start=np.arange(n) * seconds,
                    end=(np.arange(n) + 1) * seconds)


def test_lifetimes_follow_the_schedule():
    g = chain()
    bufs = {b.name: b for b in graph_buffers(g, serial(["a", "b", "c"]))}
    assert (bufs["x"].kind, bufs["x"].first, bufs["x"].last) == ("input", -1, 0)
    assert (bufs["a"].start, bufs["a"].end, bufs["a"].readers) == (0.0, 2.0, (1,))
    assert bufs["c"].kind == "output" and bufs["c"].last == 3
    # At any time two of the 16-byte buffers are live: the op's input and output.
    assert naive_bytes(list(bufs.values())) == 64
    assert load_bytes(list(bufs.values())) == 32


def test_co_running_ops_overlap_lifetimes():
    g = chain()
    # b is stretched over c's time: a's buffer lives as long as b runs.
    s = OpTimes(names=("a", "b", "c"), start=np.array([0.0, 1.0, 2.0]),
                 end=np.array([1.0, 3.0, 3.0]))
    bufs = {b.name: b for b in graph_buffers(g, s)}
    assert bufs["a"].end == 3.0


def test_unscheduled_node_is_named():
    with pytest.raises(KeyError, match="'c'"):
        graph_buffers(chain(), serial(["a", "b"]))


def test_persistent_and_in_place_updates():
    g = training("mlp", batch=2, hidden=[3], in_features=4, classes=2)
    s = serial([n.name for n in g.nodes])
    bufs = {b.name: b for b in graph_buffers(g, s)}
    param = next(t for t in g.tensors if t.role == "param" and t.updates is None)
    update = next(t for t in g.tensors if t.updates == param.name)
    assert bufs[param.name].kind == "persistent" and bufs[param.name].first == -1
    assert bufs[update.name].alias_of == param.name
    # Aliases share their target's bytes: naive does not count them twice.
    assert naive_bytes(list(bufs.values())) == sum(t.nbytes for t in g.tensors
                                                    if t.updates is None)


def test_per_op_bound_counts_resident_state_once():
    g = training("mlp", "momentum", batch=2, hidden=[3], in_features=4, classes=2)
    params = sum(t.nbytes for t in g.tensors if t.role == "param" and t.updates is None)
    # Params and their momentum, and the learning rate and weight decay (two float32
    # scalars); gradients count only as an op's operands.
    assert resident_bytes(g) == 2 * params + 8
    bound = per_op_bound(g)
    largest = max(sum(g.tensor(t).nbytes for t in {*n.inputs, *n.outputs}) for n in g.nodes)
    assert resident_bytes(g) < bound <= resident_bytes(g) + largest
    assert per_op_bound(g, {g.nodes[0].name: 10**6}) >= resident_bytes(g) + 10**6


def test_per_op_bound_counts_a_views_bytes_once():
    """A Reshape of a non-persistent tensor shares its bytes (view_aliases): its operands are
    64 bytes, not 128, and a plan whose largest op it is stays within its own LOAD."""
    from planner.pipeline import plan
    from planner.target.presets import preset

    b = GraphBuilder("view")
    x = b.input("x", (4, 4))
    g = b.build(outputs=[b.op("Reshape", [x], {"shape": [2, 8]}, name="r")])
    assert per_op_bound(g) == 64
    memory = plan(g, preset("xeon-8180")).summary.memory  # verified: PlanError otherwise
    assert memory.per_op_bound_bytes <= memory.load_bytes <= memory.arena_bytes
