"""Data-parallel plans for a GPU (planner.schedule.parallel on the stream schedule): the
all-reduces on the `comm` stream, each after its bucket's last gradient and before the updates
that read it, with an event wherever a dependency crosses to or from that stream (planner
verify re-derives every such pair); the buckets laid out side by side at the device's
alignment; the updates wait after backward, so the compute stream never waits on the network
before backward ends. With --shard-optimizer (ZeRO-1) the reduce-scatters and sharded updates
on the comm stream, their buckets and shards at the device's 256 bytes."""

from __future__ import annotations

import pytest

from planner.errors import UserError
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.schedule.options import ScheduleOptions
from planner.schedule.parallel import DataParallelOptions, data_parallel_graph
from planner.target import preset
from planner.verify import verify_plan
from planner.zoo import build

TARGET = "a100-80gb"


def _plan(name: str = "lenet", kind: str = "sgd", budget: int | None = None,
          strategy: str = "optimized", **params):
    g = make_training_graph(build(name, **(params or dict(image=8, batch=8))),
                            Optimizer(kind=kind))
    return plan(g, preset(TARGET), options=PlanOptions(
        memory=MemoryOptions(budget_bytes=budget),
        schedule=ScheduleOptions(strategy=strategy),
        data_parallel=DataParallelOptions(ranks=2, bucket_bytes=4096)))


@pytest.fixture(scope="module")
def lenet():
    return _plan()


def test_all_reduces_run_on_the_comm_stream_between_gradients_and_updates(lenet):
    p = lenet
    assert p.backend == "cuda" and "comm" in p.target.streams
    ars = [op for op in p.ops if op.op == "AllReduce"]
    assert len(ars) >= 2 and {op.stream for op in ars} == {"comm"}
    assert {op.stream for op in p.ops if op.op != "AllReduce"} <= {
        "compute", "compute1", "compute2", "compute3"}
    at = {op.name: op for op in p.ops}
    nodes = {n.name: n for n in p.graph.nodes}
    writer = {t: n.name for n in p.graph.nodes for t in n.outputs}
    for op in ars:
        # Predicted after every gradient of its bucket, before every reader of its outputs.
        assert op.start >= max(at[writer[g]].end for g in nodes[op.name].inputs) - 1e-12
        for n in p.graph.nodes:
            if set(n.inputs) & set(nodes[op.name].outputs):
                assert at[n.name].start >= op.end - 1e-12
    assert verify_plan(p) == []


def test_one_compute_stream_runs_backward_before_any_update():
    p = _plan(strategy="uniform")
    assert {op.stream for op in p.ops} == {"compute", "comm"}
    order = [op for op in sorted(p.ops, key=lambda o: o.order) if op.stream != "comm"]
    kinds = ["update" if op.op == "SGD" else "other" for op in order]
    # Every update after the last gradient: none holds backward up waiting on a bucket.
    assert kinds == sorted(kinds, key=lambda k: k == "update")
    first_ar = min(op.start for op in p.ops if op.op == "AllReduce")
    last_backward = max(op.end for op in order if op.op != "SGD")
    assert first_ar < last_backward  # an all-reduce overlaps the rest of backward


def test_verify_finds_a_missing_event_from_the_comm_stream(lenet):
    p = lenet
    ar = next(op.name for op in p.ops if op.op == "AllReduce")
    cut = tuple(e for e in p.happens_before if e.before != ar)
    problems = verify_plan(p.model_copy(update={"happens_before": cut}))
    assert problems and any(ar in s for s in problems)


def test_buckets_lie_side_by_side_at_the_device_alignment(lenet):
    p = lenet
    at = {t.name: t for t in p.tensors}
    nodes = {n.name: n for n in p.graph.nodes}
    placed = 0
    for op in p.ops:
        if op.op != "AllReduce" or not nodes[op.name].attrs.get("in_place"):
            continue
        grads = [at[g] for g in nodes[op.name].inputs]
        for a, b in zip(grads, grads[1:], strict=False):
            assert b.offset == -(-(a.offset + a.bytes) // 256) * 256
            placed += 1
    assert placed > 0


def test_adam_and_co_running_streams_and_a_budget_plan_and_verify():
    # An LSTM's gates co-run on several compute streams beside the comm stream.
    p = _plan("lstm", kind="adam", batch=2, seq=3, hidden=16, layers=1, vocab=20)
    assert verify_plan(p) == [] and any(op.stream == "comm" for op in p.ops)
    # Under a budget: offloads and recomputes on the copy streams beside the comm stream.
    net = dict(batch=8, image=63, classes=4)
    free = _plan("alexnet", **net).summary.memory
    budget = (free.per_op_bound_bytes + free.liveness_load_bytes) // 2
    tight = _plan("alexnet", budget=budget, **net)
    assert verify_plan(tight) == [] and tight.summary.memory.arena_bytes <= budget
    assert tight.memory.ops and any(op.stream == "comm" for op in tight.ops)


def test_a_bucket_read_by_another_op_gets_its_scratch_in_the_plan():
    from planner.step.collectives.data_parallel import reduced_gradients

    g = make_training_graph(build("lenet", image=8, batch=8), Optimizer(kind="sgd"))
    grad = reduced_gradients(g)[0]
    kept = g.model_copy(update={"outputs": (*g.outputs, grad)})  # the step returns it
    p = plan(kept, preset(TARGET), options=PlanOptions(
        data_parallel=DataParallelOptions(ranks=2, bucket_bytes=4096)))
    n = next(n for n in p.graph.nodes if n.op == "AllReduce" and grad in n.inputs)
    assert n.attrs["in_place"] == 0
    # The CUDA kernel's bucket: the gradients packed, a planned area, not one made at load.
    scratch = {t.name: t.bytes for t in p.tensors}[f"{n.name}@workspace"]
    assert scratch == sum(p.graph.tensor(t).nbytes for t in n.inputs)
    assert verify_plan(p) == []


def _zero1(kind: str = "adam", strategy: str = "optimized", **model):
    g = make_training_graph(build("lenet", **(model or dict(image=8, batch=8))),
                            Optimizer(kind=kind))
    return plan(g, preset(TARGET), options=PlanOptions(
        schedule=ScheduleOptions(strategy=strategy),
        data_parallel=DataParallelOptions(ranks=2, bucket_bytes=4096, shard_optimizer=True)))


@pytest.mark.parametrize("strategy", ["uniform", "optimized"])
def test_sharded_updates_run_on_the_comm_stream_after_an_event_from_compute(strategy):
    """ZeRO-1 on a GPU target: each bucket's reduce-scatter and sharded update run on the comm
    stream, after the bucket's gradients (an event from the compute stream); verify
    re-derives every pair that must be ordered and finds each so, and fails when the edges
    into the first reduce-scatter are cut (the event its kernel waits on)."""
    p = _zero1(strategy=strategy)
    assert verify_plan(p) == []
    ops = {op.op: [o for o in p.ops if o.op == op.op] for op in p.ops}
    assert len(ops["ReduceScatter"]) >= 2 and "AllReduce" not in ops and "ApplyAdam" not in ops
    assert {o.stream for o in ops["ReduceScatter"] + ops["ShardedUpdate"]} == {"comm"}
    for n in p.graph.nodes:
        if n.op in ("ReduceScatter", "ShardedUpdate"):
            assert n.attrs["alignment"] == 256  # the device arena's, named in the plan
    first = min(ops["ReduceScatter"], key=lambda o: o.order).name
    cut = tuple(e for e in p.happens_before if e.after != first)
    problems = verify_plan(p.model_copy(update={"happens_before": cut}))
    assert problems and any(first in s for s in problems)


def test_sharded_buckets_lie_side_by_side_at_the_device_alignment():
    """A sharded bucket's members at the previous one's end rounded up to 256 bytes, its
    shard a multiple of 256 bytes, the padded bucket ranks x shard: what the CUDA kernels
    check at run (kernels/collective.cu), re-derived here from the sizes."""
    p = _zero1()
    at = {t.name: t for t in p.tensors}
    checked = 0
    for n in p.graph.nodes:
        if n.op not in ("ReduceScatter", "ShardedUpdate"):
            continue
        members = n.inputs if n.op == "ReduceScatter" else n.inputs[:len(n.outputs) - 2]
        end = at[members[0]].offset
        for m in members:
            want = -(-end // 256) * 256
            assert at[m].offset == want, (n.name, m)
            end = want + at[m].bytes
        shard = p.graph.tensor(n.outputs[0] if n.op == "ReduceScatter"
                               else n.inputs[len(members)]).size * 4
        assert shard % 256 == 0 and 2 * shard >= end - at[members[0]].offset
        checked += 1
    assert checked >= 4
    # A sharded collective stating the CPU's 64 bytes on a CUDA plan: verify names it.
    rs = next(n for n in p.graph.nodes if n.op == "ReduceScatter")
    nodes = tuple(n.model_copy(update={"attrs": {**n.attrs, "alignment": 64}})
                  if n.name == rs.name else n for n in p.graph.nodes)
    bad = p.model_copy(update={"graph": p.graph.model_copy(update={"nodes": nodes})})
    assert f"bucket of {rs.name!r}: alignment 64 is not the cuda arena's 256 bytes" in \
        verify_plan(bad)


def test_shard_optimizer_with_loss_scaling_is_refused_on_a_gpu_target_in_one_line():
    from planner.graph.optimizer import LossScaling

    graph = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=3, classes=2),
                                Optimizer(kind="adam"), precision="fp16-mixed",
                                loss_scaling=LossScaling())
    with pytest.raises(UserError, match="loss scaling") as e:
        data_parallel_graph(graph, preset(TARGET),
                            DataParallelOptions(ranks=2, shard_optimizer=True))
    assert "\n" not in str(e.value)
