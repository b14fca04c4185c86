"""The fourth hostile round's findings about the planner's own inputs (issue 49): each bound a
loop or a type needs, each value refused by name where it enters, and the tool's own graph
JSON trained as the model it came from."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from planner.cli.main import main
from planner.costs.records import CostTable, load_table
from planner.errors import UserError
from planner.fit import _micro_batches, divisors
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from planner.target import preset

LENET = "zoo:lenet?batch=4&image=16"


def refused(capsys, argv: list[str]) -> str:
    """The one-line error of a command that must refuse (exit 2)."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0, err
    return err


def plan_args(tmp_path, *flags: str) -> list[str]:
    return ["plan", LENET, "--train", "sgd", "--target", "xeon-8180", *flags,
            "-o", str(tmp_path / "p.json")]


# ---- hangs ----------------------------------------------------------------------------------

def test_divisors_of_a_huge_global_batch_take_sqrt_steps():
    t0 = time.perf_counter()
    micro = _micro_batches(10**12, "batch", 1, preset("xeon-8180"),
                           GraphOptions(optimizer=Optimizer(kind="sgd")), None)
    assert time.perf_counter() - t0 < 20  # a loop over every candidate: ~10^12 steps
    assert micro == sorted(micro) and all(10**12 % d == 0 for d in micro)
    assert min(micro) * (2**31 - 1) >= 10**12  # each accumulated at most 2^31 - 1 times
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert divisors(97) == [1, 97]


@pytest.mark.parametrize("value, says", [
    ("0", "--global-batch 0: global batch must be between 1 and 2^48"),
    (str(2**60), f"--global-batch {2**60}: global batch must be between 1 and 2^48"),
])
def test_fit_names_a_global_batch_out_of_range(capsys, value, says):
    err = refused(capsys, ["fit", LENET, "--target", "xeon-8180", "--budget", "1GiB",
                           "--global-batch", value])
    assert says in err


def test_pareto_points_are_bounded(capsys):
    err = refused(capsys, ["fit", LENET, "--target", "xeon-8180", "--pareto",
                           "--points", "100000"])
    assert "--points 100000: a curve has 2 to 200 points" in err


# ---- silently wrong: flags and records ------------------------------------------------------

@pytest.mark.parametrize("flags, says", [
    (["--lr", "1e39"], "--lr 1e+39: 1e+39 is not a finite float32"),
    (["--weight-decay", "1e39"], "--weight-decay 1e+39: 1e+39 is not a finite float32"),
    (["--lr", "1e-46"], "--lr 1e-46: 1e-46 is 0 in float32"),
    (["--weight-decay", "1e-46"], "--weight-decay 1e-46: 1e-46 is 0 in float32"),
    (["--keep-tensor", "no/such"], "--keep-tensor no/such: no activation nor other tensor"),
    (["--region-budget", "conv2=1MiB", "--region-budget", "conv2=2MiB"],
     "--region-budget conv2: given twice"),
    (["--accumulate", "2147483649"],
     "--accumulate 2147483649: input should be less than or equal to 2147483647"),
    (["--keep-tensor", ""], "--keep-tensor '': expected a tensor name or module path"),
    (["--region-budget", "=1MiB"], "--region-budget '=1MiB': expected PREFIX=BYTES"),
])
def test_plan_refuses_naming_the_flag(tmp_path, capsys, flags, says):
    err = refused(capsys, plan_args(tmp_path, *flags))
    assert says in err, err
    assert not (tmp_path / "p.json").exists()


def test_a_schedule_key_given_twice_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):  # argparse's refusal of the flag's value
        main(plan_args(tmp_path, "--lr-schedule", "warmup-cosine:warmup=1,warmup=5,total=10"))
    err = capsys.readouterr().err
    assert "argument --lr-schedule: schedule 'warmup-cosine:warmup=1,warmup=5,total=10': " \
           "warmup is given twice" in err


def test_a_kept_tensor_the_graph_has_is_planned(tmp_path, capsys):
    assert main(plan_args(tmp_path, "--keep-tensor", "conv1")) == 0


def test_region_budgets_given_twice_are_refused_by_the_record():
    from planner.memory.options import MemoryOptions, RegionBudget

    with pytest.raises(ValueError, match="region budget for 'a' given twice"):
        MemoryOptions(region_budgets=(RegionBudget(prefix="a", bytes=1),
                                      RegionBudget(prefix="a", bytes=2)))


@pytest.mark.parametrize("field, value", [("lr", 1e39), ("weight_decay", 1e-46),
                                          ("lr", float("inf"))])
def test_the_optimizer_record_holds_float32_values(field, value):
    with pytest.raises(ValueError, match="float32|finite"):
        Optimizer(kind="sgd", **{field: value})


@pytest.mark.parametrize("seconds", [1e300, 1e-300])
def test_a_cost_table_of_implausible_times_is_refused_by_name(tmp_path, capsys, seconds):
    table = CostTable.from_json(json.dumps({"target": "xeon-8180", "entries": [
        {"signature": {"op": "Relu", "shapes": [[8]], "dtypes": ["float32"]},
         "cpu": [{"threads": 1, "affinity": "compact", "seconds": 1e-6}]}]}))
    data = json.loads(table.to_json())
    data["entries"][0]["cpu"][0]["seconds"] = seconds
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"entries\.0\.cpu\.0\.seconds"):
        load_table(path)
    err = refused(capsys, plan_args(tmp_path, "--costs", str(path)))
    assert "entries.0.cpu.0.seconds" in err and str(path) in err


# ---- the tool's own graph JSON trains -------------------------------------------------------

@pytest.mark.parametrize("spec", ["zoo:lenet?batch=2&image=16",
                                  "zoo:mlp?batch=4&hidden=32&in_features=16&classes=5"])
def test_graph_json_written_by_planner_graph_trains_as_its_model(tmp_path, capsys, spec):
    out = tmp_path / "g.json"
    assert main(["graph", spec, "-o", str(out)]) == 0
    written = Graph.model_validate(json.loads(out.read_text()))
    assert not any(n.op == "BiasAdd" for n in written.nodes)  # folded into Conv2D and MatMul
    optimizer = GraphOptions(optimizer=Optimizer(kind="momentum", lr=0.1))
    again = prepare(str(out), optimizer)
    direct = prepare(spec, optimizer)
    # Float64 reference steps of both: the folded layers' gradients (ReluGrad from y, then
    # BiasAddGrad over the channels) equal the separate ops' own rules.
    state = {k: v.astype(np.float64) if v.dtype == np.float32 else v
             for k, v in init_params(direct, seed=3).items()}
    feeds = random_feeds(direct, seed=4)
    feeds = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
    _, after_direct = train_step(widened(direct), feeds, state)
    _, after_again = train_step(widened(again), feeds, {k: state[k] for k in after_direct})
    for name in after_direct:
        np.testing.assert_allclose(after_again[name], after_direct[name], rtol=1e-10,
                                   atol=1e-12, err_msg=name)
    assert main(["plan", str(out), "--train", "sgd", "--target", "xeon-8180",
                 "-o", str(tmp_path / "p.json")]) == 0


def widened(graph: Graph) -> Graph:
    from planner.graph.interpret import widened as wide

    return wide(graph)


# ---- vague ----------------------------------------------------------------------------------

def test_a_gpu_target_on_a_host_without_one_is_refused_before_building(tmp_path):
    torch = pytest.importorskip("torch")
    from planner.target.detect import detect_gpus
    from planner.torch import trainer

    if detect_gpus(1)[0]:
        pytest.skip("this host has a GPU: the target can run")
    model = torch.nn.Linear(4, 2)
    with pytest.raises(UserError, match="trainer: target 'a100-80gb' runs on a GPU, and this "
                                        "host has none to run it .*use target='host'"):
        trainer(model, [torch.randn(3, 4)], torch.nn.functional.cross_entropy,
                torch.tensor([0, 1, 0]), target="a100-80gb", out_dir=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing rendered, nothing compiled


def test_a_host_plan_is_explained_from_the_hosts_kept_measurement(tmp_path, monkeypatch,
                                                                  capsys):
    from planner.target.detect import detect

    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path / "cache"))
    detect(budget_s=0.01)
    out = tmp_path / "host.plan.json"
    assert main(["plan", LENET, "--train", "sgd", "--target", "host", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["explain", str(out)]) == 0
    assert "plan (optimized): step" in capsys.readouterr().out
    # The host measured again (another bandwidth): no longer the plan's target, said so.
    [entry] = (tmp_path / "cache" / "hosts").glob("*.json")
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({**data, "memory_bandwidth": data["memory_bandwidth"] * 2}))
    err = refused(capsys, ["explain", str(out)])
    assert "is not the one the plan was made for" in err and "planner target detect" in err


@pytest.mark.parametrize("field, value", [("core_bandwidth", 1e-300),
                                          ("memory_bandwidth", 1e-300),
                                          ("peak_flops", 1e300)])
def test_a_target_file_of_implausible_rates_is_refused_by_name(tmp_path, capsys, field, value):
    data = json.loads(preset("xeon-8180").to_json())
    data["cpu"][field] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    err = refused(capsys, ["plan", LENET, "--train", "sgd", "--target", str(path),
                           "-o", str(tmp_path / "p.json")])
    assert f"{path}: not a valid target: cpu.{field} {value!r} is not a plausible rate" in err
