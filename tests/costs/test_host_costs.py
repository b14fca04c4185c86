"""Measured costs kept per host (planner.costs.host_costs): a plan of this machine is priced
by measured times, each signature measured once (a later plan that shares kernels measures
only its new ones), a busy machine's measurements replaced when it is quiet, the best of
repeats kept, and the plan saying which of its signatures were measured."""

from __future__ import annotations

import json
import warnings

import pytest

from planner.costs.conv_layouts import profiled_signatures
from planner.costs.host_costs import (
    BUSY,
    CORUN_FIT,
    HostCosts,
    default_costs,
    host_table,
    read_store,
    store_path,
)
from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.costs.signature import OpSignature
from planner.errors import UserError
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph, Node, Tensor
from planner.pipeline import plan
from planner.target import preset
from planner.target.detect import detect
from planner.zoo import build

SIG = OpSignature(op="Relu", shapes=((256,),), dtypes=("float32",))


def table(seconds: float, threads: int = 1) -> CostTable:
    return CostTable(target="host", entries=(CostEntry(signature=SIG, cpu=(
        CpuSample(threads=threads, affinity="compact", seconds=seconds),)),))


def test_a_busy_measurement_is_measured_again_when_quiet_and_then_replaced():
    busy = HostCosts(table=CostTable(target="host")).keep(table(5e-6), load=BUSY + 1)
    assert busy.to_measure([SIG], load=BUSY + 1) == []       # still busy: kept as it is
    assert busy.to_measure([SIG], load=0.0) == [SIG]          # quiet: measure it again
    quiet = busy.keep(table(3e-6), load=0.0)
    assert quiet.table.entries[0].cpu[0].seconds == 3e-6 and quiet.loads[SIG.key] == 0.0
    assert quiet.to_measure([SIG], load=0.0) == []
    # A slower quiet repeat keeps the best; another thread count joins the entry.
    again = quiet.keep(table(4e-6), load=0.0).keep(table(2e-6, threads=2), load=0.0)
    assert [(s.threads, s.seconds, s.repeats) for s in again.table.entries[0].cpu] == [
        (1, 3e-6, 2), (2, 2e-6, 1)]


def figures(kappa: float, sigma: float, handoff: float, team: float = 1.1
            ) -> dict[str, float]:
    return {"contention": kappa, "corun_slowdown": sigma, "handoff_seconds": handoff,
            "team_scale": team}


def test_the_contention_figures_are_fitted_once_and_again_only_from_busy_to_quiet():
    fresh = HostCosts(table=CostTable(target="host"))
    assert fresh.to_fit("a", load=BUSY + 1) and fresh.to_fit("a", load=0.0)
    busy = fresh.fitted("a", figures(0.1, 1.5, 3e-5), load=BUSY + 1)
    assert busy.table.host_figures() == figures(0.1, 1.5, 3e-5)
    assert not busy.to_fit("a", load=BUSY + 1) and busy.to_fit("a", load=0.0)
    quiet = busy.fitted("a", figures(0.2, 1.2, 2e-5), load=0.0)
    assert not quiet.to_fit("a", load=0.0) and not quiet.to_fit("a", load=BUSY + 1)
    # Kept through later measurements of signatures (they fit none of their own), and in
    # the table a plan is priced by.
    kept = quiet.keep(table(1e-6), load=0.0)
    assert kept.corun_load == 0.0
    priced = kept.for_signatures([SIG], "a")
    assert priced.host_figures() == figures(0.2, 1.2, 2e-5)
    # One core: nothing to fit, and not tried again.
    assert not fresh.fitted("a", None, load=0.0).to_fit("a", load=0.0)


def test_each_step_is_priced_by_its_own_contention_figures():
    """The figures are the step's (host_costs: another model's priced ResNet-50's step at a
    sigma five times its own): a step fits its own the first time, keeps them beside the
    others', and a step not fitted (a data-parallel one) is priced by the ones fitted last."""
    a = HostCosts(table=CostTable(target="host")).fitted("a", figures(0.1, 0.7, 3e-5), 0.0)
    assert a.to_fit("b", load=0.0) and not a.to_fit("a", load=0.0)
    both = a.fitted("b", figures(0.05, 0.13, 5e-5), 0.0).keep(table(1e-6), load=0.0)
    assert both.for_signatures([SIG], "a").host_figures() == figures(0.1, 0.7, 3e-5)
    assert both.for_signatures([SIG], "b").host_figures() == figures(0.05, 0.13, 5e-5)
    assert both.for_signatures([SIG], "c").host_figures() == figures(0.05, 0.13, 5e-5)
    one_core = both.fitted("d", None, 0.0)
    assert one_core.for_signatures([SIG], "d").host_figures() == dict.fromkeys(
        figures(0, 0, 0))
    assert HostCosts.model_validate_json(both.model_dump_json()) == both


def test_figures_of_another_fit_are_fitted_again():
    # A store kept before the fit changed (no corun_fit recorded): its quiet figures, fitted
    # from the ops' stretches, priced co-running as free; fitted again, once.
    kept = HostCosts.model_validate({"table": {"target": "host", "contention": 0.02,
                                               "corun_slowdown": 0.0}, "corun_load": 0.0})
    assert kept.to_fit("a", load=0.0) and kept.to_fit("a", load=BUSY + 1)
    refit = kept.fitted("a", figures(0.02, 0.4, 2e-5), load=0.0)
    assert refit.corun_fit == CORUN_FIT and not refit.to_fit("a", load=0.0)
    assert refit.keep(table(1e-6), load=0.0).corun_fit == CORUN_FIT
    stale = refit.model_copy(update={"fits": {"a": refit.fits["a"].model_copy(
        update={"fit": CORUN_FIT - 1})}})
    assert stale.to_fit("a", load=0.0)


def test_signatures_measured_without_a_time_are_not_measured_again():
    other = OpSignature(op="Reshape", shapes=((4, 4),), dtypes=("float32",),
                        attrs={"shape": [16]})
    kept = HostCosts(table=CostTable(target="host")).keep(table(1e-6), 0.0, [SIG, other])
    assert kept.timeless == (other.key,) and kept.to_measure([SIG, other], 0.0) == []


def test_the_default_is_measured_on_the_host_only(monkeypatch):
    monkeypatch.delenv("PLANNER_COSTS", raising=False)
    assert default_costs(detect()) == "measured"
    assert default_costs(preset("knl-7250")) == "analytical"
    monkeypatch.setenv("PLANNER_COSTS", "analytical")
    assert default_costs(detect()) == "analytical"
    monkeypatch.setenv("PLANNER_COSTS", "fast")
    with pytest.raises(UserError, match="PLANNER_COSTS='fast'"):
        default_costs(detect())


def test_measured_costs_of_a_preset_are_refused():
    graph = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
                                Optimizer(kind="sgd"))
    with pytest.raises(UserError, match="'knl-7250' is not this machine"):
        host_table([graph], preset("knl-7250"), lambda *a: CostTable(target="knl-7250"))


def mlp(classes: int):
    return make_training_graph(build("mlp", batch=8, hidden=[16], in_features=8,
                                     classes=classes), Optimizer(kind="sgd", lr=0.1))


def test_a_second_graph_measures_only_the_kernels_the_first_did_not(tmp_path, monkeypatch):
    from codegen.profiling import measure_signatures

    # A store of its own (the built runtime stays where the suite's other tests keep it).
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path)
    asked: list[list[str]] = []

    def counting(signatures, target, progress=None):
        asked.append([s.key for s in signatures])
        return measure_signatures(signatures, target, progress, steps=2)

    host = detect()
    first, second = mlp(classes=4), mlp(classes=6)  # the same first layer, another head
    a = host_table([first], host, counting, load=0.0)
    keys_a = {s.key for s in profiled_signatures(first)}
    assert set(asked[0]) == keys_a and set(a.measured) == keys_a and a.kept == ()
    b = host_table([second], host, counting, load=0.0)
    keys_b = {s.key for s in profiled_signatures(second)}
    assert set(asked[1]) == keys_b - keys_a                  # the shared ones not again
    assert keys_a & keys_b and set(b.kept) == keys_a & keys_b
    assert host_table([second], host, counting, load=0.0).measured == ()
    assert len(asked) == 2
    # The plan is priced by every measured signature and says so.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(second, host, b.table)
    timeless = set(read_store(host).timeless)
    assert set(p.summary.measured_signatures) == keys_b - timeless
    assert set(p.summary.modelled_signatures) == keys_b & timeless
    assert p.summary.analytical_signatures == len(p.summary.modelled_signatures)
    # Without a table the plan records no lists: plans made before read as they did.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = plan(second, host)
    assert "measured_signatures" not in plain.to_json()


def test_the_cli_plans_the_host_from_kept_costs_and_says_so(tmp_path, monkeypatch, capsys):
    import planner.cli as cli

    monkeypatch.delenv("PLANNER_COSTS", raising=False)
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path)
    spec = "zoo:mlp?batch=4&hidden=8&in_features=4&classes=3"
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert cli.main(["plan", spec, "--train", "sgd", "--target", "host", "-o", a]) == 0
    first = capsys.readouterr()
    assert "measuring costs on this host: signatures 1-" in first.err
    # The host's contention figures fitted from the step's own co-running lanes, once.
    from codegen.build import runtime_key

    host = detect()
    store = read_store(host, runtime_key())  # the store of the kernels that measured
    assert store.corun_load is not None
    if host.cores >= 2 and host.cpu is not None:
        assert f"{host.cores} lane(s) of 1 thread(s)" in first.err
        assert store.table.corun_slowdown is not None
        assert store.table.handoff_seconds is not None
    assert cli.main(["plan", spec, "--train", "sgd", "--target", "host", "-o", b]) == 0
    second = capsys.readouterr()
    assert "measuring" not in second.err            # every signature kept: none measured
    assert "lane(s)" not in second.err              # nor the contention fitted again
    assert open(a).read() == open(b).read()
    assert cli.main(["show", b]) == 0
    assert "signature(s) priced by measured times" in capsys.readouterr().out
    # explain finds the table the plan was priced by, kept by its digest (issue 58).
    assert cli.main(["explain", b, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_seconds"] > 0
    # fit --pareto prices as plan does: the same table, and on a CPU nothing offloaded to
    # the host store (the RAM it would free), every point within the unconstrained plan.
    assert cli.main(["fit", spec, "--train", "sgd", "--target", "host", "--pareto",
                     "--points", "3", "--json"]) == 0
    curve = json.loads(capsys.readouterr().out)["curve"]
    made = json.loads(open(b).read())
    assert curve["costs_sha256"] == made["provenance"]["costs_sha256"]
    points = curve["points"]
    assert all(p["host_bytes"] == 0 and p["offload"] == [] for p in points)
    assert all(p["peak_bytes"] <= made["summary"]["memory"]["peak_bytes"] for p in points)
    steps = [p["step_seconds"] for p in sorted(points, key=lambda p: p["budget_bytes"])]
    assert steps == sorted(steps, reverse=True)
    # A plan whose table this host does not keep is refused in one line naming the way out.
    priced = tmp_path / "costs" / "priced" / f"{made['provenance']['costs_sha256']}.json"
    priced.unlink()
    assert cli.main(["explain", b]) != 0
    err = capsys.readouterr().err.strip()
    assert "does not keep" in err and "--costs FILE" in err and "\n" not in err
    analytical = str(tmp_path / "m.json")
    assert cli.main(["plan", spec, "--train", "sgd", "--target", "host", "--costs",
                     "analytical", "-o", analytical]) == 0
    assert "measured_signatures" not in open(analytical).read()
    assert cli.main(["plan", spec, "--train", "sgd", "--target", "knl-7250", "--costs",
                     "measured", "-o", str(tmp_path / "k.json")]) != 0
    assert "'knl-7250' is not this machine's CPUs" in capsys.readouterr().err


def test_a_signature_that_cannot_be_measured_is_left_to_the_model(tmp_path):
    from codegen.profiling import measure_signatures

    bad = OpSignature(op="NoSuchOp", shapes=((4,),), dtypes=("float32",))
    with pytest.warns(UserWarning, match="NoSuchOp.*not measured"):
        measured = measure_signatures([SIG, bad], detect(), steps=1)
    assert SIG in measured and bad not in measured
    kept = HostCosts(table=CostTable(target="host")).keep(measured, 0.0, [SIG, bad])
    assert kept.timeless == (bad.key,) and kept.to_measure([SIG, bad], 0.0) == []


def test_a_batch_writes_each_float_operand_just_before_its_signature_runs():
    """measure_signatures' graph (signatures_graph(written=True)): each float32 operand
    negated in the graph right before its consumer, integer ids fed as they are; the one-lane
    uniform plan runs each write just before its signature, the two-lane one hands some
    across lanes, as a step's producers do."""
    from codegen.profiling import signatures_graph
    from planner.pipeline import PlanOptions
    from planner.schedule import ScheduleOptions

    gather = OpSignature(op="Embedding", shapes=((10, 4), (3,)), dtypes=("float32", "int64"))
    matmul = OpSignature(op="MatMul", shapes=((8, 8), (8, 8)), dtypes=("float32", "float32"))
    g = signatures_graph([(gather, 1), (matmul, 1)], written=True)
    assert [(n.name, n.op) for n in g.nodes] == [
        ("s0_write0", "Neg"), ("s0_copy0", "Embedding"), ("s1_write0", "Neg"),
        ("s1_write1", "Neg"), ("s1_copy0", "MatMul")]
    assert g.tensor("s0_in1").role == "input" and g.tensor("s0_in0").role == "activation"
    host = preset("xeon-8180")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lanes = {inter: plan(g, host, None, PlanOptions(schedule=ScheduleOptions(
            strategy="uniform", intra=1, inter=inter))) for inter in (1, 2)}
    assert [o.name for o in sorted(lanes[1].ops, key=lambda o: o.order)] == [
        n.name for n in g.nodes]
    lane = {o.name: o.lane for o in lanes[2].ops}
    writer = {n.outputs[0]: n.name for n in g.nodes if n.op == "Neg"}
    assert any(lane[writer[t]] != lane[n.name] for n in g.nodes if n.op != "Neg"
               for t in n.inputs if t in writer)  # an operand handed across lanes


def test_a_measurement_beside_a_busy_neighbour_is_kept_as_busy(tmp_path, monkeypatch):
    """The load kept with a measurement is the other processes' share over the measurement
    itself, not the lagging load average: neighbours that spin through it (and that the
    average, read before, does not show) make it a busy one, measured again when quiet."""
    import math
    import os
    import subprocess
    import sys
    import time

    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path)
    monkeypatch.setattr("planner.costs.host_costs.load_now", lambda: 0.0)  # "quiet" before

    def meanwhile(signatures, target, progress=None):
        time.sleep(1.5)  # this process idle: the busy CPU time is the neighbours'
        return table(2e-6)

    g = Graph(name="g", kind="inference", tensors=(
        Tensor(name="x", shape=(256,), dtype="float32", role="input"),
        Tensor(name="y", shape=(256,), dtype="float32")),
        nodes=(Node(name="relu", op="Relu", inputs=("x",), outputs=("y",)),), outputs=("y",))
    host = detect()
    # Neighbours, not builds of ours: reaped only after the measurement, their CPU time is
    # no part of this process's children's (a build's, waited for, is).
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(max(1, math.ceil(2 * BUSY * (os.cpu_count() or 1))))]
    try:
        time.sleep(0.3)  # running
        host_table([g], host, meanwhile)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    store = read_store(host)
    assert store.loads[SIG.key] > BUSY
    assert store.to_measure([SIG], load=0.0) == [SIG]   # measured again once quiet


def test_stores_kept_before_the_measurements_recorded_their_own_load_are_not_trusted():
    """Version 1 stores kept the lagging load average with each entry (busy measurements
    among the quiet ones): their host key is not today's, so they are measured again."""
    import hashlib

    from planner import __version__
    from planner.costs.host_costs import STORE_VERSION, host_key
    from planner.ir.graph import canonical_json

    host = detect()
    data = host.model_dump(mode="json", exclude={"notes", "provenance"})
    v1 = hashlib.sha256(canonical_json({"target": data, "planner": __version__}).encode()
                        ).hexdigest()[:32]
    assert STORE_VERSION >= 2 and host_key(host) != v1


def test_a_batch_runs_each_signature_on_the_team_that_just_wrote_its_operands():
    """measure_signatures' plan per thread count k (profile_in_step's uniform k x 1) runs the
    writes of a signature's operands and then its copy on the same k CPUs, one after another
    and nothing between: the team is awake and the operands in its cores' caches, as after a
    uniform step's producer (the team's wake-up is no part of the batch's times that a step
    does not pay). On a 2-core VM the ops of both followed each other within 0.1 us."""
    from codegen.profiling import in_step_counts, signatures_graph
    from planner.costs.profile import ProfileOptions
    from planner.pipeline import PlanOptions
    from planner.schedule import ScheduleOptions

    matmul = OpSignature(op="MatMul", shapes=((8, 8), (8, 8)), dtypes=("float32", "float32"))
    g = signatures_graph([(SIG, 1), (matmul, 1)], written=True)
    host = preset("xeon-8180")
    for k in in_step_counts(host, ProfileOptions()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = plan(g, host, None, PlanOptions(schedule=ScheduleOptions(
                strategy="uniform", intra=k, inter=1)))
        ops = sorted(p.ops, key=lambda o: o.order)
        assert [o.name for o in ops] == [n.name for n in g.nodes]
        assert {(o.threads, o.cpus) for o in ops} == {(k, ops[0].cpus)}
        assert all(a.end <= b.start + 1e-12 for a, b in zip(ops, ops[1:], strict=False))


def test_times_of_another_kernel_library_are_measured_anew(monkeypatch, tmp_path):
    # A changed kernel (another runtime digest) keeps its own times: the old library's never
    # price it, and going back finds them kept.
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path)
    asked: list[str] = []

    def measure(signatures, target, progress=None):
        asked.append("measured")
        return CostTable(target=target.name, entries=tuple(
            CostEntry(signature=s, cpu=(CpuSample(threads=1, affinity="compact",
                                                  seconds=1e-6),)) for s in signatures))

    host = detect()
    graph = mlp(classes=4)
    assert host_table([graph], host, measure, load=0.0, kernels="old").measured
    assert host_table([graph], host, measure, load=0.0, kernels="new").measured
    assert host_table([graph], host, measure, load=0.0, kernels="old").measured == ()
    assert len(asked) == 2 and store_path(host, "old") != store_path(host, "new")


def test_a_blocked_signature_is_measured_on_blocked_operands(tmp_path):
    """A blocked step's signatures (OpSignature.layouts) are measured as the step runs them:
    signatures_graph writes each blocked operand with a depthwise convolution and reads each
    blocked output with another, so the step's blocked pass keeps exactly those operands
    blocked, and the copies' signatures are the ones asked for (a mismatch would be a plain
    kernel's time under a blocked key). Measured on this host, each comes back under its key."""
    from codegen.profiling import measure_signatures, signatures_graph
    from planner.costs.signature import graph_signatures, unique_signatures
    from planner.step.blocked import with_blocked
    from planner.target.backends import channel_block

    g = make_training_graph(build("resnet", depth=18, batch=2, image=32, width=0.25,
                                  classes=16), Optimizer(kind="sgd"))
    host = detect()
    block = channel_block(host) or 16
    asked = [s for s in unique_signatures(list(graph_signatures(with_blocked(g, block)).values()))
             if s.layouts]
    assert {"Conv2D", "Conv2DBackpropFilter", "BatchNorm", "BatchNormGrad", "MaxPool", "Add",
            "Relu"} <= {s.op for s in asked}
    harness = signatures_graph([(s, 2) for s in asked], written=True)
    ran = graph_signatures(with_blocked(harness, block))
    copies = {ran[n.name].key for n in harness.nodes if "_copy" in n.name}
    assert copies == {s.key for s in asked}
    if channel_block(host):
        few = [s for s in asked if s.op in ("BatchNormGrad", "Relu")][:2]
        measured = measure_signatures(few, host, steps=1)
        assert all(measured.entry(s) is not None and s in measured for s in few)
        # `planner profile` without --in-step: each kernel alone at each placement, the
        # blocked operands' writers and readers placed around its copies.
        from codegen.profiling import KernelTimer
        from planner.target.records import affinity_cpus

        timer = KernelTimer(host, tmp_path, steps=1, signatures=few)
        assert all(timer(s, 1, affinity_cpus(host, 1, "compact")) > 0 for s in few)


def test_the_harnesses_step_each_plan_on_its_main_schedule(tmp_path):
    """What a harness measures folds under the plan's own thread counts: the executors it
    steps (warmed_executor; steps_in_turns, the contention fit's) run the main schedule, not
    a variant the adaptive rule would try from the 8th step on (a one-lane plan switched to
    its two-core variant read as a one-lane step, and the fitted sigma moved 0.1 -> 0.9)."""
    from codegen.build import build
    from codegen.isolated import steps_in_turns
    from codegen.profiling import _uniform_plan, warmed_executor
    from planner.graph.interpret import init_params, random_feeds

    g = mlp(3)
    host = detect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lone = _uniform_plan(g, host, CostTable(target="host"), (1, 1), None)
    state, feeds = init_params(g, seed=0), random_feeds(g, seed=1)
    ex = warmed_executor(lone, tmp_path / "lone", state, feeds)
    assert ex.stats()["schedule"]["pinned"] and ex.stats()["schedule"]["running"] == "main"
    from codegen.render import render

    package = build(render(lone, tmp_path / "lone")).dir
    (run,) = steps_in_turns([package], state, feeds, 10)
    assert all(s["schedule"]["pinned"] and s["schedule"]["running"] == "main" for _, s in run)


def test_a_step_is_keyed_by_its_computation_not_its_names():
    """Another module of the same layers (other attribute paths, another graph name) is the
    same step to the contention figures; another size is another."""
    from planner.costs.host_costs import step_key

    g = mlp(3)
    index = {t.name: f"t{k}" for k, t in enumerate(g.tensors)}

    def renamed(name):
        return None if name is None else index[name]

    other = Graph(name="other", kind=g.kind, loss=renamed(g.loss),
                  outputs=tuple(index[t] for t in g.outputs),
                  tensors=tuple(t.model_copy(update={"name": index[t.name],
                                                     "updates": renamed(t.updates)})
                                for t in g.tensors),
                  nodes=tuple(n.model_copy(update={"name": f"n{k}",
                                                   "inputs": tuple(index[t] for t in n.inputs),
                                                   "outputs": tuple(index[t] for t in n.outputs)})
                              for k, n in enumerate(g.nodes)))
    assert step_key(other) == step_key(g) and other.to_json() != g.to_json()
    assert step_key(mlp(4)) != step_key(g)
