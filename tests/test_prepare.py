"""One front end (planner.frontend.prepare): every command makes its graph with one call and one
set of flags, the graph does not depend on the target, and what depends on the step's cores
is planned (planner.step.for_cores through planner.pipeline.step_graph)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import planner.cli as cli
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from planner.step.for_cores import for_cores
from planner.target.presets import preset
from tests.targets import two_cores

# Two layers of 5 steps: two recurrences whose weights' gradients are chunked sums.
LSTM = "zoo:lstm?batch=2&seq=5&hidden=8&vocab=20&dropout=0"


@pytest.fixture(scope="module")
def two_core_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("target") / "two.json"
    path.write_text(two_cores().to_json())
    return str(path)


@pytest.mark.parametrize(("flags", "target"), [
    (["--train", "adam", "--lr", "0.05"], "xeon-8180"),
    (["--train", "sgd", "--precision", "bf16-mixed"], "two-core file")])
def test_graph_then_plan_is_plan_train_byte_for_byte(tmp_path, capsys, flags, target,
                                                     two_core_file):
    target = two_core_file if target == "two-core file" else target
    g, a, b = (str(tmp_path / n) for n in ("g.json", "a.json", "b.json"))
    assert cli.main(["graph", LSTM, *flags, "-o", g]) == 0
    assert cli.main(["plan", g, "--target", target, "-o", a]) == 0
    assert cli.main(["plan", LSTM, *flags, "--target", target, "-o", b]) == 0
    capsys.readouterr()
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()


def test_the_graph_does_not_depend_on_the_target_and_its_plan_records_the_cores():
    graph = prepare(LSTM, GraphOptions(optimizer=Optimizer(kind="sgd")))
    on_gpu, on_two, on_xeon = (plan(graph, t).graph for t in (
        preset("k40c-12gb"), two_cores(), preset("xeon-8180")))
    assert on_gpu == graph

    def ops(g, op, prefix=""):
        return sorted(n.name for n in g.nodes if n.op == op and n.name.startswith(prefix))

    # The recurrent weights are read as they are (the CPU runtime packs them once per step).
    assert ops(graph, "Transpose") == ops(on_xeon, "Transpose") == ops(on_two, "Transpose") == []
    # Two recurrences on two cores: no core is left to overlap chunks, one GEMM per weight.
    chunked = ops(graph, "MatMul", "grad/layer1/weight/sum")
    assert len(chunked) > 1 and ops(on_xeon, "MatMul", "grad/layer1/weight/sum") == chunked
    assert ops(on_two, "MatMul", "grad/layer1/weight/sum") == ["grad/layer1/weight/sum"]
    # Planning a planned graph again rewrites nothing more.
    assert for_cores(on_two, 2) == on_two and for_cores(on_xeon, 28) == on_xeon


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_the_step_on_two_cores_computes_the_same_training_step(precision):
    graph = prepare(LSTM, GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.5),
                                       precision=precision))
    rewritten = for_cores(graph, 2)
    assert rewritten != graph
    feeds, state = random_feeds(graph), init_params(graph)
    out, new = train_step(graph, feeds, state)
    out2, new2 = train_step(rewritten, feeds, state)
    # The forward pass is untouched. Gradients: the same products summed in another order
    # (float32 accumulation over <= 10 rows, ~10 * 2^-24 relative: 1e-5 of the largest
    # update is far above it). bf16-mixed rounds each chunk GEMM's result to bfloat16 and
    # one GEMM rounds once: up to (chunks + 1) roundings of 2^-9 of the partial sums, so
    # 2^-6 of the largest update (a wrong row or a lost chunk is off by O(1) of it).
    for name, value in out.items():
        np.testing.assert_allclose(out2[name], value, rtol=1e-6, atol=0, err_msg=name)
    bound = 1e-5 if precision == "fp32" else 2.0 ** -6
    for name, value in new.items():
        step = float(np.abs(value.astype(np.float64) - state.get(name, value)).max())
        np.testing.assert_allclose(new2[name], value, rtol=0, atol=bound * step + 1e-12,
                                   err_msg=name)
    changed = [n for n in new if not np.array_equal(new[n], state[n])]
    assert "layer1/weight" in changed  # the rewritten gradient reached the update


@pytest.mark.parametrize("command", [["graph"], ["plan", "--target", "xeon-8180", "-o", "p"],
                                     ["profile", "-o", "c"],
                                     ["fit", "--target", "xeon-8180", "--budget", "1GiB"]])
def test_every_command_takes_the_graph_flags(command):
    flags = ["--train", "adam", "--lr", "0.1", "--loss", "mse:logits", "--keep", "a,b",
             "--train-dropout", "--precision", "fp16-mixed", "--loss-scale-growth-interval",
             "7"]
    args = cli.build_parser().parse_args([command[0], "zoo:mlp", *command[1:], *flags])
    from planner.cli.graph_flags import graph_options

    options = graph_options(args)
    assert options.optimizer == Optimizer(kind="adam", lr=0.1)
    assert (options.loss, options.keep, options.train_dropout, options.precision,
            options.loss_scaling.growth_interval) == ("mse:logits", ("a", "b"), True,
                                                      "fp16-mixed", 7)


@pytest.mark.parametrize("flags,message", [
    (["--lr", "0.1"], "--lr, --weight-decay and --lr-schedule need --train"),
    (["--precision", "bf16-mixed"], "--precision needs --train"),
    (["--train", "sgd", "--keep", "nope"], "has no tensor 'nope'"),
])
def test_graph_flag_mistakes_are_one_line_naming_the_flag(capsys, flags, message):
    assert cli.main(["graph", "zoo:mlp?batch=2&hidden=4&in_features=3&classes=2",
                     *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_graph_keeps_a_tensor_as_plan_does(capsys):
    assert cli.main(["graph", "zoo:mlp?batch=2&hidden=4&in_features=3&classes=2",
                     "--keep", "relu1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] > 0
    import planner

    kept = planner.prepare("zoo:mlp?batch=2&hidden=4&in_features=3&classes=2",
                           planner.GraphOptions(keep=("relu1",)))
    assert kept.outputs[-1] == "relu1"


@pytest.mark.parametrize("flags", [["--train", "adam"],
                                   ["--train", "sgd", "--precision", "bf16-mixed"], []])
def test_profile_measures_the_signatures_of_the_graph_plan_plans(flags, two_core_file,
                                                                 tmp_path, capsys):
    """`planner profile` then `plan --costs`: the profiler's list of kernels is the plan's
    graph's, CPU-core rewrites included (what it measures is tested in
    tests/costs/test_profile_kernels.py)."""
    from planner.cli.costs import profiled_graph
    from planner.costs.signature import graph_signatures
    from planner.target.presets import load_target

    args = cli.build_parser().parse_args(["profile", LSTM, *flags, "-o", "c.json"])
    graph = profiled_graph(args, load_target(two_core_file))
    profiled = {s.key for s in graph_signatures(graph).values()}
    out = str(tmp_path / "p.json")
    assert cli.main(["plan", LSTM, *flags, "--target", two_core_file, "-o", out]) == 0
    capsys.readouterr()
    with open(out) as f:
        planned = json.load(f)["graph"]
    from planner.graph import Graph

    assert {s.key for s in graph_signatures(Graph.model_validate(planned)).values()} == profiled
    # The 2-core rewrite (one weight-gradient GEMM per recurrence) is in what is profiled.
    assert any(n.name == "grad/layer1/weight/sum" and n.op == "MatMul"
               for n in graph.nodes) == bool(flags)


def test_verify_against_the_graph_file_rederives_the_planned_rewrites(tmp_path, capsys,
                                                                      two_core_file):
    g, p = str(tmp_path / "g.json"), str(tmp_path / "p.json")
    assert cli.main(["graph", LSTM, "--train", "sgd", "-o", g]) == 0
    assert cli.main(["plan", g, "--target", two_core_file, "-o", p]) == 0
    capsys.readouterr()
    assert cli.main(["verify", p, "--graph", g]) == 0, capsys.readouterr().out
    other = str(tmp_path / "other.json")
    assert cli.main(["graph", LSTM, "--train", "adam", "-o", other]) == 0
    assert cli.main(["verify", p, "--graph", other]) == 1
    assert "plan was made for another graph" in capsys.readouterr().out
