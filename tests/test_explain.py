"""planner explain: a recomputed tensor's price against the simulator without that decision,
an op's thread curve and slack against the plan's records, refusals of mismatched inputs."""

from __future__ import annotations

import warnings

import pytest

import planner.cli as cli
from planner.errors import InfeasibleBudget, UserError
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.memory.cpu_budget import cpu_budget_solve
from planner.memory.liveness import live_profile
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.pipeline.explain import explain, explain_op, explain_tensor, rederive
from planner.target import preset
from planner.zoo import build

TARGET = "xeon-8180"


@pytest.fixture(scope="module")
def budget_plan():
    """AlexNet (tiny) at its smallest recompute-only budget: pooling and LRN recomputed. Batch
    8, width 0.25: at batch 2 the convolutions' per-thread scratch (28 threads) is the peak
    alone, and running ops one at a time meets the smallest budget without a recompute."""
    g = make_training_graph(build("alexnet", batch=8, image=63, width=0.25, classes=4),
                            Optimizer(kind="sgd"))
    target = preset(TARGET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        free = plan(g, target).summary.memory
        options = PlanOptions(memory=MemoryOptions(budget_bytes=free.per_op_bound_bytes,
                                                   offload=False))
        try:
            plan(g, target, None, options)
        except InfeasibleBudget as e:
            options = PlanOptions(memory=MemoryOptions(budget_bytes=e.smallest_bytes,
                                                       offload=False))
        return plan(g, target, None, options)


def test_recomputed_tensor_price_is_the_simulated_difference(budget_plan):
    p = budget_plan
    recomputed = sorted({t.tensor for o in p.memory.ops if o.kind == "recompute"
                         for t in p.tensors if t.name in o.outputs and t.tensor})
    assert recomputed, "the budget must make the planner recompute"
    d = rederive(p, preset(TARGET))
    memory = d.options.memory
    # The search's decisions, replayed, are the plan: same step and same live-bytes peak.
    solved, _ = cpu_budget_solve(p.graph, d.schedule, d.model, memory)
    log = list(solved.state.log)
    replay, _ = cpu_budget_solve(p.graph, d.schedule, d.model, memory, moves=log,
                                 order=solved.order)
    assert replay.step_seconds == p.summary.step_seconds
    assert int(live_profile(replay.buffers)[1].max()) == p.summary.memory.load_bytes
    for tensor in recomputed:
        e = explain_tensor(d, tensor)
        assert e["placement"] == "recomputed"
        # Without the one decision that drops this tensor (its segment's recompute).
        segments = [s for s in solved.state.stash.segments if tensor in s.members]
        others = [m for m in log if not (m.kind == "recompute" and m.segment in
                                         {s.id for s in segments})]
        assert len(others) == len(log) - 1
        without, _ = cpu_budget_solve(p.graph, d.schedule, d.model, memory, moves=others,
                                     order=solved.order)
        assert e["seconds_paid"] == p.summary.step_seconds - without.step_seconds
        assert e["bytes_saved"] == (int(live_profile(without.buffers)[1].max())
                                    - p.summary.memory.load_bytes)
        # Dropping values cannot save more than their bytes; recomputing is never free.
        members = sum(p.graph.tensor(t).nbytes for s in segments for t in s.stashed)
        assert 0 <= e["bytes_saved"] <= members
        assert e["seconds_paid"] >= 0


def test_op_curve_and_critical_path(budget_plan):
    p = budget_plan
    d = rederive(p, preset(TARGET))
    first = p.ops[0]
    e = explain_op(d, first.name)
    assert e["threads"] == first.threads and e["lane"] == first.lane
    # The curve is the cost model's: its value at the planned count is the planned time.
    assert e["seconds_by_threads"][first.threads - 1] == pytest.approx(
        first.end - first.start, rel=1e-9)
    # The op ending last ends the step: no slack.
    last = max(p.ops, key=lambda o: o.end)
    assert explain_op(d, last.name)["critical"]
    whole = explain(d)
    assert {t["tensor"] for t in whole["tensors"]} and last.name in whole["critical_ops"]


def test_refuses_mismatched_inputs(budget_plan, tmp_path, capsys):
    p = budget_plan
    with pytest.raises(UserError, match="target"):
        rederive(p, preset("knl-7250"))
    edited = p.model_copy(update={"summary": p.summary.model_copy(
        update={"step_seconds": 1.0})})
    with pytest.raises(UserError, match="does not give this plan"):
        rederive(edited, preset(TARGET))
    path = tmp_path / "p.json"
    path.write_text(p.to_json())
    assert cli.main(["explain", str(path), "--target", "knl-7250"]) != 0
    err = capsys.readouterr().err.strip()
    assert "target" in err and "\n" not in err
    assert cli.main(["explain", str(path), "no-such"]) != 0
    assert "no-such" in capsys.readouterr().err
    assert cli.main(["explain", str(path), p.ops[0].name]) == 0
    assert "thread" in capsys.readouterr().out


def test_diff_says_which_tensors_changed_placement(budget_plan, tmp_path, capsys):
    import json

    p = budget_plan
    free = plan(p.graph, preset(TARGET))
    a, b = tmp_path / "free.json", tmp_path / "budget.json"
    a.write_text(free.to_json())
    b.write_text(p.to_json())
    assert cli.main(["diff", str(a), str(b), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    # Re-derived from the budget plan's records: the tensors its recompute ops write.
    recomputed = {t.tensor for o in p.memory.ops if o.kind == "recompute"
                  for t in p.tensors if t.name in o.outputs and t.tensor}
    assert d["placement"] == {t: ["kept", "recomputed"] for t in sorted(recomputed)}
    assert d["budget"] == [None, p.summary.memory.budget_bytes]
    assert cli.main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "memory budget: None ->" in out and "kept -> recomputed" in out


def test_gpu_conv_algorithm_among_its_candidates():
    g = make_training_graph(build("lenet", batch=2, image=16, width=0.5), Optimizer(kind="sgd"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(g, preset("k40c-12gb"))
        d = rederive(p, preset("k40c-12gb"))
    assert p.memory.convs
    for c in p.memory.convs:
        e = explain(d, c.node)["conv"]
        chosen = [a for a in e["candidates"] if a["algorithm"] == c.algorithm]
        # Unconstrained: the fastest candidate, with the workspace and time the plan records.
        assert chosen and chosen[0]["workspace_bytes"] == c.workspace_bytes
        assert chosen[0]["seconds"] == min(a["seconds"] for a in e["candidates"]) == c.seconds
