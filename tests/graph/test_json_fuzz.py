"""Fuzz the graph-JSON loader: any document either loads as a valid graph or raises a
one-line user error (UserError / ValueError); nothing else escapes."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import UserError
from planner.graph import GraphBuilder
from planner.io.read import graph_from_json


def base_document() -> dict:
    b = GraphBuilder("fuzz")
    x = b.input("x", (2, 3, 8, 8))
    w = b.param("w", (4, 3, 3, 3))
    y = b.op("Conv2D", [x, w], {"pads": [1, 1, 1, 1]})
    z = b.op("Relu", [y])
    return json.loads(b.build(outputs=[z]).to_json())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=10,
)


def paths(doc, prefix=()):
    """Every (path) into the document, for targeted mutation."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, (*prefix, i))


BASE = base_document()
ALL_PATHS = [p for p in paths(BASE) if p]


def mutate(doc, path, value, delete):
    doc = json.loads(json.dumps(doc))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def load_or_user_error(text: str) -> None:
    try:
        graph_from_json(text, source="fuzz.json")
    except (UserError, ValueError) as e:
        message = str(e)
        assert message and "Traceback" not in message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(ALL_PATHS), value=json_values, delete=st.booleans())
def test_mutated_graph_json_loads_or_fails_cleanly(path, value, delete):
    load_or_user_error(json.dumps(mutate(BASE, path, value, delete)))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_fails_cleanly(text):
    load_or_user_error(text)


def test_unmutated_document_loads():
    g = graph_from_json(json.dumps(BASE))
    assert g.tensor("relu").shape == (2, 4, 8, 8)
