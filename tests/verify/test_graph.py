"""verify derives what it checks from the embedded graph: hand-corrupted plans (a dropped or
reversed dependency, shrunk bytes, a dropped reader or alias, an edited graph with its digest
recomputed, offsets near 2^63) fail naming the ops, buffer or tensor; the committed CPU and
GPU plans still verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.plan import digest
from planner.verify import verify_plan_data

PLANS = Path(__file__).resolve().parent.parent.parent / "examples" / "plans"


def plan_data(name: str = "lenet-digits.xeon-8180") -> dict:
    return json.loads((PLANS / f"{name}.plan.json").read_text())


def problems(data: dict) -> list[str]:
    return verify_plan_data(data, [n["name"] for n in data["graph"]["nodes"]])


def op(data: dict, name: str) -> dict:
    return next(o for o in data["ops"] if o["name"] == name)


def drop_dependency(data: dict, before: str, after: str) -> None:
    """Drop the edge before -> after and move `after` to a lane of its own, so that nothing the
    executor enforces orders them (its deps are kept: verify must not trust them)."""
    data["happens_before"] = [e for e in data["happens_before"]
                              if (e["before"], e["after"]) != (before, after)]
    op(data, after)["lane"] = 1 + max(o["lane"] for o in data["ops"])


UNORDERED = "but nothing the executor enforces orders them"


@pytest.mark.parametrize("name", sorted(p.name[:-len(".plan.json")] for p in PLANS.glob("*.json")))
def test_committed_plans_verify(name):
    assert problems(plan_data(name)) == []


def test_a_dropped_dependency_names_both_ops():
    data = plan_data()
    drop_dependency(data, "conv1", "pool1")
    assert any("'pool1' reads tensor 'relu1' written by op 'conv1', "
               + UNORDERED in p for p in problems(data))


def test_a_dropped_in_place_dependency_names_both_ops():
    data = plan_data()
    reader = "grad/conv2/conv2dbackpropinput"   # reads conv2/weight before SGD overwrites it
    drop_dependency(data, reader, "update/conv2/weight/sgd")
    assert any(f"'update/conv2/weight/sgd' overwrites 'conv2/weight' in place, which is read "
               f"by op {reader!r}, " + UNORDERED in p for p in problems(data))


def test_swapped_producer_and_consumer_fail():
    data = plan_data()
    a, b = op(data, "conv1"), op(data, "pool1")
    a["order"], b["order"] = b["order"], a["order"]
    a["deps"], b["deps"] = ["pool1"], []
    assert any("'pool1' reads tensor 'relu1' written by op 'conv1', but "
               "comes before it in execution order" in p for p in problems(data))


def buffer(data: dict, tensor: str) -> dict:
    return next(b for b in data["tensors"] if b["tensor"] == tensor)


def test_shrunk_bytes_dropped_reader_and_dropped_alias_fail():
    data = plan_data()
    buffer(data, "relu1")["bytes"] //= 2
    buffer(data, "pool1")["readers"] = []
    del buffer(data, "update/conv1/weight")["alias_of"]
    found = "\n".join(problems(data))
    assert "buffer 'relu1' has" in found and "but tensor 'relu1' needs" in found
    assert "reads tensor 'pool1', but no buffer of it lists that reader" in found
    assert "holds 'update/conv1/weight', the next value of 'conv1/weight', but does not " \
           "alias a buffer of it" in found


def test_a_wrong_writer_and_op_type_fail():
    data = plan_data()
    buffer(data, "relu1")["writer"] = "conv2"   # the fused conv1 writes relu1
    op(data, "pool2")["op"] = "Tanh"
    found = "\n".join(problems(data))
    assert "buffer 'relu1' of tensor 'relu1' names writer 'conv2', but the graph's is " \
           "'conv1'" in found
    assert "op 'pool2' runs 'Tanh', but the graph's node is a MaxPool" in found


def test_an_edited_graph_with_its_digest_recomputed_fails_on_shape_rules(tmp_path, capsys):
    data = plan_data()
    t = next(t for t in data["graph"]["tensors"] if t["name"] == "flatten")
    t["shape"] = [50_000_000]
    graph_text = json.dumps(data["graph"])
    from planner.graph import Graph

    data["provenance"]["graph_sha256"] = digest(Graph.model_validate_json(graph_text).to_json())
    found = problems(data)
    assert any("embedded graph: node 'flatten'" in p and "50000000" in p for p in found)
    path = tmp_path / "edited.plan.json"
    path.write_text(json.dumps(data))
    assert main(["verify", str(path)]) == 1
    assert "node 'flatten'" in capsys.readouterr().out


def test_offsets_near_two_to_the_63_fail():
    data = plan_data()
    b = buffer(data, "relu1")
    b["offset"] = 2**63 - 64
    data["summary"]["memory"]["arena_bytes"] = 2**63 + 10_000
    found = "\n".join(problems(data))
    assert "buffer 'relu1' ends at byte" in found and "past 2^62" in found
    assert "arena_bytes 9223372036854785808 is past 2^62" in found


def test_gpu_plan_dropped_dependency_fails():
    data = plan_data("resnet18-b16.k40c-12gb")
    node = next(n for n in data["graph"]["nodes"] if n["op"] == "Relu")
    producer = next(n["name"] for n in data["graph"]["nodes"]
                    if node["inputs"][0] in n["outputs"])
    drop_dependency(data, producer, node["name"])
    assert any(f"{node['name']!r} reads tensor" in p and UNORDERED in p
               for p in problems(data))


def test_a_shrunk_label_shape_fails_on_the_loss_shape_rule():
    data = plan_data()
    labels = next(t for t in data["graph"]["tensors"] if t["role"] == "label")
    labels["shape"] = [labels["shape"][0] // 2]
    assert any("embedded graph: node 'loss': SoftmaxCrossEntropy: labels must have shape"
               in p for p in problems(data))
