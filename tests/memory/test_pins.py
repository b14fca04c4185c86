"""The user's memory decisions: kept or refused in one line, checked by verify from the options
the plan records, through plan, verify, diff, explain and the code generator."""

from __future__ import annotations

import json

import numpy as np
import pytest

import planner.cli as cli
from codegen.render import render_files
from planner.plan import load_plan
from planner.report.placement import placements

SPEC = "zoo:alexnet?batch=2&image=63&width=0.125&classes=4"
PLAN = ["plan", SPEC, "--train", "sgd", "--target", "xeon-8180"]


def planned(tmp_path, capsys, name: str, *flags: str) -> str:
    out = str(tmp_path / name)
    assert cli.main([*PLAN, *flags, "-o", out]) == 0
    capsys.readouterr()
    return out


def test_pins_round_trip(tmp_path, capsys):
    free = planned(tmp_path, capsys, "free.json")
    pinned = planned(tmp_path, capsys, "pinned.json", "--recompute", "lrn1", "--offload",
                     "relu2", "--keep-tensor", "pool2")
    data = json.load(open(pinned))
    # Re-derived from the plan's own memory ops and buffers.
    where = placements(data)
    assert where["lrn1"] == "recomputed" and where["relu2"] == "offloaded"
    assert "pool2" not in where
    assert cli.main(["verify", pinned]) == 0
    # Recorded: verify reads the decisions back from the options and checks the plan by them.
    pins = data["provenance"]["options"]["memory"]["pins"]
    assert {"decision": "keep", "name": "pool2"} in pins
    assert "pins" not in json.load(open(free))["provenance"]["options"]["memory"]
    capsys.readouterr()
    assert cli.main(["diff", free, pinned]) == 1
    out = capsys.readouterr().out
    assert "lrn1: kept -> recomputed" in out and "relu2: kept -> offloaded" in out
    # A pin the plan breaks (as an edited file would): verify names it.
    pins[pins.index({"decision": "recompute", "name": "lrn1"})]["decision"] = "keep"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert cli.main(["verify", str(edited)]) == 1
    assert "--keep-tensor lrn1: tensor 'lrn1' is recomputed" in capsys.readouterr().out
    # The code generator takes the pinned plan as any other (the recompute and copy ops).
    files = render_files(load_plan(pinned), "pinned")
    assert files and "schedule.cpp" in files
    # explain prices the pinned recompute like one of its own.
    assert cli.main(["explain", pinned, "lrn1", "--json"]) == 0
    e = json.loads(capsys.readouterr().out)["tensor"]
    assert e["placement"] == "recomputed" and e["seconds_paid"] >= 0
    assert e["pinned"] == "--recompute lrn1" and "needed_below_bytes" not in e


def region_peak(data: dict, prefix: str) -> int:
    """Live bytes of the activations under `prefix` by execution order, from the buffers."""
    role = {t["name"]: t["role"] for t in data["graph"]["tensors"]}
    n = len(data["ops"])
    live = np.zeros(n + 1, dtype=np.int64)
    for b in data["tensors"]:
        t = b["tensor"]
        if b["placement"] == "device" and role.get(t) == "activation" and \
                (t == prefix or t.startswith(prefix + "/")):
            live[max(b["first"], 0): min(b["last"], n) + 1] += b["bytes"]
    return int(live.max())


def test_region_budget_is_met(tmp_path, capsys):
    gpt = ["plan", "zoo:gpt?batch=2&seq=16&dim=32&heads=2&layers=2&vocab=50", "--train", "sgd",
           "--target", "xeon-8180"]
    free, out = str(tmp_path / "free.json"), str(tmp_path / "region.json")
    assert cli.main([*gpt, "-o", free]) == 0
    before = region_peak(json.load(open(free)), "block1")
    assert cli.main([*gpt, "--region-budget", f"block1={before // 2}", "-o", out]) == 0
    data = json.load(open(out))
    assert region_peak(data, "block1") <= before // 2
    assert data["memory"]["ops"]  # met by recomputing or offloading some of it
    assert cli.main(["verify", out]) == 0


@pytest.mark.parametrize("flags, words", [
    (["--recompute", "relu1"], "--recompute relu1: cannot recompute"),
    (["--recompute", "lrn1", "--keep-tensor", "pool1"], "conflicts with --keep-tensor pool1"),
    (["--keep-tensor", "lrn1", "--recompute", "lrn1"], "conflicting decisions for 'lrn1'"),
    (["--offload", "no/such"], "--offload no/such: no activation"),
    (["--region-budget", "conv1"], "PREFIX=BYTES"),
    (["--region-budget", "pool1=1"], "--region-budget pool1"),
])
def test_refusals_name_the_conflict(tmp_path, capsys, flags, words):
    assert cli.main([*PLAN, *flags, "-o", str(tmp_path / "x.json")]) != 0
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err
    assert not (tmp_path / "x.json").exists()


def test_pins_hold_in_a_data_parallel_plan(tmp_path, capsys):
    """The budget search runs with the all-reduces on their comm lane: the user's decisions
    hold there as in one process."""
    out = planned(tmp_path, capsys, "dp.json", "--data-parallel", "2", "--recompute", "lrn1")
    data = json.load(open(out))
    assert placements(data)["lrn1"] == "recomputed"
    assert any(o["op"] == "AllReduce" and o["stream"] == "comm" for o in data["ops"])
    assert cli.main(["verify", out]) == 0


def test_decisions_file(tmp_path, capsys):
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"recompute": ["lrn1"], "keep": ["pool2"]}))
    out = planned(tmp_path, capsys, "f.json", "--decisions", str(f))
    assert placements(json.load(open(out)))["lrn1"] == "recomputed"
    f.write_text(json.dumps({"recompte": ["lrn1"]}))
    assert cli.main([*PLAN, "--decisions", str(f), "-o", str(tmp_path / "g.json")]) != 0
    assert "unknown key 'recompte'" in capsys.readouterr().err
