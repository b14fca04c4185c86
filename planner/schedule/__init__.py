"""Scheduling: where each op runs (logical CPUs and a thread count, or a GPU stream) and when.
Both schedulers return a Schedule record (record.py).

    record.py      Schedule, ScheduledOp, Edge, Bound: what either scheduler decides
    options.py     ScheduleOptions: the strategy and every heuristic switch
    costs.py       per-op time curves from the cost model (computed once per signature)
    deps.py        data and in-place dependencies
    bound.py       lower bounds: critical path, area, the allotment relaxation, the cut bound
    cores.py       concrete cores honouring cache groups (compact / spread)
    engine.py      the event loop the strategies share
    uniform.py     TensorFlow's uniform intra/inter setting and its grid
    paper.py       seed 002's Strategies 1-4
    optimized.py   moldable list scheduling, CPA-style (the default)
    simulate.py    discrete-event run with per-thread SMT interference
    contention.py  co-running ops' shared bandwidth and neighbours; contention_fit.py fits
                   its figures to a host's measured co-running step
    cpu.py         cpu_schedule: the CPU scheduler, as named steps
    streams.py     stream_schedule: the GPU scheduler (compute-stream order and times)
"""

from planner.schedule.cpu import cpu_schedule  # noqa: F401
from planner.schedule.options import STRATEGIES, ScheduleOptions  # noqa: F401
from planner.schedule.record import Schedule, ScheduledOp  # noqa: F401
from planner.schedule.streams import stream_schedule  # noqa: F401
