"""Planning's backend table: what differs between backends in planning (the scheduler, memory
planning, the resources a plan names, ...), one row per backend, chosen once by the target's
`backend` (tests/test_backend_branches.py holds every backend table to the same keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.costs import CostModel
from planner.ir.graph import Graph
from planner.ir.record import Backend
from planner.memory.cpu_budget import cpu_budget_solve
from planner.memory.cpu_memory import cpu_memory
from planner.memory.decision import MemoryDecision
from planner.memory.gpu import gpu_memory, technique_curves
from planner.memory.options import MemoryOptions
from planner.memory.variants import Rows, one_lane_rows
from planner.pipeline.options import PlanOptions
from planner.plan import OpPlan, PlanTarget
from planner.schedule.cpu import cpu_schedule
from planner.schedule.options import ScheduleOptions
from planner.schedule.record import Schedule
from planner.schedule.streams import COMM_STREAM, COMPUTE_STREAMS, STREAMS, stream_schedule
from planner.target.records import Target


@dataclass(frozen=True)
class BackendPlanner:
    """What differs between backends in planning: the scheduler, memory planning, and the
    target's resources a plan names (logical CPUs' cores, or streams)."""

    schedule: Callable[[Graph, CostModel, ScheduleOptions], Schedule]
    memory: Callable[[Graph, Schedule, CostModel, MemoryOptions], MemoryDecision]
    resources: Callable[[Target, tuple[OpPlan, ...]], PlanTarget]
    # The bytes a step may use: host memory, or the GPU's.
    memory_bytes: Callable[[Target], int]
    # Whether the arena is held to memory_bytes (a GPU plan meets its budget instead).
    arena_limited: bool
    # The one-lane schedule's options a schedule is compared with (planner.pipeline.placing
    # says which plan is kept), or None: a CPU schedule's lanes under a budget, whose arena's
    # reuse may order the lanes' ops one after another, each still on its lane's few threads
    # (all threads per op may then be faster); a GPU's co-running streams
    # (planner.schedule.gpu_streams).
    one_lane: Callable[[Schedule, PlanOptions], ScheduleOptions | None]
    # Whether ranks on one host share its cores and memory (planner.schedule.ranks); a GPU
    # rank has its device to itself.
    ranks_share_host: bool
    # Whether memory planning's edges replace the schedule's where it added ops: a CPU plan
    # under a budget runs in memory planning's order (updates moved up past the lanes');
    # a co-running GPU plan's memory edges hold the schedule's, transitively reduced anew.
    memory_orders: Callable[[Schedule], bool]
    # The schedule `fit` plans each trial with: a GPU plan meets a budget whenever its
    # one-stream plan does (co-running streams are kept only where they meet it too), so fit
    # plans one stream, the same answer without a second memory plan per trial.
    fit_schedule: ScheduleOptions
    # Every op's thread count and seconds on one lane per core count (planner.memory.variants:
    # the plan's variants for fewer free cores, and the one-lane schedule of all its cores
    # that the main one is compared with, planner.memory.one_lane), or None: a GPU's streams
    # are not shared with other processes' threads.
    variants: Callable[..., Rows] | None = None
    # Whether its executor runs gradient accumulation (a step that skips the optimizer step's
    # ops until a step's last micro-batch: planner/ir/accumulation.py).
    accumulates: bool = False
    # The budget search whose decisions `explain` replays with and without one of them
    # (planner.memory.cpu_budget), or None: a GPU plan's greedy is explained by its curves.
    budget_solve: Callable[..., Any] | None = None
    # Seed 001's Fig. 10 counterfactual curves (liveness, + offload, + recompute) that `show
    # --memory` draws (planner.memory.gpu.technique_curves), or None.
    technique_curves: Callable[..., Any] | None = None
    # Whether the summary names which signatures the cost table measured and which the
    # analytical model priced (a CPU table's signatures are the host's profiled ones).
    lists_priced: bool = False


def _cpu_resources(target: Target, ops: tuple[OpPlan, ...] = ()) -> PlanTarget:
    return PlanTarget(name=target.name, core_of=tuple(c.core for c in target.logical_cpus))


def _gpu_resources(target: Target, ops: tuple[OpPlan, ...] = ()) -> PlanTarget:
    gpu = target.gpus[0]
    # A co-running plan also names the compute streams it uses beyond `compute`, a
    # data-parallel one its comm stream.
    used = {op.stream for op in ops}
    return PlanTarget(name=target.name,
                      streams=STREAMS + tuple(s for s in (*COMPUTE_STREAMS[1:], COMM_STREAM)
                                              if s in used),
                      compute_capability=gpu.compute_capability,
                      gpu_memory_bytes=gpu.memory_bytes)


def _cpu_one_lane(schedule: Schedule, options: PlanOptions) -> ScheduleOptions | None:
    if schedule.strategy == "uniform" or options.memory.budget_bytes is None:
        return None
    return options.schedule.model_copy(update={"strategy": "uniform"})


def _gpu_one_lane(schedule: Schedule, options: PlanOptions) -> ScheduleOptions | None:
    return ScheduleOptions(strategy="uniform") if schedule.strategy == "streams" else None


BACKENDS: dict[Backend, BackendPlanner] = {
    "cpu": BackendPlanner(cpu_schedule, cpu_memory, _cpu_resources,
                          lambda t: t.host_memory_bytes, arena_limited=True,
                          one_lane=_cpu_one_lane, ranks_share_host=True,
                          memory_orders=lambda s: True, fit_schedule=ScheduleOptions(),
                          variants=one_lane_rows, accumulates=True,
                          budget_solve=cpu_budget_solve, lists_priced=True),
    "cuda": BackendPlanner(stream_schedule, gpu_memory, _gpu_resources,
                           lambda t: t.gpus[0].memory_bytes, arena_limited=False,
                           one_lane=_gpu_one_lane, ranks_share_host=False,
                           memory_orders=lambda s: s.strategy == "streams",
                           fit_schedule=ScheduleOptions(strategy="uniform"),
                           technique_curves=technique_curves),
}


def memory_of(target: Target) -> int:
    """Bytes one step may use on the target's backend: host memory for a CPU target (even one
    that lists a GPU), the first GPU's for a CUDA target."""
    return BACKENDS[target.backend].memory_bytes(target)
