"""What every stage shares: the immutable record base, canonical JSON, and the units.

Every artifact of the pipeline (Graph, Target, CostTable, Schedule, MemoryDecision, Plan) is a
`Record`: frozen, no unknown fields, with one canonical JSON text (sorted keys, one record per
line) so that equal inputs give byte-identical files and diffs read by meaning.

Units are plain numbers with names that say what they count:

    Bytes     a byte count or a byte offset from an arena's start
    Seconds   a duration, or a time from the step's start
    CpuId     a logical CPU (hardware thread) id of the target, 0..n-1
    Stream    a GPU stream's name ("compute", "d2h", "h2d")

Example:
    >>> class Pair(Record):
    ...     a: int
    ...     b: tuple[int, ...] = ()
    >>> print(canonical_json(Pair(a=1, b=(2, 3)).model_dump()), end="")
    {
      "a": 1,
      "b": [2,3]
    }
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Bytes = int
Seconds = float
CpuId = int
Stream = str
# Which executor runs a plan: chosen once, from the target (planner.pipeline).
Backend = Literal["cpu", "cuda"]


class Record(BaseModel):
    """Base of every record: frozen, no unknown fields, finite numbers only.

    Records may memoise derived views with functools.cached_property (they are frozen, so a
    view never goes stale); `model_copy` drops those memos, since the copy may differ.
    """

    # NaN and infinity are refused where they are read (a target, cost table, plan or option
    # holding one is invalid), not at write time, where JSON has no spelling for them.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        copy = super().model_copy(update=update, deep=deep)
        for key in [k for k in copy.__dict__ if k not in type(self).model_fields]:
            del copy.__dict__[key]
        return copy



def canonical_json(data: Any, written: dict[str, str] | None = None) -> str:
    """Deterministic JSON text: sorted keys; records with record lists spread over lines.

    A list of records (dicts) is written one record per line, and a record holding such a list
    (at any depth) is written one key per line, so that files diff well in review; everything
    else is compact. Byte-identical for equal data.

    >>> print(canonical_json({"b": [{"y": 1}, {"x": 2}], "a": {"k": [1, 2]}}), end="")
    {
      "a": {"k":[1,2]},
      "b": [
        {"y":1},
        {"x":2}
      ]
    }

    `written`: the text of some of the top-level keys' values, as canonical_part(value, 1)
    wrote it (made beforehand, where it cost nothing: planner.plan.Evaluation.json_text).
    """
    # Written into one list of pieces, joined once: a plan's text is megabytes, and each
    # concatenation of a level's text copied it again.
    out: list[str] = []
    _write(data, 0, out, top=True, written=written or {})
    out.append("\n")
    return "".join(out)


def canonical_part(value: Any, depth: int) -> str:
    """The text canonical_json writes for `value` at nesting `depth` (1: a top-level key's).

    >>> canonical_part({"b": [{"y": 1}]}, 1)
    '{\\n    "b": [\\n      {"y":1}\\n    ]\\n  }'
    """
    out: list[str] = []
    _write(value, depth, out)
    return "".join(out)


def _write(value: Any, depth: int, out: list[str], top: bool = False,
           written: dict[str, str] | None = None) -> None:
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and (top or _holds_record_list(value)):
        if not value:
            out.append("{}")
            return
        out.append("{\n")
        for j, k in enumerate(sorted(value)):
            out.append(f",\n{inner}{_key(k)}: " if j else f"{inner}{_key(k)}: ")
            if written and k in written:
                out.append(written[k])
            else:
                _write(value[k], depth + 1, out)
        out.append(f"\n{pad}}}")
        return
    if _is_record_list(value):
        # Most lists hold no record that holds a record list: those are encoded in one call
        # and split into lines at the records' bounds (record by record cost a fifth more).
        # The compact text of the list is "[" + the records' joined by "," + "]"; where "},{"
        # occurs once per bound it occurs nowhere else (the length the replacement added
        # counts them), and a record whose text lacks "[{" holds no record list
        # (_write_record).
        body = _compact(value)[1:-1]
        if "[{" not in body:
            lines = body.replace("},{", f"}},\n{inner}{{")
            if len(lines) - len(body) == (len(value) - 1) * (len(inner) + 1):
                out += ("[\n", inner, lines, f"\n{pad}]")
                return
        out.append("[\n")
        for j, v in enumerate(value):
            out.append(f",\n{inner}" if j else inner)
            _write_record(v, depth + 1, out)
        out.append(f"\n{pad}]")
        return
    out.append(_compact(value))


def _write_record(value: dict[str, Any], depth: int, out: list[str]) -> None:
    # A record list's compact text starts "[{", so a record whose text lacks it holds none:
    # one substring search instead of a walk over its fields (most records of a plan).
    text = _compact(value)
    if "[{" in text and _holds_record_list(value):
        _write(value, depth, out)
    else:
        out.append(text)


def _is_record_list(value: Any) -> bool:
    if not isinstance(value, list) or not value:
        return False
    for v in value:
        if not isinstance(v, dict):
            return False
    return True


def _holds_record_list(value: dict[str, Any]) -> bool:
    for v in value.values():
        if isinstance(v, list):
            if v and _is_record_list(v):
                return True
        elif isinstance(v, dict) and _holds_record_list(v):
            return True
    return False


_KEY = json.JSONEncoder()
_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)
# json.dumps with options builds a new encoder (and its C encoder) per call; the C encoder,
# made once, writes the same text (json.encoder's own one-shot path, without the set-up;
# no circular-reference markers: record dumps are trees).
_C_COMPACT = None if json.encoder.c_make_encoder is None else json.encoder.c_make_encoder(
    None, _COMPACT.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False,
    False)


def _key(k: Any) -> str:
    return json.encoder.encode_basestring_ascii(k) if type(k) is str else _KEY.encode(k)


def _compact(value: Any) -> str:
    if _C_COMPACT is None or isinstance(value, (str, int, float)) or value is None:
        return _COMPACT.encode(value)
    return "".join(_C_COMPACT(value, 0))
