"""The memory decision: what memory planning decides for a Schedule, before Plan assembly.

`cpu_memory` and `gpu_memory` (planner.memory.cpu_memory, planner.memory.gpu) return one; neither
ever builds a Plan. It holds

    tensors    every buffer: the graph tensor it holds (or "" for a workspace or scratch),
               bytes, arena offset, placement (device / host) and lifetime
    inserted   the ops memory planning added: recomputes, offloads, prefetches
    convs      per convolution, its algorithm and workspace (GPU plans)
    edges      the ordering edges that sharing bytes (and the inserted ops) need
    ops        the step's ops when memory planning re-timed them or added ops (a GPU plan
               under a budget: copies on their streams, waits for late prefetches; a CPU plan
               under a budget: the budget search's serial order, planner.memory.cpu_budget);
               () keeps the schedule's ops and times
    summary    LOAD, arena, the per-op bound, what offload and recompute cost

Example:
    >>> d = MemoryDecision(tensors=(), summary=MemorySummary(
    ...     naive_bytes=0, load_bytes=0, arena_bytes=0, fragmentation=0.0, peak_bytes=0,
    ...     per_op_bound_bytes=0, resident_bytes=0, liveness_load_bytes=0))
    >>> d.ops, d.inserted
    ((), ())
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.ir.record import Bytes, Record, Seconds
from planner.schedule.record import Edge, ScheduledOp


class MemorySummary(Record):
    """What memory planning achieved, in bytes (see planner.memory for the definitions).

    naive: every tensor its own bytes; load: the peak of live bytes under the schedule; arena:
    the device arena holding every buffer (>= load); fragmentation = arena / load - 1;
    per_op_bound: the largest single op's inputs + outputs + workspace plus resident state;
    resident: the persistent state alone (params, optimizer state, statistics); liveness_load:
    the load before any offload or recompute; host: pinned host bytes of offloaded copies.
    """

    naive_bytes: Bytes
    load_bytes: Bytes
    arena_bytes: Bytes
    fragmentation: float
    peak_bytes: Bytes
    per_op_bound_bytes: Bytes
    resident_bytes: Bytes
    liveness_load_bytes: Bytes
    budget_bytes: Bytes | None = None
    host_bytes: Bytes = 0
    allocator: str = ""
    recompute_ops: int = 0
    recompute_seconds: Seconds = 0.0
    offloaded_tensors: int = 0
    transfer_bytes: Bytes = 0
    # Compute time lost waiting for transfers (prefetches that could not be hidden).
    stall_seconds: Seconds = 0.0
    # Extra happens-before edges that memory reuse needed.
    reuse_edges: int = 0
    # The CPU executor packs each MatMul weight that several GEMMs read into oneDNN's blocked
    # layout once per step, held beside the arena (templates/cpu/runtime/weight_packs.h): a
    # decision of memory planning, since a plan held to a budget holds its arena and host
    # store and nothing else (so none there).
    weight_packs: bool = False


class TensorPlan(Record):
    """One buffer of the step: which value it holds, where its bytes are, and when.

    It occupies [offset, offset + bytes) of the device arena (placement "device") or of the
    pinned host pool ("host"). `first` and `last` are the execution orders of its first write
    and last read (-1: written before the step, by the caller or the previous step; len(ops):
    read after the step). `writer` and `readers` name those ops ("" for before the step): two
    buffers may share bytes only when every access of one happens-before the other's write.
    `alias_of` names the buffer an in-place update writes over (the graph's `updates`).

        {"bytes":4096,"first":3,"last":9,"name":"conv1","offset":0,"placement":"device",
         "readers":["bn1","grad/bn1/batchnormgrad"],"tensor":"conv1","writer":"conv1", ...}
    """

    name: str = Field(min_length=1)
    # The graph tensor whose value the buffer holds ("" for a workspace or scratch buffer).
    tensor: str = ""
    bytes: Bytes = Field(ge=0)
    offset: Bytes = Field(ge=0)
    placement: Literal["device", "host"] = "device"
    first: int = Field(ge=-1)
    last: int = Field(ge=-1)
    writer: str = ""
    readers: tuple[str, ...] = ()
    alias_of: str = ""


# What each transfer is, for everything that reads a plan (planner, verify, render, both
# runtimes): the op type its executor kernel is registered under, and the placement
# (TensorPlan.placement) of the buffer it reads and of the one it writes.
TRANSFER_OPS: dict[str, str] = {"offload": "Offload", "prefetch": "Prefetch"}
TRANSFER_PLACEMENTS: dict[str, tuple[str, str]] = {"offload": ("device", "host"),
                                                   "prefetch": ("host", "device")}


class MemoryOp(Record):
    """An op memory planning added: a recompute of a graph node, or a copy between device and
    host. `inputs` and `outputs` are buffer names (TensorPlan), in the node's input and output
    order for a recompute (an output written to scratch is named as such).

    An executor runs it like a graph node (`op_type`): a recompute runs its node's kernel,
    with the node's attrs, on these buffers; a transfer copies its one input buffer into its
    one output buffer (TRANSFER_PLACEMENTS says which side is the host store).

        >>> MemoryOp(name="offload/x", kind="offload", inputs=("x",),
        ...          outputs=("x@host",)).op_type({})
        'Offload'
    """

    name: str = Field(min_length=1)
    kind: Literal["recompute", "offload", "prefetch"]
    # recompute: the graph node run again.
    node: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def op_type(self, node_ops: dict[str, str]) -> str:
        """The op type an executor runs for it: its node's (node name -> op type in
        `node_ops`) for a recompute, the transfer's kernel otherwise."""
        return node_ops[self.node] if self.kind == "recompute" else TRANSFER_OPS[self.kind]


class ConvChoice(Record):
    """A convolution's algorithm (cuDNN's family name) and the workspace it was given."""

    node: str
    algorithm: str
    workspace_bytes: Bytes = Field(ge=0)
    seconds: Seconds = Field(ge=0)
    # Where the time came from: "measured" (cost table) or "default" (family formula).
    source: str = "default"


class MemoryDecision(Record):
    """Memory planning's decisions for one schedule (module docstring)."""

    tensors: tuple[TensorPlan, ...]
    inserted: tuple[MemoryOp, ...] = ()
    convs: tuple[ConvChoice, ...] = ()
    edges: tuple[Edge, ...] = ()
    ops: tuple[ScheduledOp, ...] = ()
    summary: MemorySummary
