"""canonical_json against its stated rule, written out plainly here: a list of records (dicts)
one record per line, a record holding such a list (at any depth) one key per line, everything
else compact; strings that look like JSON structure change nothing."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.ir.record import canonical_json


def record_list(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def spread(value) -> bool:
    # A dict is spread when some value is a record list, or a dict that is spread.
    return isinstance(value, dict) and any(
        record_list(v) or spread(v) for v in value.values())


def reference(value, depth: int = 0, top: bool = False) -> str:
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and (top or spread(value)):
        items = [f"{inner}{json.dumps(k)}: {reference(value[k], depth + 1)}"
                 for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
    if record_list(value):
        return "[\n" + ",\n".join(inner + reference(v, depth + 1) for v in value) + "\n" \
            + pad + "]"
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


names = st.sampled_from(["a", "b", "[{", "x[{y", "}]", "ops"])
leaves = st.one_of(st.integers(-3, 3), st.booleans(), st.none(), names,
                   st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(names, inner, max_size=3)), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(names, values, max_size=4))
def test_canonical_json_follows_its_rule(data):
    assert canonical_json(data) == reference(data, top=True) + "\n"


def test_a_string_like_a_record_list_keeps_its_record_compact():
    data = {"ops": [{"name": "a[{b", "deps": ["[{"]}, {"name": "c", "sub": [{"k": 1}]}]}
    assert canonical_json(data) == (
        '{\n  "ops": [\n    {"deps":["[{"],"name":"a[{b"},\n    {\n      "name": "c",\n'
        '      "sub": [\n        {"k":1}\n      ]\n    }\n  ]\n}\n')
