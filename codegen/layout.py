"""Where every tensor and every op's scratch area lives in the executor's one arena.

The memory plan (`plan.tensors`: buffers with the graph `tensor` they hold and an `offset`;
per-op scratch areas and convolution workspaces are buffers that hold no tensor, written and
read by their op alone) decides where; a memory plan that leaves a tensor without a device
offset is refused (PlanError naming it), never silently replaced. Buffers named other than the
tensor they hold are its copies, which the ops memory planning added write: a recompute's or a
prefetch's in the arena, an offload's in the host store (a block of its own, `host_bytes`).
`own_layout` (render's layout="own", for tests and debugging) gives every tensor and every
copy its own 64-byte-aligned bytes, except that
  - an in-place update (`updates=p`) shares p's bytes (the executor writes it over p), and
  - the output of a view op (Reshape, Flatten) of a non-persistent tensor shares its input's
    bytes (the kernel then copies nothing): the rule memory planning follows too
    (planner.graph.views.view_aliases), so both layouts alias the same tensors;
and every op's planned scratch area its own 256-byte-aligned bytes after them (never shared,
so ops may run at the same time). An output the memory plan writes over its input
(OpDef.in_place: UnscaleGrads) gets bytes of its own here: its kernels run either way.
Sharing is recorded as `alias_of`, so the executor can re-point an alias when it reads an
input straight from the caller's array.

Example:
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> lay = own_layout(g)
    >>> lay.offsets["x"], lay.offsets["fc1/weight"], lay.scratch
    (0, 64, {})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import PlanError
from planner.graph.views import view_aliases
from planner.ir.graph import Graph
from planner.ops.collective import collective_buckets

Offset = int  # bytes from the arena's start
ALIGN = 64
# Scratch areas and workspaces: what the CUDA kernels are promised (planner.memory.gpu's
# DEVICE_ALIGNMENT; cuDNN asks for 256 bytes at most).
SCRATCH_ALIGN = 256


@dataclass(frozen=True)
class Copy:
    """A buffer holding a copy of graph tensor `tensor` at `offset` of the arena, or of the
    host store when `host`."""

    name: str
    tensor: str
    offset: Offset
    host: bool


@dataclass(frozen=True)
class ArenaLayout:
    """offsets: tensor -> byte offset; alias_of: tensor -> the tensor whose bytes and value
    it shares (an update, a view);
    scratch: op -> (offset, bytes) of its scratch area; bytes: the arena size they need;
    copies: the buffers holding copies of tensors, in plan order; host_bytes: the host
    store's size."""

    offsets: dict[str, Offset]
    alias_of: dict[str, str]
    bytes: int
    scratch: dict[str, tuple[Offset, int]]
    copies: tuple[Copy, ...] = ()
    host_bytes: int = 0


def _fields(e: Any) -> dict[str, Any]:
    if isinstance(e, dict):
        return e
    return {k: getattr(e, k, None) for k in ("name", "tensor", "offset", "bytes", "placement",
                                            "writer", "alias_of")}


def scratch_areas(planned: tuple[Any, ...]) -> dict[str, tuple[Offset, int]]:
    """op -> (offset, bytes) of the device buffers that hold no graph tensor (an op's scratch
    area or workspace, written by that op)."""
    out: dict[str, tuple[Offset, int]] = {}
    for e in map(_fields, planned):
        if not e.get("tensor") and e.get("writer") and e.get("placement") in (None, "device") \
                and e.get("bytes"):
            out[e["writer"]] = (int(e["offset"]), int(e["bytes"]))
    return out


def copies_of(planned: tuple[Any, ...]) -> list[dict[str, Any]]:
    """The planned buffers that hold a copy of a graph tensor (named other than it)."""
    return [e for e in map(_fields, planned)
            if e.get("tensor") and e.get("name") and e["name"] != e["tensor"]]


def arena_layout(graph: Graph, planned: tuple[Any, ...] = ()) -> ArenaLayout:
    """The memory plan's offsets, which must place every tensor of the graph on the device,
    and its copies where it says.

    `planned` holds the plan's buffers (planner.plan.TensorPlan records, or dicts with the
    same fields). Raises PlanError naming the first tensor without a device offset (or saying
    there is no memory plan at all).
    """
    offsets: dict[str, Offset] = {}
    aliases: dict[str, str] = {}
    holder: dict[str, str] = {}
    # An output written over its input (OpDef.in_place) shares the input's bytes, not its
    # value: no alias to the executor, which then refuses to return the input after the op
    # (ExecutorCore::overwritten_by) as it would any reuse of bytes.
    same_value = {t.name for t in graph.tensors if t.updates} | set(view_aliases(graph))
    for e in map(_fields, planned):
        tensor = e.get("tensor")
        if tensor and (e.get("name") or tensor) == tensor and e.get("offset") is not None \
                and e.get("placement") in (None, "device"):
            offsets[tensor] = int(e["offset"])
            holder[tensor] = tensor
            if e.get("alias_of") and tensor in same_value:
                aliases[tensor] = e["alias_of"]
    if not planned:
        raise PlanError(f"plan of graph {graph.name!r} has no memory plan (no tensors): plan "
                        f"it again")
    missing = next((t.name for t in graph.tensors if t.name not in offsets), None)
    if missing is not None:
        raise PlanError(f"the memory plan gives tensor {missing!r} no device offset")
    scratch = scratch_areas(planned)
    copies = tuple(Copy(e["name"], e["tensor"], int(e["offset"]), e.get("placement") == "host")
                   for e in copies_of(planned))
    size = {t.name: t.nbytes for t in graph.tensors}
    # A sharded bucket's collective reads and writes on to its last shard's end, past its
    # last member (planner.ops.collective): at the arena's top, that padding is the arena's.
    padded = [offsets[t] + b for t, (_, k, b) in collective_buckets(
        graph.nodes, lambda t: graph.tensor_map[t].size).items() if k == 0 and b]
    end = max([offsets[t.name] + t.nbytes for t in graph.tensors] + padded
              + [o + b for o, b in scratch.values()]
              + [c.offset + size[c.tensor] for c in copies if not c.host], default=0)
    host = max([c.offset + size[c.tensor] for c in copies if c.host], default=0)
    return ArenaLayout(offsets, {k: holder.get(v, v) for k, v in aliases.items()},
                       _align(end), scratch, copies, _align(host))


def own_layout(graph: Graph, planned: tuple[Any, ...] = ()) -> ArenaLayout:
    """Every tensor its own bytes in graph order, but for updates and views (see above), then
    every planned scratch area its own bytes."""
    aliases = {t.name: t.updates for t in graph.tensors if t.updates is not None}
    aliases |= view_aliases(graph)
    offsets: dict[str, Offset] = {}
    end = 0
    for t in graph.tensors:
        if t.name in aliases:
            continue
        offsets[t.name] = end
        end += _align(max(t.nbytes, 1))
    for name in aliases:
        offsets[name] = offsets[_root(aliases, name)]
    scratch: dict[str, tuple[Offset, int]] = {}
    for op, (_, nbytes) in sorted(scratch_areas(planned).items()):
        end = _align(end, SCRATCH_ALIGN)
        scratch[op] = (end, nbytes)
        end += nbytes
    end = _align(end)
    copies, host = [], 0
    size = {t.name: t.nbytes for t in graph.tensors}
    for e in copies_of(planned):
        on_host = e.get("placement") == "host"
        copies.append(Copy(e["name"], e["tensor"], host if on_host else end, on_host))
        if on_host:
            host += _align(max(size[e["tensor"]], 1))
        else:
            end += _align(max(size[e["tensor"]], 1))
    return ArenaLayout(offsets, aliases, end, scratch, tuple(copies), host)


def _root(aliases: dict[str, str], name: str) -> str:
    while name in aliases:
        name = aliases[name]
    return name


def _align(n: int, alignment: int = ALIGN) -> int:
    return (n + alignment - 1) // alignment * alignment
