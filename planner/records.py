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
    """Base of every record: frozen, no unknown fields.

    Records may memoise derived views with functools.cached_property (they are frozen, so a
    view never goes stale); `model_copy` drops those memos, since the copy may differ.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        copy = super().model_copy(update=update, deep=deep)
        for key in [k for k in copy.__dict__ if k not in type(self).model_fields]:
            del copy.__dict__[key]
        return copy



def canonical_json(data: Any) -> str:
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
    """
    return _format(data, 0, top=True) + "\n"


def _format(value: Any, depth: int, top: bool = False) -> str:
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and (top or _holds_record_list(value)):
        items = [f"{inner}{json.dumps(k)}: {_format(value[k], depth + 1)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
    if _is_record_list(value):
        items = [inner + _format(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return _compact(value)


def _is_record_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _holds_record_list(value: dict[str, Any]) -> bool:
    return any(_is_record_list(v) or (isinstance(v, dict) and _holds_record_list(v))
               for v in value.values())


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
