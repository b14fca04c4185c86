"""Planning data-parallel training (planner.schedule.parallel): gradient buckets, the
all-reduce ops on the comm lane, their ordering edges (checked by planner verify), the
simulated overlap with backward, and one-line refusals."""

from __future__ import annotations

import json

import pytest

import planner.cli as cli
from planner.errors import InfeasibleBudget, UserError
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.runtime.distributed import local_rank
from planner.schedule.parallel import DataParallelOptions, all_reduce_seconds, interconnect
from planner.step.collectives.data_parallel import buckets, reduced_gradients
from planner.target import preset
from planner.target.shares import placement, rank_cpus
from planner.verify import verify_plan
from planner.zoo import build

TARGET = "xeon-8180"


def _lenet(kind: str = "sgd"):
    return make_training_graph(build("lenet", image=8, batch=8), Optimizer(kind=kind))


def _dp_plan(graph, ranks: int = 2, bucket_bytes: int | None = 4096):
    return plan(graph, preset(TARGET), options=PlanOptions(
        data_parallel=DataParallelOptions(ranks=ranks, bucket_bytes=bucket_bytes)))


def test_buckets_cut_the_gradients_in_backward_order():
    g = _lenet()
    grads = reduced_gradients(g)
    cut = buckets(g, 4096)
    assert [t for b in cut for t in b] == grads  # each once, in the order backward writes them
    assert len(grads) == sum(t.updates is None for t in g.by_role("param"))
    sizes = [sum(g.tensor_map[t].nbytes for t in b) for b in cut]
    assert all(s >= 4096 for s in sizes[:-1]) and len(cut) > 1
    # each bucket closes at the first gradient that brings it to the limit
    assert all(s - g.tensor_map[b[-1]].nbytes < 4096 for s, b in zip(sizes, cut, strict=True))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_all_reduces_run_on_the_comm_lane_between_gradients_and_updates(kind):
    p = _dp_plan(_lenet(kind))
    assert verify_plan(p) == []
    edges = {(e.before, e.after) for e in p.happens_before}
    writer = {t: n.name for n in p.graph.nodes for t in n.outputs}
    ar = [n for n in p.graph.nodes if n.op == "AllReduce"]
    assert len(ar) > 1
    for k, n in enumerate(ar):
        op = p.op(n.name)
        assert op.stream == "comm" and op.cpus == () and n.attrs["ranks"] == 2
        assert all((writer[g], n.name) in edges for g in n.inputs)
        readers = [m for m in p.graph.nodes if set(m.inputs) & set(n.outputs)]
        assert readers and all(m.op in ("SGD", "ApplyAdam") for m in readers)
        assert all((n.name, m.name) in edges for m in readers)
        assert all(p.op(m.name).start >= op.end for m in readers)
        if k:
            assert (ar[k - 1].name, n.name) in edges  # one at a time on the comm lane
        link = interconnect(preset(TARGET))
        assert op.end - op.start == pytest.approx(all_reduce_seconds(
            sum(p.graph.tensor_map[t].nbytes for t in n.inputs), 2, link))


def test_the_all_reduces_overlap_the_rest_of_backward():
    p = _dp_plan(_lenet())
    comm = [op for op in p.ops if op.stream == "comm"]
    backward = [op for op in p.ops if op.cpus and op.name.startswith("grad/")]
    overlap = sum(max(0.0, min(a.end, b.end) - max(a.start, b.start))
                  for a in comm[:-1] for b in backward)
    assert overlap > 0
    alone = plan(_lenet(), preset(TARGET))
    assert alone.summary.step_seconds <= p.summary.step_seconds
    assert p.summary.step_seconds <= alone.summary.step_seconds + sum(
        op.end - op.start for op in comm) + 1e-12


def test_the_timeline_draws_the_comm_lane_as_a_row():
    from planner.report.plots import timeline_plot

    svg = timeline_plot(_dp_plan(_lenet()).json_data, "svg").decode()
    assert ">stream comm</text>" in svg and ">AllReduce (" in svg  # (its legend entry)


def test_verify_finds_an_update_not_ordered_after_its_all_reduce():
    p = _dp_plan(_lenet())
    ar = next(op.name for op in p.ops if op.op == "AllReduce")
    cut = tuple(e for e in p.happens_before if e.before != ar)
    problems = verify_plan(p.model_copy(update={"happens_before": cut}))
    assert problems and any(ar in s for s in problems)


def test_one_rank_plans_the_graph_as_it_is():
    g = _lenet()
    assert not any(op.op == "AllReduce" for op in _dp_plan(g, ranks=1).ops)


def test_refusals_are_one_line():
    forward = build("lenet", image=8, batch=8)
    with pytest.raises(UserError, match="needs a training graph"):
        _dp_plan(forward)


def test_plan_command_takes_data_parallel(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert cli.main(["plan", "zoo:mlp?batch=4&hidden=8&in_features=6&classes=3",
                     "--train", "sgd", "--target", TARGET, "--data-parallel", "2",
                     "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    ar = [op for op in data["ops"] if op["op"] == "AllReduce"]
    # The default bucket (9 r alpha beta, megabytes) holds this small model's gradients.
    assert len(ar) == 1 and ar[0]["stream"] == "comm"
    assert data["provenance"]["options"]["data_parallel"]["ranks"] == 2
    assert cli.main(["verify", str(out)]) == 0


def test_ranks_sharing_a_host_plan_for_their_share_and_place_disjointly():
    # 4 ranks, 2 per host, on hosts of 28 cores (56 logical CPUs): the plan's ops use share
    # 0's compute cores (13; core 13 is the comm engine's), which local rank 1 maps onto its
    # own: no CPU of one rank is another's.
    target = preset(TARGET)
    p = plan(_lenet(), target, options=PlanOptions(data_parallel=DataParallelOptions(
        ranks=4, ranks_per_host=2, bucket_bytes=4096)))
    assert verify_plan(p) == []
    core_of = p.target.core_of
    assert core_of == tuple(c.core for c in target.logical_cpus)  # the whole host, named
    shares = [rank_cpus(core_of, 2, k) for k in (0, 1)]
    assert [len({core_of[c] for c in s.compute}) for s in shares] == [13, 13]
    assert [len({core_of[c] for c in s.comm}) for s in shares] == [1, 1]
    used = {c for op in p.ops for c in op.cpus}
    assert used and used <= set(shares[0].compute)
    assert all(n.attrs["ranks_per_host"] == 2 for n in p.graph.nodes if n.op == "AllReduce")
    moved = placement(core_of, 2, 1)
    there = {moved[c] for c in used}
    assert there <= set(shares[1].compute)
    every = [set(s.compute) | set(s.comm) for s in shares]
    assert not every[0] & every[1] and not set(shares[0].compute) & set(shares[0].comm)
    # each rank's share of the host's peaks: slower per step than one rank on the host
    whole = plan(_lenet(), target, options=PlanOptions(data_parallel=DataParallelOptions(
        ranks=4, bucket_bytes=4096)))
    assert p.summary.lower_bound_seconds >= whole.summary.lower_bound_seconds


def test_a_small_share_keeps_its_cores_for_compute():
    # 2 cores, 2 ranks: a core each, the comm threads beside the lanes on it.
    cpus = rank_cpus((0, 1), 2, 1)
    assert cpus.compute == cpus.comm == (1,)
    assert placement((0, 1), 2, 1) == [1, 1]
    assert rank_cpus((0, 1, 0, 1), 2, 0).compute == (0, 2)  # SMT siblings stay together


def test_ranks_per_host_refusals_are_one_line(tmp_path):
    with pytest.raises(UserError, match="need a core each; the host has 2"):
        rank_cpus((0, 1), 3, 0)
    with pytest.raises(ValueError, match="does not divide"):
        DataParallelOptions(ranks=4, ranks_per_host=3)
    with pytest.raises(UserError, match=r"LOCAL_WORLD_SIZE\): plan with --ranks-per-host 4"):
        local_rank(0, 2, {"LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "0"})
    with pytest.raises(UserError, match="LOCAL_RANK='x' is not one of 0..1"):
        local_rank(0, 2, {"LOCAL_RANK": "x"})
    out = tmp_path / "p.json"
    assert cli.main(["plan", "zoo:mlp?batch=4&hidden=8&in_features=6&classes=3",
                     "--train", "sgd", "--target", TARGET, "--data-parallel", "3",
                     "--ranks-per-host", "2", "-o", str(out)]) != 0
    assert cli.main(["plan", "zoo:mlp?batch=4&hidden=8&in_features=6&classes=3",
                     "--train", "sgd", "--target", TARGET, "--data-parallel", "2",
                     "--ranks-per-host", "2", "-o", str(out)]) == 0
    assert cli.main(["verify", str(out)]) == 0


def test_buckets_lie_side_by_side_in_the_arena():
    # Each bucket's gradients, in order, each at the previous one's end rounded up to 64
    # bytes: the all-reduce sums that span of the arena, and needs no scratch copy.
    p = _dp_plan(_lenet())
    at = {t.name: t for t in p.tensors}
    ar = [n for n in p.graph.nodes if n.op == "AllReduce"]
    assert ar and all(n.attrs["in_place"] == 1 for n in ar)
    for n in ar:
        for a, b in zip(n.inputs, n.inputs[1:], strict=False):
            assert at[b].offset == -(-(at[a].offset + at[a].bytes) // 64) * 64
        assert f"{n.name}@scratch" not in at
    assert verify_plan(p) == []


def test_verify_finds_a_bucket_not_side_by_side():
    p = _dp_plan(_lenet())
    n = next(n for n in p.graph.nodes if n.op == "AllReduce" and len(n.inputs) > 1)
    moved = n.inputs[1]
    tensors = tuple(t.model_copy(update={"offset": t.offset + 64}) if t.name == moved else t
                    for t in p.tensors)
    problems = verify_plan(p.model_copy(update={"tensors": tensors}))
    assert any(f"bucket of {n.name!r}: gradient {moved!r}" in s and "side by side" in s
               for s in problems), problems


def test_a_bucket_read_by_another_op_is_copied_not_summed_in_place():
    g = _lenet()
    grad = reduced_gradients(g)[0]
    kept = g.model_copy(update={"outputs": (*g.outputs, grad)})  # the step returns it
    p = _dp_plan(kept)
    n = next(n for n in p.graph.nodes if n.op == "AllReduce" and grad in n.inputs)
    assert n.attrs["in_place"] == 0
    assert f"{n.name}@scratch" in {t.name for t in p.tensors}
    assert verify_plan(p) == []


def test_a_budget_no_recompute_reaches_is_refused_in_one_line():
    """(A budget recompute reaches is met: tests/memory/test_dp_budget.py.)"""
    from planner.memory.options import MemoryOptions

    arena = _dp_plan(_lenet()).summary.memory.arena_bytes
    with pytest.raises(InfeasibleBudget, match="even with every offload and recompute .* "
                                               "the smallest feasible budget is") as refused:
        plan(_lenet(), preset(TARGET), options=PlanOptions(
            memory=MemoryOptions(budget_bytes=arena // 10),
            data_parallel=DataParallelOptions(ranks=2, bucket_bytes=4096)))
    assert "\n" not in str(refused.value) and refused.value.smallest_bytes > arena // 10


def test_fp16_loss_scaling_checks_the_averaged_gradients():
    """With fp16-mixed's loss scaling, UnscaleGrads reads the all-reduced gradients (so every
    rank sees the same overflow flag and skips the same steps), each reduced once; the
    all-reduces still start before backward ends."""
    g = make_training_graph(build("lenet", image=8, batch=8), Optimizer(kind="momentum"),
                            precision="fp16-mixed")
    (unscale,) = [n for n in g.nodes if n.op == "UnscaleGrads"]
    assert reduced_gradients(g) == [t for n in g.nodes for t in n.outputs
                                    if t in unscale.inputs[:-1]]
    p = _dp_plan(g)
    assert verify_plan(p) == []
    ar = [n for n in p.graph.nodes if n.op == "AllReduce"]
    reduced = {t for n in ar for t in n.outputs}
    (unscale,) = [n for n in p.graph.nodes if n.op == "UnscaleGrads"]
    assert set(unscale.inputs[:-1]) == reduced and len(ar) > 1
    assert not any(set(n.inputs) & reduced for n in p.graph.nodes if n is not unscale)
    first = min(p.op(n.name).start for n in ar)
    assert any(p.op(n.name).end > first for n in p.graph.nodes if n.name.startswith("grad/")
               and n.op != "UnscaleGrads")


def test_clip_grad_norm_reads_the_averaged_gradients():
    """clip_grad_norm_ reads the all-reduced gradients (the norm of the global batch's), and
    under ZeRO-1, whose ranks hold a shard of them, a ShardedClipGradNorm reads the shards
    (the CUDA executor has no kernel for it: refused in one line on a GPU target)."""
    g = make_training_graph(build("lenet", image=8, batch=8),
                            Optimizer(kind="momentum", clip_grad_norm=1.0))
    p = _dp_plan(g)
    assert verify_plan(p) == []
    reduced = {t for n in p.graph.nodes if n.op == "AllReduce" for t in n.outputs}
    (clip,) = [n for n in p.graph.nodes if n.op == "ClipGradNorm"]
    assert set(clip.inputs) == reduced
    z = _zero1_plan(g)
    assert verify_plan(z) == []
    (clip,) = [n for n in z.graph.nodes if n.op == "ShardedClipGradNorm"]
    assert set(clip.inputs) == {n.outputs[0] for n in z.graph.nodes if n.op == "ReduceScatter"}
    with pytest.raises(UserError, match="--shard-optimizer with clip_grad_norm runs on the CPU"):
        plan(g, preset("a100-80gb"), options=PlanOptions(data_parallel=DataParallelOptions(
            ranks=2, bucket_bytes=4096, shard_optimizer=True)))


# ---- --shard-optimizer (ZeRO-1) ----------------------------------------------------------------

def _zero1_plan(graph, ranks: int = 2, bucket_bytes: int | None = 4096):
    return plan(graph, preset(TARGET), options=PlanOptions(data_parallel=DataParallelOptions(
        ranks=ranks, bucket_bytes=bucket_bytes, shard_optimizer=True)))


def _shard(sizes: list[int], ranks: int) -> int:
    # Floats per rank's shard, the obvious way: members side by side, each at the previous
    # one's end rounded up to 16 floats (64 bytes); the span over the ranks, rounded up alike.
    end = 0
    for k, n in enumerate(sizes):
        end = (end + 15) // 16 * 16 * (k > 0) + n
    return (end + ranks - 1) // ranks + 15 & ~15


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_sharded_updates_run_on_the_comm_lane_after_their_reduce_scatter(kind):
    p = _zero1_plan(_lenet(kind))
    assert verify_plan(p) == []
    ops = {op.name: op for op in p.ops}
    edges = {(e.before, e.after) for e in p.happens_before}
    rs = [n for n in p.graph.nodes if n.op == "ReduceScatter"]
    su = {n.inputs[len(n.outputs) - len(optimizer_slots(kind))]: n
          for n in p.graph.nodes if n.op == "ShardedUpdate"}
    assert len(rs) > 1 and len(su) == len(rs)
    assert not any(n.op in ("SGD", "ApplyMomentum", "ApplyAdam", "AllReduce")
                   for n in p.graph.nodes)
    for n in rs:
        assert ops[n.name].stream == "comm"
        update = su[n.outputs[0]]  # its sharded update reads the gradient shard
        assert ops[update.name].stream == "comm" and (n.name, update.name) in edges
        assert update.attrs["update"] == {"sgd": "SGD", "momentum": "ApplyMomentum",
                                          "adam": "ApplyAdam"}[kind]


def optimizer_slots(kind: str) -> tuple[str, ...]:
    from planner.graph.optimizer import UPDATE_OPS

    return UPDATE_OPS[kind][1]


def test_sharded_buckets_are_padded_to_the_ranks_shards_in_the_arena():
    # A reduce-scatter's gradients and a sharded update's parameters lie side by side, in
    # order, in a block padded to ranks x shard floats that nothing else uses meanwhile.
    ranks = 4
    p = _zero1_plan(_lenet("adam"), ranks=ranks)
    at = {t.name: t for t in p.tensors}
    g = p.graph.tensor_map
    for n in p.graph.nodes:
        if n.op not in ("ReduceScatter", "ShardedUpdate"):
            continue
        members = n.inputs if n.op == "ReduceScatter" else n.inputs[:len(n.outputs) - 2]
        shard = _shard([g[t].size for t in members], ranks)
        grad = n.outputs[0] if n.op == "ReduceScatter" else n.inputs[len(members)]
        assert g[grad].shape == (shard,)
        for a, b in zip(members, members[1:], strict=False):
            assert at[b].offset == -(-(at[a].offset + at[a].bytes) // 64) * 64
        lo, hi = at[members[0]].offset, at[members[0]].offset + ranks * shard * 4
        assert at[members[-1]].offset + at[members[-1]].bytes <= hi
        order = next(op.order for op in p.ops if op.name == n.name)
        for t in p.tensors:  # nothing else lives in the block while the collective runs
            if t.tensor in members or t.alias_of in members or t.bytes == 0:
                continue
            if t.first <= order <= t.last:
                assert t.offset + t.bytes <= lo or t.offset >= hi, (n.name, t.name)


def test_each_rank_holds_a_shard_of_the_optimizer_state():
    # Adam's m and v: per rank, 1/N of the unsharded plan's, each bucket padded to N shards
    # of 64-byte multiples; the summary line says so.
    from planner.report.memory import format_memory, memory_report

    ranks = 4
    graph = _lenet("adam")
    whole, zero1 = _dp_plan(graph, ranks=ranks), _zero1_plan(graph, ranks=ranks)

    def state(p) -> int:
        return sum(t.nbytes for t in p.graph.tensors
                   if t.role == "optimizer-state" and not t.updates and t.shape != ())

    g = zero1.graph.tensor_map
    padded = 0
    for n in zero1.graph.nodes:
        if n.op == "ShardedUpdate":
            members = n.inputs[:len(n.outputs) - 2]
            padded += 2 * 4 * _shard([g[t].size for t in members], ranks)
    assert state(zero1) == padded
    assert state(whole) / ranks <= state(zero1) < state(whole) / ranks + 2 * 64 * len(g)
    data = json.loads(zero1.to_json())
    report = memory_report(data)
    assert report["sharded_over"] == ranks
    assert report["unsharded_optimizer_state_bytes"] == memory_report(
        json.loads(whole.to_json()))["optimizer_state_bytes"]
    assert "sharded over 4 ranks" in format_memory(data)
    assert whole.summary.memory.resident_bytes - zero1.summary.memory.resident_bytes == (
        state(whole) - state(zero1))


def test_verify_finds_a_sharded_bucket_not_laid_out_as_its_kernel_reads_it():
    p = _zero1_plan(_lenet("adam"))
    n = next(n for n in p.graph.nodes if n.op == "ShardedUpdate" and len(n.outputs) > 3)
    moved = n.inputs[1]
    tensors = tuple(t.model_copy(update={"offset": t.offset + 64}) if t.name == moved else t
                    for t in p.tensors)
    problems = verify_plan(p.model_copy(update={"tensors": tensors}))
    assert any(f"bucket of {n.name!r}: parameter {moved!r}" in s and "side by side" in s
               for s in problems), problems
    # a buffer moved into the padding of a reduce-scatter's bucket, live while it runs
    at, g = {t.name: t for t in p.tensors}, p.graph.tensor_map

    def tail(n) -> tuple[int, int]:  # [end of its last gradient, end of its padded block)
        return (at[n.inputs[-1]].offset + g[n.inputs[-1]].nbytes,
                at[n.inputs[0]].offset + 2 * g[n.outputs[0]].nbytes)

    rs = next(n for n in p.graph.nodes if n.op == "ReduceScatter" and tail(n)[0] < tail(n)[1])
    end = tail(rs)[0]
    order = next(op.order for op in p.ops if op.name == rs.name)
    other = next(t for t in p.tensors if t.first <= order <= t.last and t.bytes
                 and t.tensor not in rs.inputs and not t.alias_of and t.tensor != rs.outputs[0])
    tensors = tuple(t.model_copy(update={"offset": end}) if t.name == other.name else t
                    for t in p.tensors)
    problems = verify_plan(p.model_copy(update={"tensors": tensors}))
    assert any(f"bucket of {rs.name!r}: buffer {other.name!r} lies in the padding" in s
               for s in problems), problems


def test_shard_optimizer_refusals_are_one_line(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert cli.main(["plan", "zoo:mlp?batch=4&hidden=8&in_features=6&classes=3", "--train",
                     "adam", "--target", TARGET, "--shard-optimizer", "-o", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--shard-optimizer" in err[0] and "--data-parallel" in err[0]


def test_plan_command_takes_shard_optimizer(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert cli.main(["plan", "zoo:mlp?batch=4&hidden=8&in_features=6&classes=3", "--train",
                     "adam", "--target", TARGET, "--data-parallel", "2", "--shard-optimizer",
                     "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {op["op"] for op in data["ops"] if op.get("stream") == "comm"} == {
        "ReduceScatter", "ShardedUpdate"}
    assert data["provenance"]["options"]["data_parallel"]["shard_optimizer"] is True
    assert cli.main(["verify", str(out)]) == 0


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_sharded_references_of_one_rank_are_the_updates(kind):
    # The reference interpreter runs a sharded graph as rank 0; with one rank its shard is
    # the whole bucket, so two steps equal the graph's own per-parameter updates.
    import numpy as np

    from planner.graph.interpret import init_params, train_step
    from planner.step.collectives.data_parallel import with_sharded_updates

    g = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=3, classes=2),
                            Optimizer(kind=kind, lr=0.1))
    z = with_sharded_updates(g, buckets(g, 64), ranks=1)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32),
             "labels": rng.integers(0, 2, 4).astype(np.int64)}
    params = []
    for graph in (g, z):
        state = init_params(graph, seed=1)
        for _ in range(2):
            state = train_step(graph, feeds, state)[1]
        params.append({t.name: state[t.name] for t in graph.by_role("param")
                       if not t.updates})
    assert params[0].keys() == params[1].keys()
    for name, want in params[0].items():
        assert not np.array_equal(want, init_params(g, seed=1)[name])
        np.testing.assert_array_equal(params[1][name], want, err_msg=name)


def test_fit_finds_a_larger_batch_per_rank_with_the_optimizer_sharded(capsys):
    # An MLP whose Adam state (two copies of its 1 MiB of parameters) dominates: sharded over
    # 4 ranks, each holds half a copy, and a larger batch per rank fits the same budget.
    def largest(*flags: str) -> dict:
        assert cli.main(["fit", "zoo:mlp?hidden=512&in_features=512&classes=10", "--target",
                         TARGET, "--budget", "7MiB", "--train", "adam", "--multiple", "8",
                         "--data-parallel", "4", *flags, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    whole, zero1 = largest(), largest("--shard-optimizer")
    assert zero1["value"] > whole["value"] >= 8, (whole["value"], zero1["value"])
    assert zero1["peak_bytes"] <= 7 << 20
    assert cli.main(["fit", "zoo:mlp", "--target", TARGET, "--budget", "7MiB",
                     "--shard-optimizer"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--data-parallel" in err[0]


def test_grouped_updates_stay_after_what_ran_on_their_cpus():
    """Issue 32: the updates moved after the all-reduces run as parallel-loop groups; a member
    joining its group's run must still follow the op that ran on those CPUs before the run
    (the planner refused its own plan: two updates at the same time on logical CPU 0)."""
    g = make_training_graph(build("resnet", depth=18, batch=4, image=32, classes=10),
                            Optimizer(kind="momentum"))
    p = _dp_plan(g, ranks=4, bucket_bytes=None)  # plan() verifies; this one used to fail
    assert verify_plan(p) == []
    grouped = [op for op in p.ops if op.group and op.cpus]
    assert len({op.group for op in grouped}) < len(grouped)  # groups of several members
