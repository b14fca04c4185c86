"""Learning-rate schedules by name, each giving the learning rate PyTorch's scheduler gives at
every step, as a factor of each parameter group's first learning rate (the value its
hyperparameter tensor records, planner/graph/optimizer.py):

| kind          | PyTorch                                                                     |
| ------------- | --------------------------------------------------------------------------- |
| constant      | no scheduler                                                                |
| warmup        | LinearLR(start_factor, end_factor=1, total_iters=warmup)                    |
| cosine        | CosineAnnealingLR(T_max=total, eta_min=min_factor * lr)                     |
| warmup-cosine | SequentialLR([LinearLR(start_factor, total_iters=warmup),                   |
|               |               CosineAnnealingLR(T_max=total - warmup, eta_min)], [warmup]) |
| step          | StepLR(step_size, gamma)                                                    |
| one-cycle     | OneCycleLR(max_lr=lr, total_steps=total, pct_start, div_factor,             |
|               |            final_div_factor), cos annealing, without momentum cycling       |

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
import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from planner.graph.ir import Tensor
from planner.graph.optimizer import parse_hyperparameter_tensor
from planner.records import Record


class Schedule(Record):
    """A named learning-rate schedule (module docstring); `total` counts steps."""

    kind: Literal["constant", "warmup", "cosine", "warmup-cosine", "step", "one-cycle"]
    total: int = Field(default=1, ge=1)
    warmup: int = Field(default=0, ge=0)
    start_factor: float = Field(default=1.0 / 3, gt=0, le=1)  # LinearLR's default
    min_factor: float = Field(default=0.0, ge=0, le=1)       # eta_min / lr
    step_size: int = Field(default=1, ge=1)
    gamma: float = Field(default=0.1, gt=0)
    pct_start: float = Field(default=0.3, gt=0, lt=1)
    div_factor: float = Field(default=25.0, gt=0)
    final_div_factor: float = Field(default=1e4, gt=0)

    @model_validator(mode="after")
    def _warmup_fits(self) -> Schedule:
        if self.kind == "warmup-cosine" and self.warmup >= self.total:
            raise ValueError(f"schedule warmup-cosine: warmup ({self.warmup}) must be shorter "
                             f"than total ({self.total})")
        return self

    def factor(self, step: int) -> float:
        """The learning rate at `step` (0-based) over each group's first one."""
        if self.kind == "constant":
            return 1.0
        if self.kind == "warmup":
            return self._linear(step)
        if self.kind == "cosine":
            return self._cosine(step, self.total)
        if self.kind == "warmup-cosine":
            if step < self.warmup:
                return self._linear(step)
            return self._cosine(step - self.warmup, self.total - self.warmup)
        if self.kind == "step":
            return self.gamma ** (step // self.step_size)
        return self._one_cycle(step)

    def _linear(self, step: int) -> float:
        if self.warmup == 0:
            return 1.0
        done = min(step, self.warmup) / self.warmup
        return self.start_factor + (1.0 - self.start_factor) * done

    def _cosine(self, step: int, span: int) -> float:
        low = self.min_factor
        return low + (1.0 - low) * (1 + math.cos(math.pi * step / span)) / 2

    def _one_cycle(self, step: int) -> float:
        # OneCycleLR's two phases, cos annealing between their ends (factors of max_lr)
        first = 1.0 / self.div_factor
        last = first / self.final_div_factor
        up = float(self.pct_start * self.total) - 1
        down = float(self.total) - 1
        if step <= up:
            return _cos_anneal(first, 1.0, step / up)
        return _cos_anneal(1.0, last, (step - up) / (down - up))

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


def _cos_anneal(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def first_learning_rates(plan_json: str) -> dict[int, float]:
    """{group: the learning rate its hyperparameter tensor starts from} of a plan (JSON)."""
    out = {}
    for t in json.loads(plan_json)["graph"]["tensors"]:
        parsed = parse_hyperparameter_tensor(str(t.get("name", "")))
        if parsed is not None and parsed[1] == "lr":
            out[parsed[0]] = Tensor.model_validate(t).value
    return dict(sorted(out.items()))
