"""What a damaged cost store still holds: every measurement in it that is whole and valid.

The per-host store (planner.costs.host_costs) is only ever replaced whole (atomic_write), so a
damaged one was cut short or edited by something else: a copy that ran out of disk, a hand, a
hostile neighbour. It is never trusted as a whole then, and never thrown away as a whole
either: each measurement (a signature's entry, its load, a step's fitted figures) that is
itself valid is kept, the rest dropped (measured again by the next plan, and the store
written back whole). Text cut short or broken midway is read up to the last member before the
break (`json_prefix`); an entry without a valid load of its own is kept as a busy one
(`UNKNOWN_LOAD`), so it prices plans until a quiet machine measures it again.

Example (a store cut short in its second entry; the first kept, with its load):
    >>> text = ('{"loads": {"a": 0.0}, "table": {"entries": [{"cpu": [{"affinity": "compact",'
    ...         ' "seconds": 1e-06, "threads": 1}], "signature": {"dtypes": ["float32"],'
    ...         ' "op": "Relu", "shapes": [[8]]}}, {"cpu": [{"affinity": "comp')
    >>> data = json_prefix(text)
    >>> len(data["table"]["entries"])
    2
    >>> from planner.costs.host_costs import HostCosts, StepFit, valid_load
    >>> kept, total = salvage(data, "host", (HostCosts, StepFit, valid_load))
    >>> [e.signature.op for e in kept.table.entries], total
    (['Relu'], 2)
    >>> kept.loads[kept.table.entries[0].key] == UNKNOWN_LOAD
    True
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from planner.costs.records import HOST_FIGURES, CostEntry, CostTable, Provenance
from planner.errors import UserError
from planner.io.read import check_utf8

# The load an entry is kept with when its own is lost: a busy one's (load.BUSY is 0.25), so
# it prices plans but is measured again once the machine is quiet.
UNKNOWN_LOAD = 1.0
# The most cut points json_prefix tries, last first: each try parses the prefix again.
_TRIES = 8


def json_prefix(text: str) -> Any:
    """The JSON value of `text`; where it is not JSON (cut short, or broken midway), the value
    of its longest prefix that ends right after a container's opening or right before a comma
    between two members, with its open containers closed; None where no such prefix parses."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        end = e.pos
    except RecursionError:
        return None
    cuts: list[tuple[int, str]] = []
    stack: list[str] = []
    in_string = escaped = False
    for i, c in enumerate(text[:end]):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            stack.append("]" if c == "[" else "}")
            cuts.append((i + 1, "".join(reversed(stack))))
        elif c in "]}":
            if stack:
                stack.pop()
        elif c == ",":
            cuts.append((i, "".join(reversed(stack))))
    for at, closers in reversed(cuts[-_TRIES:]):
        try:
            return json.loads(text[:at] + closers)
        except (json.JSONDecodeError, RecursionError):
            continue
    return None


def salvage(data: Any, target: str, records: tuple[Any, Any, Any]) -> tuple[Any, int]:
    """The host store of what `data` (a damaged store's JSON) holds that is valid on its own
    for target `target`, and how many entries `data` listed (kept or not). A store that
    names another target keeps nothing. `records`: host_costs' (HostCosts, StepFit,
    valid_load), handed in so that this module stays below host_costs, which reads it."""
    HostCosts, StepFit, valid_load = records  # noqa: N806 - classes, as host_costs names them

    top = data if isinstance(data, dict) else {}
    table = top.get("table") if isinstance(top.get("table"), dict) else {}
    listed = table.get("entries") if isinstance(table.get("entries"), list) else []
    # A store cut short lacks its table's target (sorted after the entries): its path, the
    # host's digest, names the target then.
    if table.get("target", target) != target:
        return HostCosts(table=CostTable(target=target)), len(listed)
    entries: dict[str, CostEntry] = {}
    for item in listed:
        entry = _valid(CostEntry, item)
        if entry is not None and entry.key not in entries:
            entries[entry.key] = entry
    figures = {}
    for name in HOST_FIGURES:
        if _valid(CostTable, {"target": target, name: table.get(name)}) is not None:
            figures[name] = table.get(name)
    provenance = [p for p in (_valid(Provenance, p) for p in _list(table.get("provenance")))
                  if p is not None and p.target == target]
    loads = top.get("loads") if isinstance(top.get("loads"), dict) else {}
    fits = top.get("fits") if isinstance(top.get("fits"), dict) else {}
    kept = HostCosts(
        table=CostTable(target=target, entries=tuple(entries.values()),
                        provenance=tuple(provenance), **figures),
        loads={k: loads[k] if valid_load(loads.get(k)) else UNKNOWN_LOAD for k in entries},
        timeless=tuple(sorted({t for t in _list(top.get("timeless"))
                               if isinstance(t, str) and _text(t)})),
        fits={k: f for k, f in ((k, _valid(StepFit, v)) for k, v in fits.items())
              if f is not None and _text(k)})
    for name in ("corun_load", "corun_fit"):
        one = _valid(HostCosts, {"table": {"target": target}, name: top.get(name)})
        if one is not None and name in top:
            kept = kept.model_copy(update={name: getattr(one, name)})
    return kept, len(listed)


def _valid(record: Any, item: Any) -> Any:
    """`item` validated as `record`, or None where it is not one (or holds text that cannot
    be written back: a lone surrogate)."""
    if not _text(item):
        return None
    try:
        return record.model_validate(item)
    except (ValidationError, ValueError, TypeError, RecursionError):
        return None


def _text(item: Any) -> bool:
    """Whether every string in `item` can be written back as UTF-8."""
    try:
        check_utf8(item, "store")
    except UserError:
        return False
    return True


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
