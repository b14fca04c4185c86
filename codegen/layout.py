"""Where every tensor lives in the executor's one arena.

The memory plan (`plan.tensors`: buffers with the graph `tensor` they hold and an `offset`)
decides where, when it gives every tensor a device offset; otherwise (no memory plan, or one
that adds recompute or offload ops this executor does not run yet) `own_layout` gives every
tensor its own 64-byte-aligned bytes, except that
  - an in-place update (`updates=p`) shares p's bytes (the executor writes it over p), and
  - the output of a view op (Reshape, Flatten) of a non-persistent tensor shares its input's
    bytes (the kernel then copies nothing): the rule memory planning follows too
    (planner.memory.liveness.view_aliases), so both layouts alias the same tensors.
Sharing is recorded as `alias_of`, so the executor can re-point an alias when it reads an
input straight from the caller's array.

Example:
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> lay = own_layout(g)
    >>> lay.offsets["x"], lay.offsets["fc1/weight"]
    (0, 64)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.graph.ir import Graph
from planner.memory.liveness import view_aliases

Offset = int  # bytes from the arena's start
ALIGN = 64


@dataclass(frozen=True)
class ArenaLayout:
    """offsets: tensor -> byte offset; alias_of: tensor -> the tensor whose bytes it shares;
    bytes: the arena size the tensors need (scratchpads are added at load)."""

    offsets: dict[str, Offset]
    alias_of: dict[str, str]
    bytes: int


def arena_layout(graph: Graph, planned: tuple[Any, ...] = (),
                 added_ops: int = 0) -> ArenaLayout:
    """The memory plan's offsets when it places every tensor of the graph on the device and
    adds no op (recompute, offload) the executor would have to run; else `own_layout`.

    `planned` holds the plan's buffers (planner.plan.TensorPlan records, or dicts with the
    same fields); a buffer names its graph tensor in `tensor` (workspaces name none: the
    executor sizes library scratchpads itself at load).
    """
    offsets: dict[str, Offset] = {}
    aliases: dict[str, str] = {}
    holder: dict[str, str] = {}
    for e in planned:
        get = e.get if isinstance(e, dict) else lambda k, e=e: getattr(e, k, None)
        tensor = get("tensor") or get("name")
        if tensor and get("offset") is not None and get("placement") in (None, "device"):
            offsets[tensor] = int(get("offset"))
            holder[get("name")] = tensor
            if get("alias_of"):
                aliases[tensor] = get("alias_of")
    if planned and not added_ops and all(t.name in offsets for t in graph.tensors):
        end = max((offsets[t.name] + t.nbytes for t in graph.tensors), default=0)
        return ArenaLayout(offsets, {k: holder.get(v, v) for k, v in aliases.items()},
                           _align(end))
    return own_layout(graph)


def own_layout(graph: Graph) -> ArenaLayout:
    """Every tensor its own bytes, in graph order, but for updates and views (see above)."""
    aliases = _aliases(graph)
    offsets: dict[str, Offset] = {}
    end = 0
    for t in graph.tensors:
        if t.name in aliases:
            continue
        offsets[t.name] = end
        end += _align(max(t.nbytes, 1))
    for name in aliases:
        offsets[name] = offsets[_root(aliases, name)]
    return ArenaLayout(offsets, aliases, end)


def _aliases(graph: Graph) -> dict[str, str]:
    """tensor -> the tensor whose bytes it takes over (its update target, or a view's root)."""
    out = {t.name: t.updates for t in graph.tensors if t.updates is not None}
    return out | view_aliases(graph)


def _root(aliases: dict[str, str], name: str) -> str:
    while name in aliases:
        name = aliases[name]
    return name


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN
