"""Memory planning: where every buffer of a step lives, and what a budget makes the plan add.

    order.py       happens-before reachability over the plan's edges (chain cover)
    liveness.py    buffers and lifetimes under the schedule; LOAD, naive, the per-op bound
    arena.py       offset heuristics (best fit by size, by breadth, first fit); best arena wins
    reuse.py       the ordering edges that sharing bytes needs
    layout.py      persistent state at the bottom, the rest by the heuristics, aliases
    assemble.py    TensorPlan records, edges and the memory summary into the Plan
    driver.py      plan_memory: the pass, as named steps
    verify.py      an independent O(n^2) check of a plan's buffers
    options.py     MemoryOptions, byte counts as text
"""

from planner.memory.driver import InfeasibleBudget, plan_memory  # noqa: F401
from planner.memory.options import MemoryOptions, format_bytes, parse_bytes  # noqa: F401
from planner.memory.verify import verify_memory_data  # noqa: F401
