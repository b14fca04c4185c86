"""The words `explain` and `diff` share for what memory planning did to a graph tensor:
kept (its bytes live in the arena from its write to its last read), recomputed (dropped after
forward, its node run again before backward reads it) or offloaded (copied to the host store
and back).

    >>> placements({"tensors": [{"name": "a", "tensor": "a"}, {"name": "a@recompute0",
    ...             "tensor": "a"}, {"name": "b", "tensor": "b"}],
    ...             "memory": {"ops": [{"kind": "recompute", "outputs": ["a@recompute0"]}]}})
    {'a': 'recomputed'}
"""

from __future__ import annotations

from typing import Any


def placements(plan: dict[str, Any]) -> dict[str, str]:
    """Graph tensor -> "recomputed" | "offloaded" for every tensor a plan's (JSON data) memory
    ops name; every other tensor is kept."""
    tensor_of = {t["name"]: t.get("tensor") or "" for t in plan.get("tensors") or ()}
    out: dict[str, str] = {}
    for o in (plan.get("memory") or {}).get("ops") or ():
        if o.get("kind") == "recompute":
            names, word = o.get("outputs") or (), "recomputed"
        elif o.get("kind") == "offload":
            names, word = o.get("inputs") or (), "offloaded"
        else:
            continue
        for b in names:
            if tensor_of.get(b):
                out[tensor_of[b]] = word
    return dict(sorted(out.items()))
