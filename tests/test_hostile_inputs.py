"""Every loader, fed hostile files: a bounded corpus (graph JSON, ONNX, zoo specs, targets,
cost tables, plans, budgets, flags) and hypothesis mutations of valid plans and graphs. Each
gives exit 2 with one line naming the file, field, node or tensor: never an internal error
(exit 3), a traceback, a hang or a crash of the process."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from planner.cli import main

PLANS = Path(__file__).resolve().parent.parent / "examples" / "plans"
PLAN = "lenet-digits.xeon-8180.plan.json"
GRAPH = {"name": "g", "kind": "inference",
         "tensors": [{"name": "x", "shape": [2, 3], "role": "input"},
                     {"name": "y", "shape": [2, 3]}],
         "nodes": [{"name": "r", "op": "LeakyRelu", "inputs": ["x"], "outputs": ["y"],
                    "attrs": {"alpha": 0.1}}],
         "outputs": ["y"]}


def graph_with(**changes) -> str:
    g = copy.deepcopy(GRAPH)
    for path, value in changes.items():
        *keys, last = path.split("__")
        at = g
        for k in keys:
            at = at[int(k)] if k.isdigit() else at[k]
        at[int(last) if last.isdigit() else last] = value
    return json.dumps(g)


def plan_with(edit) -> str:
    data = json.loads((PLANS / PLAN).read_text())
    edit(data)
    return json.dumps(data)


def onnx_bytes(nodes, inits=(), outputs=("y",)) -> bytes:
    graph = helper.make_graph(nodes, "m", [], [helper.make_tensor_value_info(
        o, TensorProto.INT64, None) for o in outputs], list(inits))
    return helper.make_model(graph).SerializeToString()


def range_bomb() -> bytes:
    scalar = [helper.make_tensor(n, TensorProto.INT64, [], [v])
              for n, v in (("s", 0), ("l", 200_000_000), ("d", 1))]
    return onnx_bytes([helper.make_node("Range", ["s", "l", "d"], ["r"]),
                       helper.make_node("Add", ["r", "r"], ["y"])], scalar)


# (file name, file content, command with FILE for its path, text the error must hold)
GRAPHS = [
    ("bad.json", '{"name": "g", oops', ["graph", "FILE"], "not valid JSON (line 1"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, ["graph", "FILE"], "nested too deeply"),
    ("big.json", graph_with(tensors__0__shape=[2**63]), ["graph", "FILE"], "2^56 elements"),
    ("nan.json", graph_with(nodes__0__attrs={"alpha": float("nan")}), ["graph", "FILE"],
     "field nodes.0.attrs.alpha"),
    ("inf.json", graph_with(nodes__0__attrs={"alpha": float("inf")}), ["graph", "FILE"],
     "field nodes.0.attrs.alpha"),
    ("cr.json", graph_with(nodes__0__name="r\r}; int x = system(\"id\"); //"),
     ["graph", "FILE"], "node name 'r\\r}"),
    ("nul.json", graph_with(tensors__1__name="y\0z"), ["graph", "FILE"], "control character"),
    ("esc.json", graph_with(name="\x1b[2J\x1b[31mred"), ["graph", "FILE"], "graph name"),
    ("empty.json", json.dumps({"name": "g", "tensors": [], "nodes": []}),
     ["plan", "FILE", "--target", "xeon-8180", "-o", "OUT"], "has no nodes to schedule"),
    ("op.json", graph_with(nodes__0__op="Bogus"), ["graph", "FILE"], "Bogus"),
    ("field.json", graph_with(nodes__0__extra=1), ["graph", "FILE"], "nodes.0.extra"),
    ("garbage.onnx", b"\x08\x07garbage\xff\xff", ["graph", "FILE"], "garbage.onnx"),
    ("empty.onnx", b"", ["graph", "FILE"], "empty.onnx"),
    ("range.onnx", range_bomb(), ["graph", "FILE"], "(Range): 200000000 values"),
    ("latin1.json", graph_with(name="caf").encode().replace(b'"caf"', b'"caf\xe9"'),
     ["graph", "FILE"], "latin1.json: not UTF-8 text (byte 0xe9 at offset"),
    ("lone.json", graph_with(name="g\ud800"), ["plan", "FILE", "--target", "xeon-8180", "-o",
                                                "OUT"], "lone.json: field name: '\\ud800'"),
    ("key.json", graph_with(nodes__0__attrs={"alpha\udc80": 1.0}), ["graph", "FILE"],
     "key.json: field nodes.0.attrs.'alpha\\udc80': '\\udc80' is a lone surrogate"),
    # What a kernel cannot run is refused with the graph, not when the executor loads.
    ("classes.json", json.dumps({
        "name": "g", "tensors": [{"name": "z", "shape": [2, 0], "role": "input"},
                                 {"name": "l", "shape": [2], "dtype": "int64", "role": "label"},
                                 {"name": "loss", "shape": []}],
        "nodes": [{"name": "ce", "op": "SoftmaxCrossEntropy", "inputs": ["z", "l"],
                   "outputs": ["loss"], "attrs": {}}], "outputs": ["loss"]}),
     ["plan", "FILE", "--target", "xeon-8180", "-o", "OUT"],
     "classes.json: node 'ce': SoftmaxCrossEntropy: logits must have at least one class"),
    ("op.onnx", onnx_bytes([helper.make_node("Bogus", [], ["y"], name="n1")]),
     ["graph", "FILE"], "op.onnx: unsupported ONNX ops: Bogus (node 'n1')"),
]
TARGETS = [
    ("t.json", json.dumps({"name": "t", "host_memory_bytes": -1}),
     ["plan", "zoo:mlp?batch=2", "--target", "FILE", "-o", "OUT"], "t.json"),
    ("nan.json", '{"name": "t", "host_memory_bytes": NaN}',
     ["plan", "zoo:mlp?batch=2", "--target", "FILE", "-o", "OUT"], "nan.json"),
    ("costs.json", '{"target": "t", "entries": [{"signature": NaN}]}',
     ["plan", "zoo:mlp?batch=2", "--target", "xeon-8180", "--costs", "FILE", "-o", "OUT"],
     "costs.json"),
    ("t8.json", b'{"name": "t\xd4"}', ["plan", "zoo:mlp?batch=2", "--target", "FILE", "-o", "OUT"],
     "t8.json: not UTF-8 text (byte 0xd4 at offset 11)"),
    ("c8.json", b'{"target": "t", "entries": [], "note": "\xd4"}',
     ["plan", "zoo:mlp?batch=2", "--target", "xeon-8180", "--costs", "FILE", "-o", "OUT"],
     "c8.json: not UTF-8 text (byte 0xd4 at offset 40)"),
    ("stats.json", b"\xd4", ["costs", "update", "OUT", "--from-stats", "FILE", "--plan",
                             str(PLANS / PLAN)], "stats.json: not UTF-8 text (byte 0xd4 at"),
]
PLANS_BAD = [
    ("host.json", plan_with(lambda d: d.update(target="host")), ["build", "FILE"], "target"),
    ("summary.json", plan_with(lambda d: d.update(summary=[])), ["show", "FILE"], "summary"),
    ("schema.json", plan_with(lambda d: d.update(schema="planner.plan/0")), ["build", "FILE"],
     "re-plan it"),
    ("nan.json", plan_with(lambda d: d["ops"][0].update(end=float("nan"))),
     ["diff", "FILE", "FILE"], "ops.0.end"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, ["diff", "FILE", "FILE"], "nested too deep"),
    ("ops.json", plan_with(lambda d: d.update(ops=5)), ["diff", "FILE", "FILE"], "ops"),
    ("p8.json", plan_with(lambda d: d.update(note="caf")).encode().replace(b'"caf"', b'"caf\xe9"'),
     ["show", "FILE"], "p8.json: not UTF-8 text (byte 0xe9"),
    *[(f"lone-{c}.json", plan_with(lambda d: d["graph"].update(name="g\ud800")),
       [c, "FILE", *(["FILE"] if c == "diff" else [])], "field graph.name: '\\ud800'")
      for c in ("show", "build", "diff")],
]
SPECS = [
    (None, None, ["graph", "zoo:lstm?seq=100000"], "'seq' = 100000 is beyond the limit"),
    (None, None, ["graph", "zoo:resnet?depth=3000000"], "beyond the limit 2000"),
    (None, None, ["graph", "zoo:lenet?width=nan"], "'width' must be finite"),
    (None, None, ["graph", "zoo:mlp?batch=-3"], "batch"),
    (None, None, ["plan", "zoo:mlp?batch=2", "--target", "xeon-8180", "--keep", "relu1,nope",
                  "-o", "OUT"], "--keep: graph 'mlp_batch2' has no tensor 'nope'"),
    (None, None, ["plan", "zoo:mlp?batch=2", "--target", "xeon-8180", "--memory-budget", "abc",
                  "-o", "OUT"], "--memory-budget: cannot read 'abc'"),
    (None, None, ["plan", "zoo:mlp?batch=2", "--target", "xeon-8180", "--memory-budget",
                  "1e400", "-o", "OUT"], "--memory-budget: byte count '1e400' is too large"),
    (None, None, ["plan", "zoo:resnet?batch=100000&depth=50", "--target", "xeon-8180", "-o",
                  "OUT"], "more than the 206158430208 bytes of memory of target 'xeon-8180'"),
    (None, None, ["fit", "zoo:resnet?depth=50", "--target", "k40c-12gb", "--budget", "1e15",
                  "--vary", "depth"], "more than the"),
]


@pytest.mark.parametrize("name, content, command, expected", GRAPHS + TARGETS + PLANS_BAD + SPECS,
                         ids=lambda v: v if isinstance(v, str) and len(v) < 20 else None)
def test_hostile_input_gives_one_line_and_exit_2(tmp_path, capsys, name, content, command,
                                                 expected):
    path = tmp_path / (name or "unused")
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    argv = [str(path) if a == "FILE" else str(tmp_path / "out.json") if a == "OUT" else a
            for a in command]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("planner: error: "), err
    assert expected in lines[0], lines[0]
    assert "\x1b" not in err and "\r" not in err


def test_verify_reports_a_malformed_plan_as_a_problem(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(plan_with(lambda d: d.update(target="host")))
    assert main(["verify", str(path)]) == 1
    assert "not a valid plan: field target" in capsys.readouterr().out


def test_verify_refuses_what_every_other_command_refuses(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(plan_with(lambda d: d["graph"].update(name="g\ud800")))
    assert main(["verify", str(path)]) == 1
    assert "field graph.name: '\\ud800' is a lone surrogate" in capsys.readouterr().out


def test_text_that_cannot_be_utf8_is_refused_before_anything_is_written(tmp_path):
    from planner.errors import UserError
    from planner.io.write import atomic_write

    with pytest.raises(UserError, match="'\\\\udc80' at character 1 is a lone surrogate"):
        atomic_write(tmp_path / "out.json", "a\udc80")
    assert list(tmp_path.iterdir()) == []


def test_nan_learning_rate_blames_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["graph", "zoo:mlp?batch=2", "--train", "sgd", "--lr", "nan"])
    assert exit_.value.code == 2
    assert "argument --lr: 'nan' must be a finite number >= 0" in capsys.readouterr().err


def test_names_with_terminal_escapes_are_escaped_on_output(tmp_path, capsys):
    data = json.loads((PLANS / PLAN).read_text())
    data["target"]["name"] = "\x1b]0;owned\x07\x1b[2J"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    main(["show", str(path)])
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\\x1b]0;owned\\x07" in out


def mutations():
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
    values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
        max_leaves=6)
    return st.lists(st.tuples(st.lists(st.integers(0, 50), min_size=1, max_size=4), values),
                    min_size=1, max_size=3)


def mutate(data, edits):
    """Replace the value at each path (indices pick among a container's keys or items)."""
    for path, value in edits:
        at = data
        for k, step in enumerate(path):
            keys = list(at) if isinstance(at, dict) else list(range(len(at))) \
                if isinstance(at, list) else []
            if not keys:
                break
            key = keys[step % len(keys)]
            if k == len(path) - 1 or not isinstance(at[key], (dict, list)):
                at[key] = value
                break
            at = at[key]
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(edits=mutations())
def test_mutated_plans_never_crash_verify_show_or_diff(tmp_path, capsys, edits):
    data = mutate(json.loads((PLANS / PLAN).read_text()), edits)
    path = tmp_path / "m.plan.json"
    path.write_text(json.dumps(data))
    for command in (["verify", str(path)], ["show", str(path)],
                    ["diff", str(PLANS / PLAN), str(path)]):
        code = main(command)
        err = capsys.readouterr().err
        assert code in (0, 1, 2) and "internal error" not in err, (command, err)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(edits=mutations())
def test_mutated_graphs_never_crash_graph_or_plan(tmp_path, capsys, edits):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(mutate(copy.deepcopy(GRAPH), edits)))
    for command in (["graph", str(path)],
                    ["plan", str(path), "--target", "xeon-8180", "-o", str(tmp_path / "o.json"),
                     "--force"]):
        code = main(command)
        err = capsys.readouterr().err
        assert code in (0, 2) and "internal error" not in err, (command, err)


def test_onnx_range_bomb_is_refused_without_materialising_it(tmp_path, capsys):
    import resource

    path = tmp_path / "bomb.onnx"
    path.write_bytes(range_bomb())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["graph", str(path)]) == 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KiB
    assert onnx.load(str(path)).graph.node[0].op_type == "Range"
