"""A training-mode export holding a Dropout without its training flag (how some exporters write
an attention dropout) warns naming the node, and import_onnx(train_dropout=True) trains it;
an inference-mode export stays quiet (its Dropouts pass through, as documented)."""

from __future__ import annotations

import warnings

import numpy as np
from onnx import helper

from planner.importers import import_onnx
from tests.importers.onnx_models import make_model, rand


def _model(training_flags: tuple[bool, bool]):
    nodes, inits = [], {"ratio": np.array(0.25, np.float32)}
    x = "x"
    for k, flag in enumerate(training_flags):
        inputs = [x, "ratio"]
        if flag:
            inputs.append("on")
        nodes.append(helper.make_node("Dropout", inputs, [f"d{k}"], name=f"drop{k}"))
        x = f"d{k}"
    if any(training_flags):
        inits["on"] = np.array(True)
    return make_model(nodes, {"x": rand(4, 6)}, [x], inits)


def _import(model, **kw):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        imported = import_onnx(model, **kw)
    messages = [str(w.message) for w in record if "Dropout" in str(w.message)]
    return imported, messages


def test_unflagged_dropout_in_a_training_export_warns_naming_it():
    imported, messages = _import(_model((True, False)))
    assert len(messages) == 1 and "['drop1']" in messages[0] and "train_dropout=True" in messages[0]
    assert [n.op for n in imported.graph.nodes] == ["Dropout"]


def test_train_dropout_trains_it_with_a_seed_of_its_own():
    imported, messages = _import(_model((True, False)), train_dropout=True)
    assert messages == []
    drops = [n for n in imported.graph.nodes if n.op == "Dropout"]
    assert [(n.attrs["rate"], n.attrs["seed"]) for n in drops] == [(0.25, 1), (0.25, 2)]


def test_an_inference_export_stays_quiet():
    imported, messages = _import(_model((False, False)))
    assert messages == [] and [n.op for n in imported.graph.nodes] == []


def test_the_commands_train_it_with_train_dropout(tmp_path, capsys):
    import json

    import onnx

    import planner.cli as cli

    path = tmp_path / "drops.onnx"
    onnx.save(_model((True, False)), str(path))
    for flag, drops in (([], 1), (["--train-dropout"], 2)):
        out = tmp_path / f"g{len(flag)}.json"
        plan = tmp_path / f"p{len(flag)}.json"
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert cli.main(["graph", str(path), *flag, "-o", str(out)]) == 0
            assert cli.main(["plan", str(path), *flag, "--target", "knl-7250",
                             "-o", str(plan)]) == 0
        warned = sum("--train-dropout" in str(w.message) for w in record)
        assert warned == (0 if flag else 2)  # graph and plan each name the node
        nodes = json.loads(out.read_text())["nodes"]
        assert [n["op"] for n in nodes] == ["Dropout"] * drops
        ops = [o["op"] for o in json.loads(plan.read_text())["ops"]]
        assert ops.count("Dropout") == drops
