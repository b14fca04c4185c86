"""Reading the JSON the user gives (graphs, plans, cost tables, targets, options): one size
limit, UTF-8 throughout, pydantic's errors in one line naming the field, the graph normalised
and validated. Every command's reader (read_json) and the graph loader
(planner.frontend.load) use it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from planner.errors import UserError
from planner.graph import Graph, check_graph, normalize_attrs


def graph_from_json(text: str, source: str = "graph JSON") -> Graph:
    """Parse, normalise and validate graph JSON; errors name the offending field."""
    return graph_from_data(parse_json(text, source), source)


# The planner's own files, told apart by their top-level fields (the first that holds wins),
# so that one given where another is expected is named in one line, not as a list of
# missing fields.
FILE_KINDS = (
    ("plan", ("schema", "ops", "graph", "provenance")),
    ("curve", ("points", "graph_sha256", "target_sha256")),
    ("cost table", ("entries", "target")),
    ("target", ("host_memory_bytes", "logical_cpus")),
    ("graph", ("nodes", "tensors")),
)
# What to give instead, per kind found where a graph is expected.
INSTEAD = {
    "plan": "a plan embeds the step graph it was planned from, already made for training "
            "and the target's cores: give the GRAPH it was made from (the zoo spec, ONNX, "
            ".pt2 or graph JSON file)",
    "curve": "`planner fit --pareto` wrote it: give the GRAPH it was made from",
    "cost table": "give it with --costs, and the model as GRAPH",
    "target": "give it with --target, and the model as GRAPH",
}


def file_kind(data: object) -> str | None:
    """Which of the planner's files `data` (parsed JSON) is, by its fields (FILE_KINDS).

    >>> file_kind({"schema": "planner.plan/3", "ops": [], "graph": {}, "provenance": {}})
    'plan'
    >>> file_kind({"nodes": [], "tensors": []}), file_kind([1])
    ('graph', None)
    """
    if not isinstance(data, dict):
        return None
    return next((kind for kind, fields in FILE_KINDS if all(f in data for f in fields)), None)


def not_expected(source: str, data: object, expected: str) -> UserError | None:
    """The one-line refusal of a planner file of another kind given as a `expected`; None
    when `data` is no other planner file (its own validation then speaks)."""
    kind = file_kind(data)
    if kind is None or kind == expected:
        return None
    advice = INSTEAD.get(kind, "") if expected == "graph" else {
        "graph": "make one with `planner plan GRAPH --target T -o PLAN`"}.get(kind, "")
    return UserError(f"{source}: is a {kind} file, not a {expected}"
                     f"{'; ' + advice if advice else ''}")


def graph_from_data(data: object, source: str) -> Graph:
    """Normalise and validate parsed graph JSON; errors name `source` and the field."""
    wrong = not_expected(source, data, "graph")
    if wrong is not None:
        raise wrong
    try:
        graph = Graph.model_validate(data)
    except ValidationError as e:
        raise UserError(f"{source}: {describe_validation_error(e)}") from None
    return check_graph(normalize_attrs(graph))


def read_json(path: str | Path, what: str = "file") -> object:
    """The JSON data of the user's file `path` (a `what`: plan, cost table, target, ...): the
    one reader of every command. UserError naming the file, and the byte, line or field, for a
    file that cannot be read, is not UTF-8, is not JSON or holds text that cannot be written
    back as UTF-8 (a lone surrogate escape).

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(path, "wb").write(b'{"name": "caf\\xe9"}')
    >>> read_json(path, "target")
    Traceback (most recent call last):
    planner.errors.UserError: ...t.json: not UTF-8 text (byte 0xe9 at offset 13)
    """
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{path}: is a directory, not a {what}")
    if p.exists() and not p.is_file():
        raise UserError(f"{path}: is not a regular file")  # a FIFO would block the read
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    return parse_json_bytes(data, str(path))


def parse_json_bytes(data: bytes, source: str) -> object:
    """parse_json of a file's bytes, which must be UTF-8 (the error gives the first bad byte)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{source}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                        f"{e.start})") from None
    return parse_json(text, source)


def parse_json(text: str, source: str) -> object:
    """json.loads with one-line errors naming `source` (and the line and column); text that
    cannot be written back as UTF-8 is refused naming its field (see check_utf8).

    >>> parse_json('{"nodes": [{"name": "a\\\\ud800"}]}', "g.json")
    Traceback (most recent call last):
    planner.errors.UserError: g.json: field nodes.0.name: '\\ud800' is a lone surrogate, not text
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{source}: not valid JSON (line {e.lineno} column {e.colno}: "
                        f"{e.msg})") from None
    except RecursionError:
        raise UserError(f"{source}: JSON nested too deeply") from None
    # A lone surrogate can only come from a \uD8xx..\uDFxx escape: look only when one is there.
    if _SURROGATE_ESCAPE.search(text):
        check_utf8(data, source)
    return data


_SURROGATE_ESCAPE = re.compile(r"\\[uU][dD][89a-fA-F]")


def check_utf8(data: object, source: str) -> None:
    """Refuse a string (key or value) in JSON `data` that cannot be encoded as UTF-8, naming
    its field: checked before anything is written, so no half-written file names it.

    >>> check_utf8({"graph": {"name": "ok", "tags": ["x\\udc80"]}}, "p.json")
    Traceback (most recent call last):
    planner.errors.UserError: p.json: field graph.tags.0: '\\udc80' is a lone surrogate, not text
    """
    problem = _non_utf8_field(data, ())
    if problem:
        where, char = problem
        raise UserError(f"{source}: field {'.'.join(where) or 'document'}: {ascii(char)} is a "
                        f"lone surrogate, not text")


def _non_utf8_field(data: object, where: tuple[str, ...]) -> tuple[tuple[str, ...], str] | None:
    stack = [(data, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            bad = _lone_surrogate(value)
            if bad:
                return at, bad
        elif isinstance(value, dict):
            for key, item in value.items():
                bad = _lone_surrogate(key)
                if bad:
                    return (*at, ascii(key)), bad
                stack.append((item, (*at, key)))
        elif isinstance(value, list):
            stack.extend((item, (*at, str(i))) for i, item in enumerate(value))
    return None


def _lone_surrogate(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return text[e.start]
    return ""


def describe_validation_error(e: ValidationError) -> str:
    """One line for a pydantic error: the first problem with its field path, and a count."""
    errors = e.errors()
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"field {where}: {first['msg']}{more}"
