"""`planner verify`: re-check a plan without trusting the planner (docs/verify.md).

Shares no code with the stages it checks; each module is a set of rules, and `rules.py` the
list every plan goes through:

    rules.py     the plan's own rules (names, placement, CPUs, deps, overlap, edges, lanes),
                 and the entry points below
    summary.py   every summary figure re-derived from ops, buffers and graph
    memory.py    the arena: buffers sharing bytes are ordered, in-place writes come last
    inserted.py  the ops memory planning added read and write what an executor runs
    pins.py      the user's memory decisions (keep, recompute, offload, region budgets)
    graph.py     the plan against the graph it embeds
    order.py     what the executor orders, and every pair of ops that must be ordered
    variants.py  the schedule variants for fewer free cores
    folds.py     a folded activation's preconditions (a LeakyRelu's positive slope)
"""

from planner.verify.rules import verify_plan, verify_plan_data, verify_plan_text  # noqa: F401
