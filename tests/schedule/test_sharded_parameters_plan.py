"""--shard-parameters (ZeRO-3) planning: the LeNet plans, verifies and holds 1/N of its
parameters, gradients and optimizer state; each all-gather's prefetch distance follows the link
model within its memory bound; verify refuses broken gathered copies and updates; what does not
combine yet is refused in one line."""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

from planner import cli
from planner.errors import InfeasibleBudget, UserError
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.report.sharding import sharding_report
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset
from planner.target.interconnect import Interconnect
from planner.verify import verify_plan_data
from planner.zoo import build

TARGET = "xeon-8180"


def _graph(kind="adam", **opt):
    return make_training_graph(build("lenet", batch=8, image=12), Optimizer(kind=kind, **opt))


def _plan(graph=None, link=None, target=TARGET, shard=True, **dp):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph or _graph(), preset(target), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=2, bucket_bytes=4096, link=link,
                                              shard_parameters=shard, **dp)))


@pytest.fixture(scope="module")
def zero3():
    return json.loads(_plan().to_json())


def test_a_sharded_plan_holds_its_share_of_parameters_gradients_and_state(zero3):
    assert verify_plan_data(zero3) == []
    r = sharding_report(zero3)
    assert r["ranks"] == 2
    # each kind's shard bytes: half the unsharded, plus at most the padding of each bucket
    # (64 bytes per rank and bucket at most)
    buckets = len({g["name"].split("/")[1] for g in r["gathers"]})
    for kind, held in r["held_bytes"].items():
        whole = r["unsharded_bytes"][kind]
        assert whole // 2 <= held <= whole // 2 + 64 * buckets * (1 + (kind == "optimizer "
                                                                        "state")), kind
    nodes = zero3["graph"]["nodes"]
    # no parameter by its name: persistent params are the shards alone
    persistent = {t["name"] for t in zero3["graph"]["tensors"] if t["role"] == "param"
                  and not t.get("updates") and not t["name"].startswith("optim/")}
    assert persistent == {n["inputs"][0] for n in nodes if n["op"] == "AllGather"}
    # gathered copies are not persistent: the arena reuses their bytes after the last reader
    unsharded = json.loads(_plan(shard=False).to_json())
    assert zero3["summary"]["memory"]["arena_bytes"] < unsharded["summary"]["memory"][
        "arena_bytes"]
    assert 0 < r["gathered_window_bytes"] <= r["unsharded_bytes"]["parameters"] + 64 * 2 * buckets


def test_the_prefetch_distance_follows_the_link_within_its_memory_bound():
    """A free link needs no prefetch; a slow one issues each gather as far ahead as its
    memory bound lets it (not before the previous first reader)."""
    fast = sharding_report(json.loads(_plan(link=Interconnect(
        bandwidth=1e15, latency_seconds=1e-12)).to_json()))
    slow_plan = json.loads(_plan(link=Interconnect(bandwidth=1e6,
                                                   latency_seconds=1e-2)).to_json())
    slow = sharding_report(slow_plan)
    assert sum(g["prefetch"] for g in slow["gathers"]) > sum(g["prefetch"]
                                                             for g in fast["gathers"])
    # the bound: a gather is issued after the op before (its first reader - prefetch), which
    # comes no earlier than the previous gather's first reader
    order = {o["name"]: o["order"] for o in slow_plan["ops"]}
    first = [order[g["first_reader"]] for g in slow["gathers"]]
    assert first == sorted(first)


def _node(data, name):
    return next(n for n in data["graph"]["nodes"] if n["name"] == name)


def test_verify_refuses_a_reader_of_a_freed_copy(zero3):
    """A backward reader pointed at the forward copy that was freed after the last forward
    reader (its bytes reused) in place of the copy gathered again."""
    data = copy.deepcopy(zero3)
    back = next(n for n in data["graph"]["nodes"] if n["name"].endswith("/backward"))
    reader = next(n for n in data["graph"]["nodes"] if set(back["outputs"]) & set(n["inputs"]))
    reader["inputs"] = [t.replace("regathered/", "gathered/") for t in reader["inputs"]]
    problems = verify_plan_data(data)
    assert problems and any(reader["name"] in p for p in problems), problems


def test_verify_refuses_an_update_stepping_another_buckets_gradient_shard():
    """Two updates' gradient shards swapped: of equal sizes (this MLP's fc1 and fc3 buckets:
    32 floats a rank), only the re-derived buckets (the gathered shapes against the
    scattered ones) tell them apart."""
    mlp = make_training_graph(build("mlp", batch=4, hidden=[8, 8], in_features=6, classes=3),
                              Optimizer(kind="sgd"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = json.loads(plan(mlp, preset(TARGET), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=2, bucket_bytes=64,
                                              shard_parameters=True))).to_json())
    assert verify_plan_data(data) == []
    sizes = {t["name"]: t["shape"] for t in data["graph"]["tensors"]}
    ups = [n for n in data["graph"]["nodes"] if n["name"].startswith("shardedupdate/")]
    a, b = next((a, b) for i, a in enumerate(ups) for b in ups[i + 1:]
                if sizes[a["inputs"][1]] == sizes[b["inputs"][1]])
    a["inputs"][1], b["inputs"][1] = b["inputs"][1], a["inputs"][1]
    problems = verify_plan_data(data)
    assert any(f"update {a['name']!r} steps shard" in p and "not the same floats" in p
               for p in problems), problems


def test_verify_refuses_a_reader_not_ordered_after_its_all_gather(zero3):
    data = copy.deepcopy(zero3)
    gather = next(n for n in data["graph"]["nodes"] if n["op"] == "AllGather")
    reader = next(n["name"] for n in data["graph"]["nodes"]
                  if set(gather["outputs"]) & set(n["inputs"]))
    ops = {o["name"]: o for o in data["ops"]}
    ops[gather["name"]]["lane"] = 1 + max(o["lane"] for o in data["ops"])
    data["happens_before"] = [e for e in data["happens_before"]
                              if e["before"] != gather["name"]]
    problems = verify_plan_data(data)
    assert any(f"op {reader!r} reads gathered copy" in p for p in problems), problems


def test_clip_grad_norm_clips_the_gradient_shards_after_the_last_reduce_scatter():
    """A ZeRO-3 plan with clip_grad_norm: one ShardedClipGradNorm on the comm lane reads every
    reduce-scatter's shard, after them all, and every update reads its shard clipped; verify
    follows the update's gradient through the clip, and refuses an update reading a shard the
    clip does not order before it."""
    p = _plan(_graph("adamw", clip_grad_norm=1.0))
    data = json.loads(p.to_json())
    assert verify_plan_data(data) == []
    (clip,) = [n for n in p.graph.nodes if n.op == "ShardedClipGradNorm"]
    scatters = [n for n in p.graph.nodes if n.op == "ReduceScatter"]
    assert list(clip.inputs) == [n.outputs[0] for n in scatters]
    assert p.op(clip.name).stream == "comm"
    assert all(p.op(clip.name).start >= p.op(n.name).end for n in scatters)
    updates = [n for n in p.graph.nodes
               if n.op == "ApplyAdam" and n.inputs[0].startswith("shard/")]
    assert sorted(u.inputs[1] for u in updates) == sorted(clip.outputs[:-1])
    up = updates[0]
    data["happens_before"] = [e for e in data["happens_before"] if e["after"] != up.name]
    for op in data["ops"]:
        if op["name"] == up.name:
            op["lane"] = 1 + max(o["lane"] for o in data["ops"])
    assert any(f"update {up.name!r} is not ordered after the clip" in q
               for q in verify_plan_data(data))


def test_a_gpu_target_and_one_rank_are_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(UserError, match="CPU executor only") as e:
        _plan(target="a100-80gb")
    assert "\n" not in str(e.value)
    assert cli.main(["plan", "zoo:mlp?batch=4&hidden=8&in_features=6&classes=3", "--train",
                     "sgd", "--target", TARGET, "--shard-parameters",
                     "-o", str(tmp_path / "p.json")]) != 0
    err = capsys.readouterr().err.strip()
    assert "--shard-parameters shards the parameters among the ranks of --data-parallel N" \
        in err and "\n" not in err


def test_show_prints_the_shards_and_each_all_gathers_decisions(tmp_path, capsys):
    out = tmp_path / "z3.json"
    assert cli.main(["plan", "zoo:mlp?batch=4&hidden=8,8&in_features=6&classes=3", "--train",
                     "adam", "--target", TARGET, "--data-parallel", "2", "--bucket-bytes",
                     "64", "--shard-parameters", "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "zero-3      per rank: parameters" in text and "sharded over 2 ranks" in text
    assert "kept for backward" in text and "freed after its last forward reader" in text
    assert np.sum(["issued" in line for line in text.splitlines()]) == 4


def test_fit_finds_the_largest_batch_per_rank_of_a_sharded_plan():
    """planner fit --data-parallel 2 --shard-parameters: the batch it answers plans within
    the budget with its shards and all-gathers (recomputing where liveness alone does not
    fit, planner.memory.cpu_budget); one more row does not."""
    from planner.fit import fit

    spec = "zoo:mlp?hidden=64,64&in_features=32&classes=4"
    dp = DataParallelOptions(ranks=2, shard_parameters=True, bucket_bytes=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fit(spec, preset(TARGET), 200_000, "batch", data_parallel=dp, optimizer="adam")
    assert r.value > 0 and r.peak_bytes <= 200_000

    def fits(batch):
        g = make_training_graph(build("mlp", batch=batch, hidden=[64, 64], in_features=32,
                                      classes=4), Optimizer(kind="adam"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                p = plan(g, preset(TARGET), options=PlanOptions(
                    data_parallel=dp, memory=MemoryOptions(budget_bytes=200_000,
                                                           offload=False)))
            except InfeasibleBudget:
                return False
        assert any(op.op == "AllGather" for op in p.ops)
        return p.summary.memory.arena_bytes <= 200_000

    assert fits(r.value) and not fits(r.value + 1)


def test_the_generated_arena_holds_every_sharded_buckets_padding():
    """The executor's arena (codegen.layout) runs on to each reduce-scatter's and
    all-gather's last shard, past its last member: with 4 ranks on this host the harness's
    MLP had a gradient bucket at the arena's top, and ranks 2 and 3 wrote past the end of an
    arena sized by its members (heap corruption). Here every bucket is moved to the top in
    turn (its members side by side, as planned) and the arena must hold its padding."""
    from codegen.layout import arena_layout
    from planner.ops.collective import bucket_places, shard_floats

    mlp = make_training_graph(build("mlp", batch=8, hidden=[16, 12], in_features=10,
                                    classes=4), Optimizer(kind="sgd"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(mlp, preset(TARGET), options=PlanOptions(data_parallel=DataParallelOptions(
            ranks=4, bucket_bytes=256, shard_parameters=True)))
    tm = p.graph.tensor_map
    rows = [t.model_dump() for t in p.tensors]
    top = arena_layout(p.graph, rows).bytes
    padded = 0
    for n in p.graph.nodes:
        if n.op not in ("AllGather", "ReduceScatter"):
            continue
        members = n.outputs if n.op == "AllGather" else n.inputs
        sizes = [tm[t].size for t in members]
        places, last = bucket_places(sizes)
        moved = [dict(r, offset=top + 4 * places[members.index(r["tensor"])])
                 if r["tensor"] in members and r["name"] == r["tensor"] else r for r in rows]
        end = top + 4 * 4 * shard_floats(sizes, 4)
        padded += top + 4 * last < end  # the padding runs past the last member
        assert arena_layout(p.graph, moved).bytes >= end, n.name
    assert padded >= 2


def test_explain_says_why_an_all_gather_starts_where_it_does(tmp_path, capsys):
    """planner explain re-derives a ZeRO-3 plan and explains each gather: the ops it overlaps
    are its prefetch distance; on a slow link they do not cover it (its reader waits), for a
    reason it names; on a free one its reader does not wait (but for its own time)."""
    from planner.pipeline.explain import explain, rederive
    from planner.report.explain_gather import explain_gather

    for link, waits in ((Interconnect(bandwidth=1e6, latency_seconds=1e-2), True),
                        (Interconnect(bandwidth=1e15, latency_seconds=1e-12), False)):
        p = _plan(link=link)
        for g in (n.name for n in p.graph.nodes if n.op == "AllGather"):
            e = explain_gather(p, g)
            assert e["prefetch"] == len(e["overlaps"])
            # (free: a gather issued at the step's start, with nothing to run behind, holds
            # its reader up by its own picoseconds at most)
            assert e["stall_seconds"] > 0 if waits else e["stall_seconds"] <= e["seconds"]
            if waits or e["stall_seconds"] == 0:
                assert e["not_earlier"].startswith(("the comm lane", "the memory bound",
                                                    "its copy reuses") if waits else "the time")
    out = tmp_path / "z3.json"
    out.write_text(_plan().to_json())
    assert cli.main(["explain", str(out), "allgather/0"]) == 0
    text = capsys.readouterr().out
    assert "all-gather allgather/0:" in text and "op(s) ahead of its first reader" in text
    assert "cost model's time by thread count" not in text
    assert explain(rederive(_plan(), preset(TARGET)), "allgather/0")["all_gather"]["bytes"] > 0


SWEEP = {"mlp": "zoo:mlp?batch=8&hidden=16,12&in_features=10&classes=4",
         "lenet": "zoo:lenet?image=8&batch=16",
         "resnet-18": "zoo:resnet?depth=18&batch=4&image=32&classes=10"}


@pytest.mark.parametrize("model", sorted(SWEEP))
def test_every_optimizer_and_precision_plans_and_verifies_or_is_refused_in_one_line(model):
    """SGD, momentum, Adam x fp32, bf16-mixed, fp16-mixed, on 2 ranks of xeon-8180 and 4 of
    a two-core host (ResNet-18 on the first only): a plan with all-gathers that verifies, or
    fp16-mixed's loss scaling over the shards (one ShardedUnscaleGrads reading every
    reduce-scatter's shard, whose flag every skip and the scale's update read)."""
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.verify import verify_plan
    from tests.targets import two_cores

    places = [(2, preset(TARGET))] + ([] if model == "resnet-18" else [(4, two_cores())])
    for optimizer in ("sgd", "momentum", "adam"):
        for precision in ("fp32", "bf16-mixed", "fp16-mixed"):
            graph = prepare(SWEEP[model], GraphOptions(optimizer=Optimizer(kind=optimizer),
                                                       precision=precision))
            for ranks, target in places:
                options = PlanOptions(data_parallel=DataParallelOptions(
                    ranks=ranks, shard_parameters=True))
                where = (model, optimizer, precision, ranks, target.name)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    p = plan(graph, target, options=options)
                assert any(op.op == "AllGather" for op in p.ops), where
                assert verify_plan(p) == [], where
                unscale = [op for op in p.ops if op.op == "ShardedUnscaleGrads"]
                assert len(unscale) == (precision == "fp16-mixed"), where


def test_diff_shows_the_prefetch_distances_another_link_gives():
    from planner.report.diff import diff_plans

    slow = json.loads(_plan(link=Interconnect(bandwidth=1e6, latency_seconds=1e-2)).to_json())
    fast = json.loads(_plan(link=Interconnect(bandwidth=1e15,
                                              latency_seconds=1e-12)).to_json())
    changed = [c for c in diff_plans(slow, fast)["by_type"].get("AllGather", [])
               if "prefetch" in c]
    assert changed and all(c["prefetch"][0] != c["prefetch"][1] for c in changed)


def test_the_state_dict_layout_of_a_sharded_plan_names_whole_parameters(zero3):
    """state_dict reads a ZeRO-3 plan by bucket: each bucket's parameters as its all-gathers
    write them (not the shard, which the update op's first input is), its state shards by
    torch's slot names; the unsharded layout is never asked for it."""
    from planner.ir.graph import Graph
    from planner.runtime.checkpoint import TORCH_SLOTS
    from planner.runtime.sharded import sharded_buckets
    from planner.runtime.sharded_checkpoint import held_shards, sharded_layout

    layout = sharded_layout(Graph.model_validate(zero3["graph"]), TORCH_SLOTS)
    want = sharded_buckets(zero3)
    assert {b.shard: list(b.params) for b in layout.buckets} == {
        s: names for s, (names, _, _) in want.items()}
    assert all(b.slots == {"exp_avg": f"{b.shard[:-len('param')]}m",
                           "exp_avg_sq": f"{b.shard[:-len('param')]}v"}
               for b in layout.buckets)
    assert layout.step is not None and not layout.step.startswith("shard/")
    assert held_shards(layout) == {t for b in layout.buckets
                                   for t in (b.shard, *b.slots.values())}


def test_shard_params_names_a_missing_or_misshapen_parameter(zero3):
    from planner.runtime.sharded import gather_params, shard_params, sharded_buckets

    names = {n: s for ns, ss, _ in sharded_buckets(zero3).values()
             for n, s in zip(ns, ss, strict=True)}
    full = {n: np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) for n, s in names.items()}
    shards = [shard_params(zero3, full, r) for r in range(2)]
    back = gather_params(zero3, shards)
    assert all(np.array_equal(back[n], full[n]) for n in full)
    name = sorted(full)[0]
    with pytest.raises(UserError, match=f"parameter {name!r} is missing"):
        shard_params(zero3, {k: v for k, v in full.items() if k != name}, 0)
    with pytest.raises(UserError, match=f"parameter {name!r} has shape"):
        shard_params(zero3, {**full, name: np.zeros(3, np.float32)}, 0)


def test_default_buckets_keep_the_gathered_window_below_what_the_shards_save():
    """Without --bucket-bytes a ZeRO-3 bucket closes at (N-1)/2N of the parameters: the
    zoo's GPT on xeon-8180, whose link alone makes one bucket of all its parameters (every
    one gathered at once, more than the shards save), gathers at most half of them at once."""
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare

    graph = prepare("zoo:gpt?batch=2", GraphOptions(optimizer=Optimizer(kind="adamw")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sharding_report(json.loads(plan(graph, preset(TARGET), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=2, shard_parameters=True))).to_json()))
    assert len({g["name"].split("/")[1] for g in r["gathers"]}) > 2
    assert r["gathered_window_bytes"] < r["unsharded_bytes"]["parameters"] // 2


def test_a_group_member_a_collective_delays_holds_its_cpus_until_it_ends(tmp_path):
    """A co-run group of sharded updates whose last member waits for a later reduce-scatter:
    what the schedule puts after the group on one of its CPUs waits for that member, not for
    the member ordered last (the 16-rank plan failed its verification: two updates on CPU 22
    at once)."""
    out = tmp_path / "gpt16.json"
    assert cli.main(["plan", "zoo:gpt?batch=8&seq=256&dim=768&heads=12&layers=12", "--train",
                     "adamw", "--target", TARGET, "--data-parallel", "16",
                     "--shard-parameters", "--no-evaluation", "-o", str(out)]) == 0
    assert verify_plan_data(json.loads(out.read_text())) == []


def test_a_gather_whose_earlier_copy_is_read_after_its_reader_is_still_placed(monkeypatch):
    """A bucket's forward copy read in the backward after that bucket's backward gather's first
    reader (the BatchNorm fold once made one, run after the collectives: its gradient read the
    forward's gathered bias): no op lies between the memory bound and the reader, and the
    gather is issued right behind the op before the reader rather than failing the plan."""
    import planner.step as step
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.verify import verify_plan

    order = dict(step.STEP_PASSES)
    names = ["for_cores", "layouts", "collectives", "fold_norm_relu", "fold_sum_relu", "blocked"]
    monkeypatch.setattr(step, "STEP_PASSES", tuple((n, order[n]) for n in names))
    graph = prepare(SWEEP["resnet-18"], GraphOptions(optimizer=Optimizer(kind="sgd")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, preset(TARGET), options=PlanOptions(data_parallel=DataParallelOptions(
            ranks=2, shard_parameters=True)))
    bias_reads = [n for n in p.graph.nodes if n.op == "BatchNormGrad" and len(n.inputs) == 6
                  and p.graph.producer[n.inputs[5]].op == "AllGather"]
    assert bias_reads, "the fold read a gathered bias"
    assert verify_plan(p) == []
