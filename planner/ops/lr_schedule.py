"""Learning-rate schedules: the record that names one (LRSchedule), and the op that computes
it inside the step (ScheduledLR), so a schedule recorded in the plan needs nothing from
Python between steps.

Each schedule gives PyTorch's scheduler's learning rate at every optimizer step, as a factor
of a parameter group's first learning rate:

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

`step` counts the optimizer steps taken before the one the rate is for (0 for the first, as
a scheduler's last_epoch after `step()` was called that many times).

    ScheduledLR [lr, step] -> lr * factor(step)     (float32 scalar, int64 scalar -> float32)

computed in double and rounded once, by the same formulas on every backend
(templates/common/lr_schedule.h). A training graph with a recorded schedule
(Optimizer.schedule, planner/frontend/autodiff.py) feeds each group's update the scheduled rate
and counts its optimizer steps in `optim/schedule_step`.

Example:
    >>> s = LRSchedule(kind="warmup-cosine", warmup=2, total=6, start_factor=0.5)
    >>> [round(s.factor(t), 4) for t in range(7)]
    [0.5, 0.75, 1.0, 0.8536, 0.5, 0.1464, 0.0]
    >>> halving = LRSchedule.parse("step:step_size=3,gamma=0.5")
    >>> halving.factor(3)
    0.5
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("ScheduledLR").reference([np.float32(0.5), np.int64(3)], halving.attrs())
    [array(0.25, dtype=float32)]
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from planner.ir.record import Record
from planner.ops.base import Attr, Attrs, OpDef, OpError, TensorType, register

ScheduleKind = Literal["constant", "warmup", "cosine", "warmup-cosine", "step", "one-cycle"]


class LRSchedule(Record):
    """A named learning-rate schedule (module docstring); `total` counts optimizer steps."""

    kind: ScheduleKind
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
    def _fits(self) -> LRSchedule:
        if self.kind == "warmup-cosine" and self.warmup >= self.total:
            raise ValueError(f"schedule warmup-cosine: warmup ({self.warmup}) must be shorter "
                             f"than total ({self.total})")
        if self.kind == "one-cycle" and not 1 < self.pct_start * self.total < self.total - 1:
            raise ValueError(f"schedule one-cycle: pct_start * total ({self.pct_start} * "
                             f"{self.total}) must leave more than one step to each phase")
        return self

    @classmethod
    def parse(cls, text: str) -> LRSchedule:
        """From `KIND[:key=value,...]` (`warmup-cosine:warmup=100,total=10000`); ValueError
        naming the field."""
        kind, _, rest = text.partition(":")
        fields: dict[str, Any] = {"kind": kind}
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            if not eq or key not in cls.model_fields or key == "kind":
                raise ValueError(f"schedule {text!r}: {item!r} is not key=value of "
                                 f"{sorted(set(cls.model_fields) - {'kind'})}")
            if key in fields:
                raise ValueError(f"schedule {text!r}: {key} is given twice")
            fields[key] = value
        try:
            return cls(**fields)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(map(str, err["loc"])) or "schedule"
            raise ValueError(f"schedule {text!r}: {where}: "
                             f"{err['msg'].removeprefix('Value error, ')}") from None

    def attrs(self) -> dict[str, Any]:
        """The ScheduledLR node's attributes: every field."""
        return self.model_dump()

    def factor(self, step: int) -> float:
        """The learning rate at optimizer step `step` (0-based) over a group's first one."""
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


def _cos_anneal(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


# ---- ScheduledLR ------------------------------------------------------------------------------

_ATTR_KINDS = {int: "int", float: "float", str: "str"}


def _attrs() -> dict[str, Attr]:
    out = {}
    for name, field in LRSchedule.model_fields.items():
        if name == "kind":
            out[name] = Attr("str", required=True)
        else:
            out[name] = Attr(_ATTR_KINDS[type(field.default)], field.default)
    return out


def _schedule(a: Attrs) -> LRSchedule:
    try:
        return LRSchedule(**a)
    except ValidationError as e:
        err = e.errors()[0]
        raise OpError(f"ScheduledLR: {'.'.join(map(str, err['loc'])) or 'schedule'}: "
                      f"{err['msg'].removeprefix('Value error, ')}") from None


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    lr, step = ins
    if lr != TensorType((), "float32"):
        raise OpError(f"ScheduledLR: the first learning rate must be a float32 scalar, got "
                      f"shape {list(lr.shape)} ({lr.dtype})")
    if step != TensorType((), "int64"):
        raise OpError(f"ScheduledLR: the step count must be an int64 scalar, got shape "
                      f"{list(step.shape)} ({step.dtype})")
    _schedule(a)
    return [lr]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    lr, step = xs
    return [np.array(np.float32(float(lr) * _schedule(a).factor(int(step))))]


register(OpDef(
    name="ScheduledLR", arity=2, recompute="never",
    attrs=_attrs(),
    nondiff_inputs=(0, 1),
    infer=_infer,
    flops=lambda ins, outs, a: 8,
    reference=_reference,
    cost_class="elementwise",
    doc="ScheduledLR [lr, step] -> lr * factor(step): a learning-rate schedule recorded in the "
        "plan (warm-up, cosine, step, one-cycle; PyTorch's schedulers), computed in the step.",
))
