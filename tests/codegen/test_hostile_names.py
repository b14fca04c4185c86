"""No input string becomes code: graphs whose names try to end every context the generated
sources have (C string, comment, raw string, Python literal, jinja) build, run and give their
names back byte for byte; control characters are refused at validation, naming the tensor."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codegen.render import StringTable, c_string, render_files
from planner.frontend.autodiff import make_training_graph
from planner.graph import Graph, GraphError, check_graph
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.helpers import build_module, gpu_plan, host_plan

MLP = dict(batch=4, hidden=[8], in_features=6, classes=3)


def payloads(marker: str) -> list[str]:
    """Suffixes that end a context of the generated sources if a name is spliced in raw; the
    last one runs `touch marker` if it ever becomes C++."""
    pwn = f'"; }}; extern "C" int system(const char*); static int p = system("touch {marker}"); //'
    return ['"', "\\", "*/ /*", ')"', ')PLAN"', 'PLAN(', ')PLAN_"x', "??=", "\u2028", "\u2029",
            "r\u00e9seau", "'''", '"""', "{{ name }}", "{% raw %}", "\\\\n", "\u202e", pwn,
            "x" * 10_000]


def renamed(graph: Graph, suffix) -> Graph:
    """`graph` with every tensor and node name (and the graph's own) given suffix(i)."""
    data = graph.model_dump(mode="json", exclude_none=True)
    names = {t["name"]: t["name"] + suffix(i) for i, t in enumerate(data["tensors"])}
    for t in data["tensors"]:
        t["name"] = names[t["name"]]
        if "updates" in t:
            t["updates"] = names[t["updates"]]
    for k, n in enumerate(data["nodes"]):
        n["name"] = n["name"] + suffix(k + len(names))
        n["inputs"] = [names[i] for i in n["inputs"]]
        n["outputs"] = [names[o] for o in n["outputs"]]
    data["outputs"] = [names[o] for o in data["outputs"]]
    data["name"] += suffix(len(names) + len(data["nodes"]))
    return check_graph(Graph.model_validate(data))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    marker = folder / "pwned"
    cases = payloads(str(marker))
    forward = renamed(build("mlp", **MLP), lambda i: cases[i % len(cases)])
    graph = make_training_graph(forward, Optimizer(kind="sgd", lr=0.1))
    module = build_module(graph, folder / "hostile_mlp")
    return graph, module, marker


def test_hostile_names_build_run_and_round_trip(hostile):
    graph, module, marker = hostile
    ex = module.Executor()
    assert not marker.exists()
    state = init_params(graph, seed=0)
    ex.load_params(state)
    feeds = random_feeds(graph, seed=1)
    out = ex.step(feeds)
    want, _ = train_step(graph, feeds, state)
    assert set(out) == set(graph.outputs)
    for name in graph.outputs:
        np.testing.assert_allclose(out[name], want[name], rtol=1e-4, atol=1e-6)
    assert set(ex.params()) == set(state)
    assert [op["name"] for op in ex.stats()["ops"]] == [n.name for n in graph.nodes]
    assert set(module.INPUTS) == set(feeds)
    assert ex.plan == module.plan
    assert not marker.exists()


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_hostile_names_reach_the_source_only_as_bytes(hostile, backend):
    graph, _, _ = hostile
    planned = host_plan(graph) if backend == "cpu" else gpu_plan(graph)
    assert planned.backend == backend
    files = render_files(planned, "hostile")
    source = files["schedule.cpp"]
    assert source.isascii()
    package = files["__init__.py"]  # names reach Python only as ascii() literals
    assert "system(" not in re.sub(r"'(?:[^'\\\n]|\\.)*'", "''", package)
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', source)  # the plan JSON's escaped literal
    assert "system" not in code and "PLAN" not in code and "*/ /*" not in code
    for line in code.splitlines():
        # comments hold no input text: only the generated header and op indices
        if "//" in line and not line.startswith("//"):
            assert re.fullmatch(r".*//( op)? \d+|.*// [a-z ,_()]+", line), line


@pytest.mark.parametrize("bad", ["\r", "\n", "\0", "\x1b[2J", "\x7f", "\x85"])
@pytest.mark.parametrize("where", ["tensor", "node", "graph"])
def test_control_characters_in_names_are_refused(bad, where):
    graph = build("mlp", **MLP)
    data = graph.model_dump(mode="json", exclude_none=True)
    if where == "tensor":
        data["tensors"][0]["name"] += bad
    elif where == "node":
        data["nodes"][0]["name"] += bad
    else:
        data["name"] += bad
    with pytest.raises(GraphError, match=f"{where} name .* control character U\\+00"):
        check_graph(Graph.model_validate(data))


@given(st.text())
def test_c_string_is_one_literal_of_safe_characters(text):
    literal = c_string(text)
    assert re.fullmatch(r'"(?:[ !#-/0-9:-Z\[\]^-~](?<!\?)|\\"|\\\\|\\[0-7]{3})*"', literal)
    decoded = re.sub(r"\\([0-7]{3}|.)", lambda m: chr(int(m.group(1), 8))
                     if len(m.group(1)) == 3 else m.group(1), literal[1:-1])
    assert decoded.encode("latin-1") == text.encode("utf-8")


@given(st.lists(st.text().filter(lambda s: "\0" not in s)))
def test_string_table_is_digits_and_round_trips(texts):
    table = StringTable()
    refs = [table.add(t) for t in texts]
    assert re.fullmatch(r"[0-9, \n]*", table.c_array())
    blob = bytes(int(b) for b in re.findall(r"\d+", table.c_array()))
    for t, ref in zip(texts, refs, strict=True):
        at = int(ref.split("+")[1])
        assert blob[at:blob.index(b"\0", at)].decode("utf-8") == t
