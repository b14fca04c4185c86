"""Memory planning (seed 001): where every buffer of a step lives, and what a budget makes the
plan add (offloads, prefetches, recomputes, convolution algorithms and workspaces).

Any plan (liveness and offsets):
    order.py       happens-before reachability over the plan's edges (chain cover)
    liveness.py    buffers and lifetimes under the schedule; LOAD, naive, the per-op bound
    arena.py       offset heuristics (best fit by size, by breadth, first fit, a seeded search)
    reuse.py       the ordering edges that sharing bytes needs
    layout.py      persistent state at the bottom, the rest by the heuristics, aliases
    assemble.py    TensorPlan records, edges and the memory summary into the Plan
    driver.py      plan_memory: the pass, as named steps
    verify.py      an independent O(n^2) check of a plan's buffers

GPU stream plans under a budget:
    steps.py       the compute stream: order (updates as early as they may run) and op times
    convalgo.py    convolution algorithms: measured, or cuDNN family defaults + workspace
    stash.py       checkpoints and recompute segments (speed-, memory-centric, cost-aware)
    budget.py      the state (modes, exact live-bytes profile) and the greedy over moves
    materialize.py the ops, buffers and edges of a state (compute, d2h, h2d streams)
    gpu.py         gpu_plan: decide, place, workspaces, times, the Plan
    milp.py        the exact MILP (HiGHS) that cross-checks the greedy's recomputation
    replay.py      run a plan on real bytes against the reference interpreter (the oracle)

Searches and reports:
    fit.py         `planner fit`: the largest batch or ResNet depth within a budget
    report.py      summary numbers and seed 001's Fig. 10 as SVG
    cli.py         the `fit` command and the hooks `plan` and `show` call
    options.py     MemoryOptions, byte counts as text
"""

from planner.memory.driver import InfeasibleBudget, plan_memory  # noqa: F401
from planner.memory.options import MemoryOptions, format_bytes, parse_bytes  # noqa: F401
from planner.memory.verify import verify_memory_data  # noqa: F401
