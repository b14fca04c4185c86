"""verify's check of the user's memory decisions, re-derived from the options the plan recorded
(provenance.options.memory: pins, region_budgets) and the plan's own records (its memory ops
and buffers), never from what memory planning says it did:

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


def pin_problems(plan: dict[str, Any]) -> list[str]:
    from pydantic import ValidationError

    from planner.errors import UserError
    from planner.memory.options import Pin, RegionBudget
    from planner.memory.pins import pin_of, under
    from planner.placement import placements

    memory = (((plan.get("provenance") or {}).get("options") or {}).get("memory") or {})
    if not memory.get("pins") and not memory.get("region_budgets"):
        return []
    try:
        pins = tuple(Pin.model_validate(p) for p in memory.get("pins") or ())
        regions = tuple(RegionBudget.model_validate(r) for r in memory.get("region_budgets")
                        or ())
    except ValidationError as e:
        return [f"provenance.options.memory: unreadable memory decision: "
                f"{e.errors()[0]['msg']}"]
    role = {t["name"]: t.get("role") for t in (plan.get("graph") or {}).get("tensors") or ()}
    activations = sorted(t for t, r in role.items() if r == "activation")
    try:
        decided = pin_of(activations, pins)
    except UserError as e:  # conflicting pins recorded
        return [f"provenance.options.memory: {e}"]
    where = placements(plan)
    problems = []
    flag = {"keep": "--keep-tensor", "recompute": "--recompute", "offload": "--offload"}
    words = {"recompute": "recomputed", "offload": "offloaded"}
    for t, p in sorted(decided.items()):
        got = where.get(t, "kept")
        if p.decision == "keep" and got != "kept":
            problems.append(f"{flag[p.decision]} {p.name}: tensor {t!r} is {got}")
        elif p.decision != "keep" and got not in ("kept", words[p.decision]):
            problems.append(f"{flag[p.decision]} {p.name}: tensor {t!r} is {got}")
    for p in pins:
        if p.decision == "keep":
            continue
        mine = [t for t, q in decided.items() if q == p]
        done = [t for t in mine if where.get(t) == words[p.decision]]
        if p.name in role and p.name not in done and decided.get(p.name) == p:
            problems.append(f"{flag[p.decision]} {p.name}: tensor {p.name!r} is "
                            f"{where.get(p.name, 'kept')}")
        elif mine and not done:
            problems.append(f"{flag[p.decision]} {p.name}: no tensor under it is "
                            f"{words[p.decision]}")
    n = len(plan.get("ops") or ())
    for r in regions:
        live = np.zeros(n + 1, dtype=np.int64)
        for b in plan.get("tensors") or ():
            t = b.get("tensor") or ""
            if b.get("placement", "device") == "device" and role.get(t) == "activation" \
                    and under(r.prefix, t):
                live[max(b["first"], 0): min(b["last"], n) + 1] += b["bytes"]
        peak = int(live.max(initial=0))
        if peak > r.bytes:
            problems.append(f"--region-budget {r.prefix}: its activations hold {peak} bytes "
                            f"at once, above {r.bytes}")
    return problems
