"""verify's check of the user's memory decisions, re-derived from the options the plan recorded
(provenance.options.memory: pins, region_budgets, read here as plain data) and the plan's own
records (its memory ops and buffers), never from what memory planning says it did, nor with
its code (nothing of planner.memory is imported):

    keep T         T kept (neither recomputed nor offloaded)
    recompute P    no tensor it decides offloaded; T itself recomputed when P names a tensor,
                   else at least one tensor under P recomputed
    offload P      no tensor it decides recomputed; likewise offloaded
    region P: B    the device buffers of activations under P (their recomputed copies too),
                   live from their first to their last op in execution order, never hold
                   more than B bytes at once

Example:
    >>> plan = {"provenance": {"options": {"memory": {"pins": [
    ...     {"decision": "keep", "name": "a"}]}}}, "graph": {"tensors": [
    ...     {"name": "a", "role": "activation"}]}, "tensors": [
    ...     {"name": "a", "tensor": "a"}, {"name": "a@recompute0", "tensor": "a"}],
    ...     "memory": {"ops": [{"kind": "recompute", "outputs": ["a@recompute0"]}]}}
    >>> pin_problems(plan)
    ["--keep-tensor a: tensor 'a' is recomputed"]
"""

from __future__ import annotations

from typing import Any

import numpy as np

DECISIONS = ("keep", "recompute", "offload")


def _under(prefix: str, tensor: str) -> bool:
    # a pin names a tensor, or a module path whose tensors lie under `prefix/`
    return tensor == prefix or tensor.startswith(prefix + "/")


def _recorded(memory: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, int]],
                                                list[str]]:
    """The (decision, name) pins and (prefix, bytes) region budgets the plan recorded, and
    what is unreadable or contradictory in them."""
    pins, regions, problems = [], [], []
    for p in memory.get("pins") or ():
        d, name = (p.get("decision"), p.get("name")) if isinstance(p, dict) else (None, None)
        if d not in DECISIONS or not isinstance(name, str) or not name:
            problems.append(f"provenance.options.memory: unreadable memory decision {p!r}")
        else:
            pins.append((d, name))
    for r in memory.get("region_budgets") or ():
        prefix, limit = (r.get("prefix"), r.get("bytes")) if isinstance(r, dict) else (None, 0)
        if not isinstance(prefix, str) or not prefix or not isinstance(limit, int) \
                or isinstance(limit, bool) or limit <= 0:
            problems.append(f"provenance.options.memory: unreadable region budget {r!r}")
        else:
            regions.append((prefix, limit))
    said = {}
    for d, name in pins:
        if said.setdefault(name, d) != d:
            problems.append(f"provenance.options.memory: conflicting decisions for {name!r}: "
                            f"{said[name]} and {d}")
    return pins, regions, problems


def pin_problems(plan: dict[str, Any]) -> list[str]:
    """Every decision of the module docstring the plan (JSON data) does not hold."""
    from planner.report.placement import placements

    memory = (((plan.get("provenance") or {}).get("options") or {}).get("memory") or {})
    if not memory.get("pins") and not memory.get("region_budgets"):
        return []
    pins, regions, unreadable = _recorded(memory)
    if unreadable:
        return unreadable
    role = {t["name"]: t.get("role") for t in (plan.get("graph") or {}).get("tensors") or ()}
    activations = sorted(t for t, r in role.items() if r == "activation")
    # the pin deciding each activation: the longest name it lies under
    decided = {}
    for t in activations:
        matching = [p for p in pins if _under(p[1], t)]
        if matching:
            decided[t] = max(matching, key=lambda p: len(p[1]))
    where = placements(plan)
    problems = []
    flag = {"keep": "--keep-tensor", "recompute": "--recompute", "offload": "--offload"}
    words = {"recompute": "recomputed", "offload": "offloaded"}
    for t, (d, name) in sorted(decided.items()):
        got = where.get(t, "kept")
        if d == "keep" and got != "kept":
            problems.append(f"{flag[d]} {name}: tensor {t!r} is {got}")
        elif d != "keep" and got not in ("kept", words[d]):
            problems.append(f"{flag[d]} {name}: tensor {t!r} is {got}")
    for pin in dict.fromkeys(pins):
        d, name = pin
        if d == "keep":
            continue
        mine = [t for t, q in decided.items() if q == pin]
        done = [t for t in mine if where.get(t) == words[d]]
        if name in role and name not in done and decided.get(name) == pin:
            problems.append(f"{flag[d]} {name}: tensor {name!r} is {where.get(name, 'kept')}")
        elif mine and not done:
            problems.append(f"{flag[d]} {name}: no tensor under it is {words[d]}")
    n = len(plan.get("ops") or ())
    for prefix, limit in regions:
        live = np.zeros(n + 1, dtype=np.int64)
        for b in plan.get("tensors") or ():
            t = b.get("tensor") or ""
            if b.get("placement", "device") == "device" and role.get(t) == "activation" \
                    and _under(prefix, t):
                live[max(b["first"], 0): min(b["last"], n) + 1] += b["bytes"]
        peak = int(live.max(initial=0))
        if peak > limit:
            problems.append(f"--region-budget {prefix}: its activations hold {peak} bytes "
                            f"at once, above {limit}")
    return problems
