"""The Plan: every decision about one training (or inference) step, as reviewable data.

A plan names its backend (`cpu` or `cuda`, the target's kind) and lists, per op, where and when
it runs: its execution order; its lane; on a CPU its logical CPUs (one per thread; sibling
hyper-threads when `smt`), thread count, affinity and parallel-loop group; on a GPU its stream;
and its predicted start and end (seconds from the step's start). `tensors` places every buffer
(graph tensors, per-op scratchpads and convolution workspaces) in the arena with its lifetime;
`memory` lists the ops memory planning added and each convolution's algorithm.

The ordering, stated once: the executor orders two ops by exactly these, and nothing else:
  lanes           the ops of one lane (a host thread on a CPU, a stream on a GPU) run in
                  execution order, each after the previous one ends; on a CPU, consecutive
                  ops of one lane in one parallel-loop group may run at the same time (one loop)
  happens_before  an op starts after every op with an edge into it ends (data and in-place
                  dependencies, the previous op on one of its CPUs or on its stream, what memory
                  reuse needs)
`u` happens-before `w` when a path of these leads from u to w. Memory planning relies on that
order, never on predicted times; an op's `deps` are the graph's dependencies for people, not an
ordering. `planner verify` derives every pair that must be ordered from the embedded graph and
checks that this ordering implies it (planner.verify.order).

    {
      "backend": "cpu",
      "happens_before": [{"after":"bn1","before":"conv1"}, ...],
      "memory": {"convs": [], "ops": []},
      "ops": [
        {"affinity":"compact","cpus":[0,1,...],"deps":[],"end":0.0031,"group":"",
         "lane":0,"name":"conv1","op":"Conv2D","order":0,"smt":false,"start":0.0,"stream":"",
         "threads":68}, ...
      ],
      "provenance": {"costs_sha256": "...", "graph_sha256": "...", "target_sha256": "..."},
      "schema": "planner.plan/3",
      "summary": {"lower_bound_seconds": ..., "ratio": ..., "step_seconds": ..., ...},
      "target": {"core_of": [0, 1, ...], "name": "knl-7250", "streams": []},
      "tensors": [{"bytes":4096,"first":3,"last":9,"name":"conv1","offset":0, ...}, ...]
    }

Schema history: planner.plan/1 had no backend, put a GPU op's stream index into `cpus` and
kept library scratchpads out of the arena; planner.plan/2 had no lanes (the code generator
derived them). Such a plan is refused with a one-line error saying to re-plan it.

Example:
    >>> p = OpPlan(name="a", op="Relu", order=0, lane=0, cpus=(0,), threads=1, start=0.0,
    ...            end=1e-6)
    >>> p.cores_text
    '0'
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, ValidationError

from planner.errors import PlanError, UserError
from planner.ir.graph import Graph
from planner.ir.record import Backend, Record, Seconds, Stream, canonical_json, canonical_part
from planner.memory.decision import (  # noqa: F401 - the plan's memory records, re-exported
    TRANSFER_OPS,
    ConvChoice,
    MemoryOp,
    MemorySummary,
    TensorPlan,
)
from planner.memory.variants import ScheduleVariant
from planner.schedule.record import Edge, ScheduledOp, cpu_ranges  # noqa: F401 - re-exported

SCHEMA = "planner.plan/3"


class OpPlan(ScheduledOp):
    """One op of the plan: its placement (planner.schedule.record), execution order and lane
    (the module docstring: the ops of one lane run in execution order)."""

    order: int = Field(ge=0)
    lane: int = Field(ge=0)


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
    # Why the plan's strategy is not the one asked for: under a memory budget, the one-lane
    # schedule's plan was the cheaper way to meet it (planner.pipeline.placing); absent from
    # the JSON when the strategy is the one asked for.
    strategy_switch: str | None = Field(default=None, exclude_if=lambda v: v is None)
    # A CPU plan priced with a cost table: the keys of its signatures the table measured and
    # of those the analytical model priced (`planner show`); absent from the JSON without a
    # table (every signature modelled: analytical_signatures counts them).
    # (exclude_if, not a wrapping model serializer: one of those on a record makes every
    # dump of what holds it several times slower: inception_v3's plan's json_data, with the
    # Plan's and Graph's, 0.029 s; with none, 0.008 s.)
    measured_signatures: tuple[str, ...] | None = Field(default=None,
                                                        exclude_if=lambda v: v is None)
    modelled_signatures: tuple[str, ...] | None = Field(default=None,
                                                        exclude_if=lambda v: v is None)


class PlanTarget(Record):
    """What verify and the executor need of the target: its name, the physical core of every
    logical CPU (CPU plans), the streams, the GPU's compute capability and memory (GPU plans:
    the runtime is built for that architecture, and the executor refuses another device)."""

    name: str
    core_of: tuple[int, ...] = ()
    streams: tuple[Stream, ...] = ()
    compute_capability: str = Field(default="", pattern=r"^(\d{1,2}\.\d)?$")
    gpu_memory_bytes: int = Field(default=0, ge=0)


class MemoryPlan(Record):
    """Memory planning's decisions beyond buffers: added ops and per-convolution algorithms."""

    ops: tuple[MemoryOp, ...] = ()
    convs: tuple[ConvChoice, ...] = ()


class PlanProvenance(Record):
    """sha256 of the canonical JSON of the inputs (costs: "" for the analytical model)."""

    graph_sha256: str
    target_sha256: str
    costs_sha256: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    tool: str = "planner"


class ShapeRange(Record):
    """The batch sizes a plan serves (planner/pipeline/ranges.py): it is made for `largest`,
    the batch of its graph's feeds, and every batch from `smallest` up runs on its build."""

    dimension: Literal["batch"] = "batch"
    smallest: int = Field(ge=1)
    largest: int = Field(ge=1)


class Plan(Record):
    """A schedule for one graph on one target (see the module docstring)."""

    schema_: Literal["planner.plan/3"] = Field(default=SCHEMA, alias="schema")
    # Which executor runs it: the target's kind, chosen once by planner.pipeline.
    backend: Backend
    # The graph the plan schedules, embedded so that a plan file alone is enough to build an
    # executor; provenance.graph_sha256 is the digest of its canonical JSON.
    graph: Graph
    kind: Literal["inference", "training"] = "training"
    target: PlanTarget
    ops: tuple[OpPlan, ...]
    happens_before: tuple[Edge, ...] = ()
    # Per-buffer memory decisions (bytes, offset, placement, lifetime): planner.memory.
    tensors: tuple[TensorPlan, ...] = ()
    # Ops memory planning added and per-convolution algorithms.
    memory: MemoryPlan = MemoryPlan()
    summary: Summary
    provenance: PlanProvenance
    # The schedule for fewer free cores: per core count, every op on one unpinned lane in
    # execution order (planner.memory.variants); the executor picks one at run time.
    variants: tuple[ScheduleVariant, ...] = ()
    # A training plan's evaluation schedule (planner/evaluation.py); absent from the JSON when
    # None (inference plans, and training plans made without one). (exclude_if: see Summary.)
    evaluation: Evaluation | None = Field(default=None, exclude_if=lambda v: v is None)
    # The range of batches the plan serves (`planner plan --batch-range`); None: its own batch.
    shape_range: ShapeRange | None = Field(default=None, exclude_if=lambda v: v is None)

    model_config = Record.model_config | {"populate_by_name": True}

    def op(self, name: str) -> OpPlan:
        for p in self.ops:
            if p.name == name:
                return p
        raise KeyError(f"plan has no op {name!r}")

    @cached_property
    def json_data(self) -> dict[str, Any]:
        """The plan as JSON data (model_dump in JSON mode, by alias), made once: what to_json
        writes and planner.verify reads. Read it; never change it."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, ops in execution order, one op or edge per line."""
        return canonical_json(self.json_data, written=None if self.evaluation is None
                              else {"evaluation": self.evaluation.json_text})

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """The plan of a file's text; PlanError for another schema, ValidationError else
        (UserError for text that is not JSON: planner.io.read.parse_json, every
        command's reader)."""
        from planner.io.read import parse_json

        return cls.from_data(parse_json(text, "plan"))

    @classmethod
    def from_data(cls, data: Any) -> Plan:
        """The plan of a file's parsed JSON; PlanError for another schema, ValidationError
        else."""
        check_schema(data)
        return cls.model_validate(data)


class Binding(Record):
    """An evaluation tensor whose bytes are the training plan's tensor `training` (a parameter
    or state tensor of the same name): no arena slot of its own, no copy."""

    tensor: str = Field(min_length=1)
    training: str = Field(min_length=1)


class Evaluation(Record):
    """The evaluation schedule a training plan carries (planner/evaluation.py): the plan of
    its evaluation graph (planner.graph.evaluation) for the same target and costs, and the
    tensors of that plan bound to the training plan's bytes. The bound tensors keep their
    places in `plan.tensors` (the plan verifies as any plan); an executor gives them no bytes
    of its evaluation arena, which holds the plan's arena from `arena_offset` on (every other
    buffer lies there; codegen starts it at the aligned offset at or below)."""

    plan: Plan
    bound: tuple[Binding, ...] = ()
    arena_offset: int = Field(default=0, ge=0)

    @cached_property
    def json_text(self) -> str:
        """Its text in the training plan's file (its value there, canonical_part at depth 1),
        made once: where it is planned beside the step's (planner.pipeline.driver._evaluation, in a
        forked child with time to spare), the text comes back with the record, and writing
        the training plan takes it as it is (a quarter of inception_v3's to_json)."""
        return canonical_part(self.model_dump(mode="json", by_alias=True), 1)


Plan.model_rebuild()


def digest(text: str) -> str:
    """sha256 hex of a canonical JSON text."""
    return hashlib.sha256(text.encode()).hexdigest()


def load_plan(path: str) -> Plan:
    """Read a plan file; UserError naming the file and the bad field."""
    from planner.io.read import not_expected, read_json

    data = read_json(path, "plan")
    wrong = not_expected(path, data, "plan")
    if wrong is not None:
        raise wrong
    try:
        plan = Plan.from_data(data)
    except PlanError as e:
        raise UserError(f"{path}: {e}") from None
    except ValidationError as e:
        from planner.io.read import describe_validation_error

        raise UserError(f"{path}: not a valid plan: {describe_validation_error(e)}") from None
    actual = digest(plan.graph.to_json())
    if actual != plan.provenance.graph_sha256:
        raise UserError(f"{path}: the embedded graph does not match the plan's graph_sha256 "
                        f"({actual[:12]} != {plan.provenance.graph_sha256[:12]}); re-plan it")
    return plan


def plan_data_problem(data: Any) -> str:
    """Why `data` (a plan file's parsed JSON) is not a valid plan record, in one line naming
    the field; "" when it is one."""
    try:
        check_schema(data)
        Plan.model_validate(data)
    except PlanError as e:
        return str(e)
    except ValidationError as e:
        from planner.io.read import describe_validation_error

        return f"not a valid plan: {describe_validation_error(e)}"
    return ""


def check_schema(data: Any) -> None:
    """Raise PlanError unless `data` (a plan file's JSON) is of this planner's schema."""
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != SCHEMA:
        raise PlanError(f"plan schema {schema!r} is not {SCHEMA!r}: it was written by another "
                        f"version of the planner; re-plan it (planner plan ...)")
