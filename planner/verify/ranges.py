"""A range plan's record (Plan.shape_range, `planner plan --batch-range`), re-derived from its
graph: the plan is made for the range's largest batch, so every feed (input or label) of its
graph has that batch as its first dimension, and the range is not empty. The arena the plan
lays out is then checked for the largest batch by memory's own rules; a smaller batch's
tensors sit inside the bytes the largest's have (planner/pipeline/ranges.py, checked again
when an executor is made for it).

Example:
    >>> graph = {"tensors": [{"name": "x", "shape": [32, 6], "role": "input"},
    ...                      {"name": "w", "shape": [6, 3], "role": "param"}]}
    >>> range_problems({"graph": graph, "shape_range": {"smallest": 8, "largest": 32}})
    []
    >>> print(*range_problems({"graph": graph, "shape_range": {"smallest": 8, "largest": 16}}))
    ... # doctest: +NORMALIZE_WHITESPACE
    shape range: feed 'x' has batch 32, the range's largest is 16 (a range plan is made for its
    largest batch)
"""

from __future__ import annotations

from typing import Any


def range_problems(plan: dict[str, Any]) -> list[str]:
    """Every way the plan's shape_range disagrees with its graph (module docstring)."""
    shapes = plan.get("shape_range")
    if shapes is None:
        return []
    try:
        smallest, largest = int(shapes["smallest"]), int(shapes["largest"])
        feeds = [(t["name"], t["shape"]) for t in plan["graph"]["tensors"]
                 if t.get("role") in ("input", "label")]
    except (KeyError, TypeError, ValueError):
        return ["shape range: not a range of batches over a graph with feeds"]
    problems = []
    if not 1 <= smallest <= largest:
        problems.append(f"shape range: batches {smallest} to {largest} is no range")
    batched = [(n, s) for n, s in feeds if isinstance(s, list) and s]
    if not batched:
        problems.append("shape range: the graph has no feed with a batch dimension")
    for name, shape in batched:
        if shape[0] != largest:
            problems.append(f"shape range: feed {name!r} has batch {shape[0]}, the range's "
                            f"largest is {largest} (a range plan is made for its largest batch)")
    return problems
