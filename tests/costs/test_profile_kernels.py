"""`planner profile` measures the generated kernels on this machine; plans priced by the
table use it; an executor's stats fold back in."""

from __future__ import annotations

import json

import pytest

import planner.cli as cli
from codegen.profiling import KernelTimer, copies_graph
from planner.costs import CostTable, load_table
from planner.costs.feedback import fold_stats
from planner.costs.profile import ProfileOptions
from planner.costs.signature import OpSignature, graph_signatures
from planner.target.detect import detect

SPEC = "zoo:mlp?batch=8&hidden=16&in_features=12&classes=3"


def test_copies_of_an_op_compute_the_reference():
    sig = OpSignature(op="MatMul", shapes=((4, 6), (6, 5)), dtypes=("float32", "float32"))
    g = copies_graph(sig, 3)
    assert [n.op for n in g.nodes] == ["MatMul"] * 3 and len(g.outputs) == 3


def test_the_timer_measures_every_placement_of_the_grid(tmp_path):
    target = detect()
    timer = KernelTimer(target, tmp_path, ProfileOptions(interval=1), steps=2)
    sig = OpSignature(op="Relu", shapes=((256, 256),), dtypes=("float32",))
    grid = timer.grid()
    assert (1, grid[0][1]) == grid[0] and max(k for k, _ in grid) == target.cores
    times = [timer(sig, k, cpus) for k, cpus in grid]
    # A Relu of 256 KiB reads and writes 512 KiB: no CPU moves that in under 0.5 us (1 TB/s),
    # and none takes 50 ms over it.
    moved = 2 * 256 * 256 * 4
    assert all(moved / 1e12 < t < 0.05 for t in times), times
    # 64x the elements on one thread: the time grows with the work (at least 8x: cache
    # effects and timer noise stay well inside that), so the timer times the kernel, not a
    # constant overhead.
    big = OpSignature(op="Relu", shapes=((2048, 2048),), dtypes=("float32",))
    assert timer(big, 1, grid[0][1]) > 8 * timer(sig, 1, grid[0][1])
    with pytest.raises(ValueError, match="not in the measured grid"):
        timer(sig, 1, (10_000,))


def test_profile_then_plan_with_the_measured_table_and_resume(tmp_path, capsys):
    costs = str(tmp_path / "costs.json")
    assert cli.main(["profile", SPEC, "--train", "sgd", "--target", "host", "-o", costs,
                     "--repeats", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    table = load_table(costs)
    assert result["complete"] and result["measured"] == len(table.entries) > 0
    assert not result["failures"]
    # A second run finds every signature measured.
    assert cli.main(["profile", SPEC, "--train", "sgd", "--target", "host", "-o", costs,
                     "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["measured"] == 0 and again["skipped"] == result["measured"]
    plan = str(tmp_path / "p.json")
    assert cli.main(["plan", SPEC, "--train", "sgd", "--target", "host", "--costs", costs,
                     "-o", plan, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["analytical_signatures"] == 0


def test_stats_of_a_run_fold_into_the_table():
    from planner.frontend.autodiff import Optimizer, make_training_graph
    from planner.pipeline import plan
    from planner.target import preset
    from planner.zoo import build

    g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
                            Optimizer(kind="sgd"))
    p = plan(g, preset("xeon-8180"))
    stats = {"ops": [{"name": o.name, "calls": 2, "seconds": 3e-5} for o in p.ops]}
    table = fold_stats(CostTable(target="xeon-8180"), p, stats)
    sigs = graph_signatures(g)
    for o in p.ops:
        entry = table.entry(sigs[o.name])
        assert any(s.threads == o.threads and s.seconds == pytest.approx(3e-5)
                   for s in entry.cpu)
    repriced = plan(g, preset("xeon-8180"), table)
    assert repriced.summary.analytical_signatures == 0


def test_folded_co_running_times_are_times_alone_again():
    # A plan whose simulator charged co-running ops for what they share, measured exactly as
    # predicted: folding its run gives back the table's times alone (charged once when the
    # graph is planned again, not twice).
    from planner.frontend.autodiff import Optimizer, make_training_graph
    from planner.pipeline import PlanOptions, plan
    from planner.schedule import ScheduleOptions
    from planner.target import preset
    from planner.zoo import build

    target = preset("xeon-8180")
    g = make_training_graph(build("mlp", batch=64, hidden=[64, 64], in_features=32,
                                  classes=4), Optimizer(kind="sgd"))

    def lanes(inter, table):
        return plan(g, target, table, PlanOptions(schedule=ScheduleOptions(
            strategy="uniform", intra=1, inter=inter)))

    one_at_a_time = lanes(1, None)
    alone = fold_stats(CostTable(target=target.name), one_at_a_time,
                       {"ops": [{"name": o.name, "calls": 1, "seconds": 1e-4}
                                for o in one_at_a_time.ops]})
    shared = alone.model_copy(update={"corun_slowdown": 1.0})
    p = lanes(4, shared)
    stretched = [o for o in p.ops if o.end - o.start > 1e-4 * (1 + 1e-9)]
    assert stretched, "nothing co-ran"
    stats = {"ops": [{"name": o.name, "calls": 1, "seconds": o.end - o.start} for o in p.ops]}
    folded = fold_stats(shared, p, stats)
    sigs = graph_signatures(g)
    for o in p.ops:
        (sample,) = [s for s in folded.entry(sigs[o.name]).cpu if s.threads == 1]
        assert sample.seconds == pytest.approx(1e-4, rel=1e-9), o.name


@pytest.mark.parametrize("scale", [0.8, 1.25])
def test_a_team_scaled_table_keeps_the_steps_times_as_it_prices_them(scale):
    # One lane of every core, each op measured exactly as planned: folded into a table with a
    # team scale, the entries price each op as it ran, neither scaled twice nor left under.
    from planner.costs import CostModel
    from planner.frontend.autodiff import Optimizer, make_training_graph
    from planner.pipeline import PlanOptions, plan
    from planner.schedule import ScheduleOptions
    from planner.target import preset
    from planner.zoo import build

    target = preset("xeon-8180")
    g = make_training_graph(build("mlp", batch=64, hidden=[64, 64], in_features=32,
                                  classes=4), Optimizer(kind="sgd"))
    options = PlanOptions(schedule=ScheduleOptions(strategy="uniform", intra=target.cores,
                                                   inter=1))
    first = plan(g, target, None, options)
    base = fold_stats(CostTable(target=target.name), first,
                      {"ops": [{"name": o.name, "calls": 1, "seconds": 1e-4}
                               for o in first.ops]})
    scaled = base.model_copy(update={"team_scale": scale})
    p = plan(g, target, scaled, options)
    ran = {o.name: 3e-4 for o in p.ops}
    folded = fold_stats(scaled, p, {"ops": [{"name": k, "calls": 1, "seconds": v}
                                            for k, v in ran.items()]})
    model, sigs = CostModel(target, folded), graph_signatures(p.graph)
    for o in p.ops:
        assert model.time(sigs[o.name], o.threads, "compact").seconds == pytest.approx(
            ran[o.name], rel=1e-9), o.name
    assert any(o.threads > 1 for o in p.ops)


def test_in_step_profile_measures_every_op_at_every_thread_count(tmp_path, capsys):
    from planner.frontend.autodiff import Optimizer, make_training_graph
    from planner.frontend.load import load_graph

    costs = str(tmp_path / "in-step.json")
    assert cli.main(["profile", SPEC, "--train", "sgd", "--target", "host", "-o", costs,
                     "--in-step", "--interval", "1", "--repeats", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"]
    table = load_table(costs)
    graph = make_training_graph(load_graph(SPEC), Optimizer(kind="sgd"))
    cores = detect().cores
    for sig in graph_signatures(graph).values():
        entry = table.entry(sig)
        assert entry is not None, sig.key
        # Every count of the grid, measured in the step (medians over the steps of real runs).
        assert {s.threads for s in entry.cpu} == set(range(1, cores + 1)), sig.key
        assert all(s.seconds > 0 and s.repeats >= 2 for s in entry.cpu)
    # The co-running step was measured too, and its slowdowns fitted (a single core: nothing
    # co-runs, nothing to fit).
    assert (table.contention is not None and table.contention >= 0) == (cores >= 2)
    plan = str(tmp_path / "p.json")
    assert cli.main(["plan", SPEC, "--train", "sgd", "--target", "host", "--costs", costs,
                     "-o", plan, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["analytical_signatures"] == 0


def test_signatures_are_built_together_and_a_broken_one_fails_alone(tmp_path):
    """One executor for the batch (one folder under work_dir). A signature whose graph cannot
    be made (a Reshape to a shape of another size) or that the CPU runtime has no kernel for
    (Sigmoid in bfloat16) fails by itself; the others are measured, a bfloat16 one included
    (fed as float32, cast in the graph)."""
    from planner.costs.profile import profile

    target = detect()
    good = [OpSignature(op="Relu", shapes=((64, 64),), dtypes=("float32",)),
            OpSignature(op="Relu", shapes=((64, 64),), dtypes=("bfloat16",)),
            OpSignature(op="Flatten", shapes=((4, 4, 4),), dtypes=("float32",),
                        attrs={"axis": 1})]
    broken = [OpSignature(op="Reshape", shapes=((4, 4),), dtypes=("float32",),
                          attrs={"shape": [3, 5]}),
              OpSignature(op="Sigmoid", shapes=((4, 4),), dtypes=("bfloat16",))]
    options = ProfileOptions(interval=1, max_threads=1, affinities=("compact",))
    timer = KernelTimer(target, tmp_path / "together", options, steps=1, signatures=good)
    run = profile(good, target, timer, options, progress=None)
    assert run.measured == 3 and not run.failures
    assert len(list((tmp_path / "together").iterdir())) == 1
    mixed = [broken[0], *good, broken[1]]
    timer = KernelTimer(target, tmp_path / "mixed", options, steps=1, signatures=mixed)
    run = profile(mixed, target, timer, options, progress=None)
    assert run.measured == 3 and [key for key, _ in run.failures] == [s.key for s in broken]
    assert "no kernel for op Sigmoid in bfloat16" in run.failures[1][1]


def test_in_step_profile_of_a_graph_planning_rewrites_for_the_cores(tmp_path):
    """Planning adds ops for the cores (planner.step.for_cores: an LSTM's weights transposed
    once per step); the co-running fit reads the plan's own graph, where those ops are (it
    once indexed the graph it was given and failed on the first added op)."""
    from codegen.profiling import profile_in_step
    from planner.frontend.autodiff import Optimizer, make_training_graph
    from planner.target.presets import load_target
    from planner.zoo import build

    target = load_target("host")
    if target.cores < 2:
        pytest.skip("one core: nothing co-runs, no contention to fit")
    graph = make_training_graph(build("lstm", batch=2, seq=3, hidden=8, layers=2, vocab=16,
                                      dropout=0.0), Optimizer(kind="sgd"))
    table = profile_in_step(graph, target, tmp_path, ProfileOptions(max_threads=1), steps=2)
    assert table.contention is not None and table.contention >= 0
