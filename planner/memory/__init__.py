"""Memory planning (seed 001): where every buffer of a step lives, and what a budget makes the
plan add (offloads, prefetches, recomputes, convolution algorithms and workspaces). It takes a
Schedule and returns a MemoryDecision (decision.py); it never builds a Plan.

Any schedule (liveness and offsets):
    order.py       happens-before reachability over the plan's edges (chain cover)
    liveness.py    buffers and lifetimes under the schedule; LOAD, naive, the per-op bound
    arena.py       offset heuristics (best fit by size, by breadth, first fit, a seeded search)
    reuse.py       the ordering edges that sharing bytes needs
    layout.py      persistent state at the bottom, the rest by the heuristics, aliases
    decision.py    MemoryDecision and its records (TensorPlan, MemoryOp, ConvChoice, summary)
    assemble.py    TensorPlan records and named edges of placed buffers
    cpu_memory.py  cpu_memory: the CPU pass, as named steps

The independent checks of a plan's buffers and of the ops added here sit with the other
checkers, above the stages they check (planner/verify/memory.py, inserted.py).

Under a budget (the compute order and prices: planner.schedule.streams; convolution
algorithms: planner.costs.convalgo):
    stash.py       checkpoints and recompute segments (speed-, memory-centric, cost-aware)
    materialize.py the ops, buffers and edges of a state (compute, d2h, h2d streams)
    budget/        the budget solver both backends share:
        search.py  the state (modes, exact live-bytes profile) and the greedy over moves
        solver.py  decide, lay, workspaces, times, the MemoryDecision of a solved state
    gpu.py         its GPU front: gpu_memory of a stream schedule (device alignment, the
                   library handles, the CUDA kernels' scratch)
    cpu_budget.py  its CPU front: CPU schedules below their liveness arena, one op at a time,
                   every op's kernel scratch laid out, offloads to a host store
    milp.py        the exact MILP (HiGHS) that cross-checks the greedy's recomputation

Options:
    options.py     MemoryOptions, byte counts as text

What reads finished plans sits above the stages, beside planner/plan.py: the reports and
seed 001's Fig. 10 (planner/report/memory.py), running a plan on real bytes against the
reference interpreter (planner/report/replay.py); so does `planner fit`, which plans many graphs
through the whole pipeline (planner/fit.py, its command planner/cli/fit.py).
"""

from planner.errors import InfeasibleBudget  # noqa: F401
from planner.memory.cpu_memory import cpu_memory  # noqa: F401
from planner.memory.decision import MemoryDecision  # noqa: F401
from planner.memory.options import MemoryOptions, format_bytes, parse_bytes  # noqa: F401
