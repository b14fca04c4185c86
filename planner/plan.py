"""The Plan: every decision about one training (or inference) step, as reviewable data.

A plan lists, per op, where and when it runs: its execution order, its logical CPUs (one per
thread; on sibling hyper-threads when `smt`), its thread count and affinity, the parallel-loop
group it belongs to, and its predicted start and end (seconds from the step's start, from the
simulator). `happens_before` holds every ordering edge the executor enforces (data and in-place
dependencies, plus "the previous op on one of my CPUs"), so memory planning can rely on it
rather than on predicted times. `tensors` is where per-tensor memory decisions go (the memory
issue fills it; empty until then).

    {
      "happens_before": [{"after":"bn1","before":"conv1"}, ...],
      "ops": [
        {"affinity":"compact","cpus":[0,1,...],"deps":[],"end":0.0031,"group":"",
         "name":"conv1","op":"Conv2D","order":0,"smt":false,"start":0.0,"threads":68}, ...
      ],
      "provenance": {"costs_sha256": "...", "graph_sha256": "...", "target_sha256": "..."},
      "schema": "planner.plan/1",
      "summary": {"lower_bound_seconds": ..., "ratio": ..., "step_seconds": ..., ...},
      "target": {"core_of": [0, 1, ...], "name": "knl-7250"},
      "tensors": []
    }

Example:
    >>> p = OpPlan(name="a", op="Relu", order=0, cpus=(0,), threads=1, start=0.0, end=1e-6)
    >>> p.cores_text
    '0'
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import Field, ValidationError

from planner.errors import UserError
from planner.graph.ir import Graph, Record, canonical_json
from planner.target.records import Affinity, CpuId

SCHEMA = "planner.plan/1"
Seconds = float


class OpPlan(Record):
    """One op's placement. Times in seconds from the step's start; intervals half-open."""

    name: str = Field(min_length=1)
    op: str = Field(min_length=1)
    order: int = Field(ge=0)
    cpus: tuple[CpuId, ...]
    threads: int = Field(ge=1)
    affinity: Affinity = "compact"
    # Runs on hyper-thread siblings of cores that another concurrent op also uses (Strategy 4).
    smt: bool = False
    # Ops of one group run as one parallel loop over the group's CPUs ("" = on its own).
    group: str = ""
    # Ops that must end before this one starts, by name (data and in-place dependencies).
    deps: tuple[str, ...] = ()
    start: Seconds = Field(ge=0)
    end: Seconds = Field(ge=0)

    @property
    def cores_text(self) -> str:
        """CPU ids as ranges: `0-3,8`."""
        return cpu_ranges(self.cpus)


Bytes = int


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


class Summary(Record):
    """Predicted step time, its lower bound and what the simulator saw."""

    strategy: str
    step_seconds: Seconds
    lower_bound_seconds: Seconds
    # step / bound (>= 1 up to rounding): how far the schedule may be from the best possible.
    ratio: float
    critical_path_seconds: Seconds
    area_bound_seconds: Seconds
    # The bound charging path length and work together, and the one that also keeps a phase's
    # idle cores from the next (planner.schedule.bound); the lower bound is the largest of the
    # four terms. 0 in plans from before they existed.
    allotment_bound_seconds: Seconds = 0.0
    cut_bound_seconds: Seconds = 0.0
    # Busy core-seconds / (cores x step) of the physical cores.
    utilization: float
    # Seed 002 Fig. 4: ops running, averaged over the start and finish events.
    mean_corun: float
    ops: int
    # Signatures the cost table lacked, priced by the analytical model.
    analytical_signatures: int = 0
    # Memory planning's numbers (planner.memory); None until memory is planned.
    memory: MemorySummary | None = None


class Edge(Record):
    """`before` ends before `after` starts; the executor enforces it."""

    before: str
    after: str


class PlanTarget(Record):
    """What verify needs of the target: its name and the physical core of every logical CPU."""

    name: str
    core_of: tuple[int, ...]
    # GPU plans: the name of each stream; an op's `cpus` then holds its stream's index, and
    # `core_of` maps each stream to itself (one "core" per stream).
    streams: tuple[str, ...] = ()


class PlanProvenance(Record):
    """sha256 of the canonical JSON of the inputs (costs: "" for the analytical model)."""

    graph_sha256: str
    target_sha256: str
    costs_sha256: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    tool: str = "planner"


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


class MemoryOp(Record):
    """An op memory planning added: a recompute of a graph node, or a copy between device and
    host. `inputs` and `outputs` are buffer names (TensorPlan), in the node's input and output
    order for a recompute (an output written to scratch is named as such)."""

    name: str = Field(min_length=1)
    kind: Literal["recompute", "offload", "prefetch"]
    # recompute: the graph node run again.
    node: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


class ConvChoice(Record):
    """A convolution's algorithm (cuDNN's family name) and the workspace it was given."""

    node: str
    algorithm: str
    workspace_bytes: Bytes = Field(ge=0)
    seconds: Seconds = Field(ge=0)
    # Where the time came from: "measured" (cost table) or "default" (family formula).
    source: str = "default"


class MemoryPlan(Record):
    """Memory planning's decisions beyond buffers: added ops and per-convolution algorithms."""

    ops: tuple[MemoryOp, ...] = ()
    convs: tuple[ConvChoice, ...] = ()


class Plan(Record):
    """A schedule for one graph on one target (see the module docstring)."""

    schema_: Literal["planner.plan/1"] = Field(default=SCHEMA, alias="schema")
    # The graph the plan schedules, embedded so that a plan file alone is enough to build an
    # executor; provenance.graph_sha256 is the digest of its canonical JSON.
    graph: Graph
    kind: Literal["inference", "training"] = "training"
    target: PlanTarget
    ops: tuple[OpPlan, ...]
    happens_before: tuple[Edge, ...] = ()
    # Per-buffer memory decisions (bytes, offset, placement, lifetime): planner.memory.
    tensors: tuple[TensorPlan, ...] = ()
    # Ops memory planning added and per-convolution algorithms (None until memory is planned).
    memory: MemoryPlan | None = None
    summary: Summary
    provenance: PlanProvenance

    model_config = Record.model_config | {"populate_by_name": True}

    def op(self, name: str) -> OpPlan:
        for p in self.ops:
            if p.name == name:
                return p
        raise KeyError(f"plan has no op {name!r}")

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, ops in execution order, one op or edge per line."""
        return canonical_json(self.model_dump(mode="json", by_alias=True))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.model_validate_json(text)


def digest(text: str) -> str:
    """sha256 hex of a canonical JSON text."""
    return hashlib.sha256(text.encode()).hexdigest()


def cpu_ranges(cpus: tuple[int, ...]) -> str:
    """`(0, 1, 2, 5)` -> `'0-2,5'`."""
    parts: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def load_plan(path: str) -> Plan:
    """Read a plan file; UserError naming the file and the bad field."""
    try:
        text = open(path, encoding="utf-8").read()  # noqa: SIM115 - read whole, close at once
    except OSError as e:
        raise UserError(f"{path}: cannot read plan ({e.strerror or e})") from None
    try:
        plan = Plan.from_json(text)
    except ValidationError as e:
        from planner.load import describe_validation_error

        raise UserError(f"{path}: not a valid plan: {describe_validation_error(e)}") from None
    actual = digest(plan.graph.to_json())
    if actual != plan.provenance.graph_sha256:
        raise UserError(f"{path}: the embedded graph does not match the plan's graph_sha256 "
                        f"({actual[:12]} != {plan.provenance.graph_sha256[:12]}); re-plan it")
    return plan
