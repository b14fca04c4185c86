"""The `planner` command (main.py) and one module per command or shared set of flags.

    main.py         main, build_parser, `planner graph`, the one-line error on bad input
    plan.py         plan, show, diff, verify
    fit.py          fit (and the memory flags plan and show read); curve.py its --pareto
    explain.py      explain
    costs.py        profile, costs update
    target.py       target detect | show | list
    graph_flags.py  the GraphOptions flags of every command that makes a graph
    precision.py    the precision and loss-scaling flags; decisions.py the memory decisions
    flags.py        a flag that sets a record's field, named when the record refuses it

`planner build` and `planner run` are codegen's (codegen/cli.py), wired in by main.py.
"""

from planner.cli.main import build_parser, main  # noqa: F401
