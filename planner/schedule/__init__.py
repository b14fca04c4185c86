"""Scheduling: which cores and how many threads each op gets, and when it runs.

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
    build.py       make_plan: the driver
"""

from planner.schedule.build import make_plan  # noqa: F401
from planner.schedule.options import STRATEGIES, ScheduleOptions  # noqa: F401
