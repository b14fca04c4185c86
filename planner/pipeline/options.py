"""Every switch of planning, as one record (`PlanOptions`)."""

from __future__ import annotations

from planner.ir.record import Record
from planner.memory.options import MemoryOptions
from planner.schedule.options import ScheduleOptions
from planner.schedule.parallel import DataParallelOptions


class PlanOptions(Record):
    """Every switch of planning: the scheduler's, memory planning's, data parallelism's."""

    schedule: ScheduleOptions = ScheduleOptions()
    memory: MemoryOptions = MemoryOptions()
    data_parallel: DataParallelOptions = DataParallelOptions()
    # Carry the schedule's variants for fewer free cores (planner.memory.variants); a
    # one-process CPU plan only.
    variants: bool = True
