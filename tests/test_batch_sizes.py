"""`planner plan --batch-sizes`: a zoo graph planned once per batch size (a training batch and
the smaller last one of an epoch), each plan beside FILE, and `planner diff` of two saying what
the shape changed; a planner file given where another kind is expected, named in one line."""

from __future__ import annotations

import json

import planner.cli as cli

SPEC = "zoo:mlp?batch=8&hidden=16&in_features=6&classes=3"


def run(*args: str) -> int:
    return cli.main(list(args))


def test_one_plan_per_batch_size_and_their_diff(tmp_path, capsys):
    out = str(tmp_path / "m.plan.json")
    assert run("plan", SPEC, "--train", "sgd", "--target", "knl-7250", "--batch-sizes", "32,4",
               "-o", out) == 0
    plans = {b: json.loads((tmp_path / f"m.plan.batch{b}.json").read_text()) for b in (32, 4)}
    for b, p in plans.items():
        feeds = {t["name"]: t["shape"] for t in p["graph"]["tensors"]
                 if t["role"] in ("input", "label")}
        assert feeds == {"x": [b, 6], "labels": [b]}
    # Each is the plan of that batch's spec made alone, byte for byte.
    alone = str(tmp_path / "alone.json")
    assert run("plan", SPEC.replace("batch=8", "batch=4"), "--train", "sgd", "--target",
               "knl-7250", "-o", alone) == 0
    assert (tmp_path / "m.plan.batch4.json").read_text() == open(alone).read()
    capsys.readouterr()
    assert run("diff", str(tmp_path / "m.plan.batch32.json"),
               str(tmp_path / "m.plan.batch4.json")) == 1
    text = capsys.readouterr().out
    assert "  feeds: labels [32] -> [4]; x [32, 6] -> [4, 6]" in text
    assert "other tensor(s) change shape with them" in text
    assert "nodes only in" not in text  # the same ops: only the shapes moved


def test_batch_sizes_and_wrong_files_are_refused_in_one_line(tmp_path, capsys):
    plan_file = str(tmp_path / "p.json")
    assert run("plan", SPEC, "--train", "sgd", "--target", "knl-7250", "-o", plan_file) == 0
    graph_file = str(tmp_path / "g.json")
    assert run("graph", SPEC, "-o", graph_file) == 0
    capsys.readouterr()
    cases = [
        (("plan", graph_file, "--target", "knl-7250", "--batch-sizes", "4", "-o",
          str(tmp_path / "x.json")), "has its shapes fixed by its file"),
        (("plan", SPEC, "--target", "knl-7250", "--batch-sizes", "4,0", "-o",
          str(tmp_path / "x.json")), "each batch size is 1 or more"),
        (("fit", plan_file, "--target", "knl-7250", "--pareto"),
         "is a plan file, not a graph; a plan embeds the step graph"),
        (("explain", graph_file), "is a graph file, not a plan; make one with `planner plan"),
        (("show", graph_file), "is a graph file, not a plan"),
    ]
    for args, said in cases:
        assert run(*args) != 0
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err


def test_a_batch_range_is_one_plan_for_the_largest_that_says_so(tmp_path, capsys):
    """`--batch-range 4:32`: the plan of batch 32 made alone, byte for byte, with the range
    recorded (shape_range) and shown; verify re-derives it from the graph's feeds and refuses
    a range whose largest is not the graph's batch; flags that cannot hold, one line each."""
    out = tmp_path / "r.plan.json"
    assert run("plan", SPEC, "--train", "sgd", "--target", "knl-7250", "--batch-range", "4:32",
               "-o", str(out)) == 0
    assert "range       batches 4 to 32 (planned and built for 32" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["shape_range"] == {"dimension": "batch", "smallest": 4, "largest": 32}
    alone = tmp_path / "alone.json"
    assert run("plan", SPEC.replace("batch=8", "batch=32"), "--train", "sgd", "--target",
               "knl-7250", "-o", str(alone)) == 0
    del data["shape_range"]
    assert data == json.loads(alone.read_text())
    assert run("verify", str(out)) == 0
    edited = json.loads(out.read_text())
    edited["shape_range"]["largest"] = 16
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(edited))
    capsys.readouterr()
    assert run("verify", str(bad)) == 1
    assert "feed 'x' has batch 32, the range's largest is 16" in capsys.readouterr().out
    graph_file = str(tmp_path / "g.json")
    assert run("graph", SPEC, "-o", graph_file) == 0
    capsys.readouterr()
    for args, said in [((SPEC, "--batch-range", "9:4"), "give 1 <= MIN <= MAX"),
                       ((SPEC, "--batch-range", "4"), "give MIN:MAX"),
                       ((graph_file, "--batch-range", "4:8"), "has its shapes fixed by its file"),
                       ((SPEC, "--batch-range", "4:8", "--batch-sizes", "4"), "give one")]:
        assert run("plan", *args, "--target", "knl-7250", "-o", str(tmp_path / "x.json")) != 0
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err
