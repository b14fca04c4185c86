"""What a generated package calls at run time beyond its executor: fresh parameters drawn from
the graph's init hints, and the Chrome trace of the last step an executor ran. A generated
package imports only planner/runtime/; these are its doors to the reference interpreter's
initialisers (planner.graph.init_params), the trace report (planner.report.trace) and the
user-file writer (planner.io.write)."""

from __future__ import annotations

import json
from typing import Any


def initialised(ex: Any, plan: str, init: bool, seed: int) -> Any:
    """`ex`, with its parameters drawn from the graph of `plan` (the plan's JSON text) by their
    init hints when `init` (glorot, he, zeros, ...; `seed` picks the draw), as
    planner.graph.init_params does."""
    if init:
        from planner.graph import init_params
        from planner.ir.graph import Graph

        ex.load_params(init_params(Graph.model_validate(json.loads(plan)["graph"]), seed=seed))
    return ex


def write_trace(ex: Any, plan: str, path: Any, with_prediction: bool = False) -> None:
    """Write the last step `ex` ran as Chrome trace JSON at `path`, with the tracks of
    `planner show PLAN --trace`; with_prediction=True puts the prediction of `plan` (the plan's
    JSON text) in the same file, as a second process. Refuses to replace a different existing
    file."""
    from planner.io.write import write_text
    from planner.report.trace import measured_trace, plan_trace, side_by_side

    data = json.loads(plan)
    measured = measured_trace(data, ex.stats())
    if with_prediction:
        measured = side_by_side(plan_trace(data), measured)
    write_text(str(path), json.dumps(measured, sort_keys=True) + "\n")
