"""Learning-rate schedules applied from Python (a schedule recorded in the plan instead runs in
the step: Optimizer.schedule, planner/ops/lr_schedule.py, whose table and formulas these
are), each giving the learning rate PyTorch's scheduler gives at every step, as a factor of
each parameter group's first learning rate (the value its hyperparameter tensor records,
planner/graph/optimizer.py).

`step` counts the updates taken before the one the rate is for (0 for the first, as a
scheduler's last_epoch after `step()` was called that many times). Between steps,
`run = schedule.on(ex)` then `run.apply(step)` sets every group's learning rate
(ex.set_hyperparameters); the schedule and the step count are all there is to it, so a
resumed run continues it exactly.

Example:
    >>> s = Schedule(kind="warmup-cosine", warmup=2, total=6, start_factor=0.5)
    >>> [round(s.factor(t), 4) for t in range(7)]
    [0.5, 0.75, 1.0, 0.8536, 0.5, 0.1464, 0.0]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from planner.graph.optimizer import parse_hyperparameter_tensor
from planner.ir.graph import Tensor
from planner.ops.lr_schedule import LRSchedule


class Schedule(LRSchedule):
    """A named learning-rate schedule (planner.ops.lr_schedule.LRSchedule) applied from
    Python: each optimizer step's rates set in an executor between steps."""

    def lrs(self, base: float, steps: int) -> list[float]:
        """The learning rates of the first `steps` steps from a first learning rate `base`."""
        return [base * self.factor(t) for t in range(steps)]

    def apply(self, ex: Any, step: int) -> dict[int, float]:
        """Set every parameter group's learning rate in executor `ex` for step `step`;
        returns them by group. Reads the first rates from the plan each call: in a loop,
        `on(ex)` reads them once."""
        return self.on(ex).apply(step)

    def on(self, ex: Any) -> ScheduledRun:
        """This schedule driving executor `ex` (its groups' first rates read once)."""
        return ScheduledRun(self, ex, first_learning_rates(ex.plan))


@dataclass(frozen=True)
class ScheduledRun:
    """A schedule bound to an executor: `apply(step)` sets every group's learning rate."""

    schedule: Schedule
    ex: Any
    first: dict[int, float]

    def apply(self, step: int) -> dict[int, float]:
        out = {}
        for group, base in self.first.items():
            out[group] = base * self.schedule.factor(step)
            self.ex.set_hyperparameters({"lr": out[group]}, group=group)
        return out


def first_learning_rates(plan_json: str) -> dict[int, float]:
    """{group: the learning rate its hyperparameter tensor starts from} of a plan (JSON)."""
    out = {}
    for t in json.loads(plan_json)["graph"]["tensors"]:
        parsed = parse_hyperparameter_tensor(str(t.get("name", "")))
        if parsed is not None and parsed[1] == "lr":
            out[parsed[0]] = Tensor.model_validate(t).value
    return dict(sorted(out.items()))
