"""The host's co-running figures (CostTable.contention, corun_slowdown, handoff_seconds) fitted
from two measured steps of one graph: its plan of one one-thread lane and its plan of one-thread
lanes on every core, which codegen.profiling.step_contention builds, runs and passes here.

kappa from the co-running plan's ops (contention.fit_contention: planned intervals, cores,
bandwidth demands and memory-boundness at their times alone, and the times they took
co-running). sigma from the step (contention.step_slowdown): the one at which the simulator,
its hand-offs priced at the measured hand-off, prices the co-running plan's step as measured,
in the simulator's terms (measured x the one-lane plan's predicted / measured step: what the
store's times miss of any step, the load among it, is not charged to co-running). Of the
plans' own graph: planning rewrites the graph it is given for the cores
(planner.step.for_cores: an LSTM's weight gradient as one GEMM), and the plan's ops are that
graph's nodes. Pricing a candidate sigma schedules the graph: this is the one place outside
the pipeline's stages that calls the CPU scheduler for it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import NamedTuple

from planner.costs import CostModel
from planner.costs.model import MissingCostWarning
from planner.costs.records import CostTable
from planner.ir.graph import Graph
from planner.schedule.contention import Contention, fit_contention, step_slowdown
from planner.schedule.cpu import cpu_schedule
from planner.schedule.options import ScheduleOptions
from planner.schedule.placement import Placement
from planner.target.records import Target


class Placed(NamedTuple):
    """An op of the co-running plan as planned: its node's name, its CPUs, its interval."""

    name: str
    cpus: tuple[int, ...]
    start: float
    end: float


def fit_corun_figures(target: Target, graph: Graph, corun: Sequence[Placed], lone_step: float,
                      costs: CostTable, alone_corun: Sequence[dict[str, float]],
                      steps: Sequence[float], handoff: float = 0.0) -> dict[str, float]:
    """The co-running figures (module docstring) of `graph`'s co-running plan, its ops placed
    `corun`, against its one-lane plan, whose predicted step is `lone_step`, both priced by
    `costs`: their ops' measured seconds `alone_corun`, their measured `steps` and the
    co-running step's median hand-off `handoff` (codegen.profiling.handoff_latency)."""
    alone, measured = alone_corun
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    ops = [o for o in corun if alone.get(o.name, 0) > 0 and measured.get(o.name, 0) > 0]
    shared = Contention.of(graph, target.cpu, kappa=1.0)
    demand, mu = shared.demands([Placement((index[o.name],), tuple(o.cpus), "compact",
                                           alone[o.name], o.start) for o in ops])
    kappa, _ = fit_contention(
        [alone[o.name] for o in ops], [measured[o.name] for o in ops],
        [o.start for o in ops], [o.end for o in ops], demand, mu, shared.memory,
        [len(o.cpus) for o in ops], target.cores)
    kappa = round(kappa, 6)
    options = ScheduleOptions(strategy="uniform", intra=1, inter=target.cores)

    def predict(sigma: float) -> float:
        figures = costs.model_copy(update={"contention": kappa, "corun_slowdown": sigma,
                                           "handoff_seconds": handoff})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingCostWarning)
            return cpu_schedule(graph, CostModel(target, figures), options).step_seconds

    goal = steps[1] * lone_step / steps[0] if steps[0] > 0 else 0.0
    return {"contention": kappa, "corun_slowdown": step_slowdown(predict, goal),
            "handoff_seconds": handoff}
