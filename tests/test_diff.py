"""planner diff: every recorded decision is compared; rounding noise is not a change."""

from __future__ import annotations

import copy
import json

import pytest

import planner.cli as cli
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.pipeline import plan
from planner.target import preset
from planner.zoo import from_spec

SPEC = "zoo:lenet?batch=2&image=8&width=0.5"


@pytest.fixture(scope="module")
def plans() -> dict[str, dict]:
    graph = make_training_graph(from_spec(SPEC), Optimizer(kind="sgd"))
    return {kind: json.loads(plan(graph, preset(target)).to_json())
            for kind, target in (("cpu", "knl-7250"), ("gpu", "k40c-12gb"))}


def diff(tmp_path, capsys, a: dict, b: dict) -> tuple[int, str]:
    pa, pb = tmp_path / "a.plan.json", tmp_path / "b.plan.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    capsys.readouterr()
    code = cli.main(["diff", str(pa), str(pb)])
    return code, capsys.readouterr().out


def test_identical_plans(tmp_path, capsys, plans):
    for data in plans.values():
        assert diff(tmp_path, capsys, data, copy.deepcopy(data)) == (0, "no differences\n")


def test_provenance_options_of_another_shape_are_no_budget(tmp_path, capsys, plans):
    # provenance.options is free-form in the schema: a hostile file's number where the memory
    # options were once made diff fail with an internal error (found by test_hostile_inputs)
    a = plans["cpu"]
    for odd in ({"memory": 1.0}, {"memory": [1]}, {"memory": {"budget_bytes": 7}}):
        b = copy.deepcopy(a)
        b["provenance"]["options"] = odd
        code, out = diff(tmp_path, capsys, a, b)
        assert code == 1 and "option memory" in out, out


def test_rounding_noise_in_summary_numbers_is_no_change(tmp_path, capsys, plans):
    b = copy.deepcopy(plans["cpu"])
    for field in ("step_seconds", "lower_bound_seconds", "ratio", "utilization", "mean_corun"):
        b["summary"][field] *= 1 + 3e-16
    b["summary"]["memory"]["fragmentation"] += 1e-17
    assert diff(tmp_path, capsys, plans["cpu"], b) == (0, "no differences\n")


def test_changed_tensor_offset(tmp_path, capsys, plans):
    b = copy.deepcopy(plans["cpu"])
    tensor = next(t for t in b["tensors"] if t["offset"] > 0)
    tensor["offset"] -= 64
    code, out = diff(tmp_path, capsys, plans["cpu"], b)
    assert code == 1
    assert "tensors: 1 changed (offset)" in out and tensor["name"] in out


def test_changed_placement_and_arena(tmp_path, capsys, plans):
    b = copy.deepcopy(plans["cpu"])
    b["tensors"][0]["placement"] = "host"
    b["summary"]["memory"]["arena_bytes"] += 1  # one byte: integers compare exactly
    code, out = diff(tmp_path, capsys, plans["cpu"], b)
    assert code == 1
    assert "placement 'device' -> 'host'" in out and "memory arena_bytes" in out


def test_changed_conv_algorithm_and_workspace(tmp_path, capsys, plans):
    a = plans["gpu"]
    assert a["memory"]["convs"], "the GPU plan chooses convolution algorithms"
    b = copy.deepcopy(a)
    conv = b["memory"]["convs"][0]
    conv["algorithm"] = "FFT" if conv["algorithm"] != "FFT" else "GEMM"
    conv["workspace_bytes"] += 4096
    code, out = diff(tmp_path, capsys, a, b)
    assert code == 1
    assert "convolutions: 1 changed (algorithm, workspace_bytes)" in out and conv["node"] in out


def test_changed_happens_before_edge(tmp_path, capsys, plans):
    b = copy.deepcopy(plans["cpu"])
    edge = b["happens_before"].pop(3)
    code, out = diff(tmp_path, capsys, plans["cpu"], b)
    assert code == 1
    assert "happens-before: 1 edge(s) removed" in out
    assert f"- {edge['before']} -> {edge['after']}" in out
    b["happens_before"].append({"before": edge["after"], "after": edge["before"]})
    code, out = diff(tmp_path, capsys, plans["cpu"], b)
    assert code == 1 and f"+ {edge['after']} -> {edge['before']}" in out


def test_changed_lane(tmp_path, capsys, plans):
    b = copy.deepcopy(plans["cpu"])
    op = b["ops"][5]
    op["lane"] += 1  # an ordering the executor enforces: a review must see it
    code, out = diff(tmp_path, capsys, plans["cpu"], b)
    assert code == 1 and op["name"] in out and "lane" in out


def test_inserted_ops_stream_and_backend(tmp_path, capsys, plans):
    a = plans["gpu"]
    b = copy.deepcopy(a)
    b["memory"]["ops"].append({"name": "recompute/x", "kind": "recompute", "node": "conv1",
                               "inputs": [], "outputs": []})
    b["ops"][0]["stream"] = "copy"
    b["backend"] = "cpu"
    code, out = diff(tmp_path, capsys, a, b)
    assert code == 1
    assert "memory ops only in B: recompute/x" in out
    assert "stream 'compute' -> 'copy'" in out and "backend: cuda -> cpu" in out


def test_json_lists_every_change(tmp_path, capsys, plans):
    b = copy.deepcopy(plans["cpu"])
    for t in b["tensors"]:
        t["offset"] += 64
    pa, pb = tmp_path / "a.plan.json", tmp_path / "b.plan.json"
    pa.write_text(json.dumps(plans["cpu"]))
    pb.write_text(json.dumps(b))
    capsys.readouterr()
    assert cli.main(["diff", str(pa), str(pb), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert len(d["tensors"]["changed"]) == len(b["tensors"])


def test_show_as_textconv_names_memory_decisions(tmp_path, capsys, plans):
    # git diff through `planner show` (README): a moved offset or edge changes its text.
    texts = []
    b = copy.deepcopy(plans["cpu"])
    b["tensors"][-1]["offset"] += 64
    c = copy.deepcopy(plans["cpu"])
    c["happens_before"].pop()
    for data in (plans["cpu"], b, c):
        path = tmp_path / "p.plan.json"
        path.write_text(json.dumps(data))
        capsys.readouterr()
        assert cli.main(["show", str(path)]) == 0
        texts.append(capsys.readouterr().out)
    assert "decisions" in texts[0] and len(texts[0].splitlines()) < 80
    assert len({t for t in texts}) == 3


def test_show_counts_the_parallel_loop_groups(tmp_path, capsys, plans):
    data = copy.deepcopy(plans["cpu"])
    for op in data["ops"][:3]:
        op["group"] = "g"
    path = tmp_path / "p.plan.json"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert cli.main(["show", str(path)]) == 0
    assert "1 parallel-loop group(s) of 3 ops" in capsys.readouterr().out


def test_changed_launch_configuration(tmp_path, capsys, plans):
    a = plans["gpu"]
    b = copy.deepcopy(a)
    op = next(o for o in b["ops"] if o["op"] == "ReluGrad")  # a pointwise kernel's launch
    op["block"] = 512  # the plan with a measured launch; absent (the default) in the other
    code, out = diff(tmp_path, capsys, a, b)
    assert code == 1
    assert op["name"] in out and "block" in out


def test_images_kept_blocked_on_one_host_only(tmp_path, capsys):
    """Two hosts of one model, one keeping its images channel-blocked (planner.step.blocked):
    the diff names the tensors held in another layout."""
    from planner.target.detect import detect

    graph = make_training_graph(from_spec("zoo:resnet?batch=2&image=16&depth=18&width=0.25"
                                          "&classes=5"), Optimizer(kind="sgd"))
    host = detect(measure=False)
    a, b = (json.loads(plan(graph, host.model_copy(update={"cpu": host.cpu.model_copy(
        update={"vector_floats": block})})).to_json()) for block in (None, 16))
    code, out = diff(tmp_path, capsys, a, b)
    relaid = sum(t.get("layout") is not None for t in b["graph"]["tensors"])
    assert code == 1 and relaid
    assert "graph: the same model in both" in out
    assert f"  layouts: {relaid} tensor(s) plain -> nChw16c (" in out


RESNET = "zoo:resnet?batch=2&image=16&depth=18&width=0.25&classes=5"


def test_two_targets_read_in_a_screen(tmp_path, capsys):
    """One model planned for two machines (one keeping images channel-blocked, as an AVX-512
    host does): the user's graph is the same, what each target chose reads in under 40
    lines: layouts in one line with a count, threads, CPUs, lanes, memory."""
    graph = make_training_graph(from_spec(RESNET), Optimizer(kind="adam"))
    knl = preset("knl-7250")
    knl = knl.model_copy(update={"cpu": knl.cpu.model_copy(update={"vector_floats": 16})})
    a, b = (json.loads(plan(graph, t).to_json()) for t in (preset("xeon-8180"), knl))
    code, out = diff(tmp_path, capsys, a, b)
    lines = out.splitlines()
    assert code == 1 and len(lines) <= 40, out
    relaid = sum(t.get("layout") == "nChw16c" for t in b["graph"]["tensors"])
    assert relaid and sum(t.get("layout") is not None for t in a["graph"]["tensors"]) == 0
    assert lines[0] == "target: xeon-8180 -> knl-7250 (56 -> 272 logical CPUs)"
    assert lines[1].startswith("graph: the same model in both")
    assert f"  layouts: {relaid} tensor(s) plain -> nChw16c (" in out
    changed = sum(x["threads"] != y["threads"] for x, y in zip(
        sorted(a["ops"], key=lambda o: o["name"]), sorted(b["ops"], key=lambda o: o["name"]),
        strict=True))
    assert f"  threads: {changed} op(s) changed, " in out
    assert "  cpus: " in out and "memory arena_bytes: " in out
    assert "embedded graphs differ" not in out and "{...}" not in out


def test_a_strategy_switch_is_named_first_field_by_field(tmp_path, capsys):
    from planner.pipeline import PlanOptions
    from planner.schedule import ScheduleOptions

    graph = make_training_graph(from_spec(SPEC), Optimizer(kind="sgd"))
    a, b = (json.loads(plan(graph, preset("xeon-8180"), options=PlanOptions(
        schedule=ScheduleOptions(**kw))).to_json())
        for kw in ({}, {"strategy": "uniform", "intra": 2, "inter": 4}))
    code, out = diff(tmp_path, capsys, a, b)
    lines = out.splitlines()
    assert code == 1 and lines[:3] == ["option schedule.strategy: 'optimized' -> 'uniform'",
                                       "option schedule.inter: None -> 4",
                                       "option schedule.intra: None -> 2"], out
    assert "provenance options" not in out
