"""The `planner` command: summaries, JSON output, and one-line errors for bad input."""

import json
import subprocess
import sys

import pytest

from planner.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_graph_summary_of_a_zoo_model(capsys):
    code, out, err = run_cli(capsys, "graph", "zoo:lenet?image=8&batch=4")
    assert code == 0, err
    assert "Conv2D" in out and "parameters" in out


def test_graph_json_summary_is_machine_readable(capsys):
    code, out, _ = run_cli(capsys, "graph", "zoo:lenet?image=8&batch=4", "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["op_counts"]["Conv2D"] == 2
    assert summary["param_count"] > 0 and summary["flops"] > 0


def test_graph_json_file_round_trips_byte_identically(capsys, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert run_cli(capsys, "graph", "zoo:mlp?batch=2", "-o", str(first))[0] == 0
    assert run_cli(capsys, "graph", str(first), "-o", str(second))[0] == 0
    assert first.read_bytes() == second.read_bytes()


def test_output_file_is_not_overwritten_without_force(capsys, tmp_path):
    target = tmp_path / "mine.json"
    target.write_text("my notes\n")
    code, _, err = run_cli(capsys, "graph", "zoo:mlp?batch=2", "-o", str(target))
    assert code == 2 and "--force" in err
    assert target.read_text() == "my notes\n"
    assert run_cli(capsys, "graph", "zoo:mlp?batch=2", "-o", str(target), "--force")[0] == 0


def cycle_json() -> str:
    t = lambda n: {"name": n, "shape": [2]}  # noqa: E731
    return json.dumps({"tensors": [t("a"), t("b")], "nodes": [
        {"name": "p", "op": "Relu", "inputs": ["b"], "outputs": ["a"]},
        {"name": "q", "op": "Relu", "inputs": ["a"], "outputs": ["b"]}]})


BAD_INPUTS = {
    "missing file": (None, "no such file"),
    "truncated onnx": (b"\x08\x07\x12\x04back", "ONNX"),
    "random bytes onnx": (bytes(range(256)) * 3, "ONNX"),
    "cycle": (cycle_json().encode(), "cycle"),
    "missing field": (json.dumps({"tensors": [{"name": "x"}], "nodes": []}).encode(),
                      "tensors.0.shape"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_graph_files_give_one_line_errors(capsys, tmp_path, case):
    content, expected = BAD_INPUTS[case]
    path = tmp_path / ("model.onnx" if "onnx" in case else "graph.json")
    if content is not None:
        path.write_bytes(content)
    code, out, err = run_cli(capsys, "graph", str(path))
    assert code == 2
    assert err.startswith("planner: error:") and err.count("\n") == 1, err
    assert expected in err


@pytest.mark.parametrize("spec, expected", [
    ("zoo:nosuchnet", "resnet"),
    ("zoo:resnet?depth=abc", "depth"),
    ("zoo:resnet?colour=red", "colour"),
])
def test_bad_zoo_specs_give_one_line_errors(capsys, spec, expected):
    code, _, err = run_cli(capsys, "graph", spec)
    assert code == 2 and err.count("\n") == 1 and expected in err, err


def test_real_process_exits_nonzero_without_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(cycle_json())
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "graph", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "cycle" in proc.stderr
