"""The optimizer of a training graph: which update op each parameter gets, with what settings.

| kind     | update op            | state per param          | PyTorch equivalent               |
| -------- | -------------------- | ------------------------ | -------------------------------- |
| sgd      | SGD                  | none                     | SGD(lr, weight_decay)            |
| momentum | ApplyMomentum        | velocity                 | SGD(lr, momentum, dampening,     |
|          |                      | (+ one shared step with  | weight_decay, nesterov)          |
|          |                      | dampening)               |                                  |
| adam     | ApplyAdam            | m, v (amsgrad: + v_max)  | Adam(lr, betas, eps, wd,         |
|          |                      | (+ one shared step)      | amsgrad)                         |
| adamw    | ApplyAdam, decoupled | m, v (amsgrad: + v_max)  | AdamW(lr, betas, eps, wd=0.01,   |
|          |                      | (+ one shared step)      | amsgrad)                         |

`maximize` (every kind) negates each gradient before the update, as torch.optim does.
`from_torch` reads the same from PyTorch's spelling (betas, eps; `sgd` with momentum > 0 is
the momentum kind), refusing what has no equivalent in one line.

Parameter groups: `groups` lists groups after the first (index 0, the optimizer's own lr and
weight decay, as PyTorch's first entry of `param_groups`); a parameter joins the first group
whose `params` pattern (a regular expression) it contains, else group 0. The learning rate and
weight decay are not compiled in: each group's are float32 scalars the step reads,
`optim/group/<k>/lr` and `optim/group/<k>/weight_decay` (role "state", init "constant": the
value given here is only the first), set between steps (docs/training.md). With a `schedule`
the updates read `optim/group/<k>/lr/scheduled`, the first rate times the schedule's factor at
the optimizer steps taken (`optim/schedule_step`), computed in the step (ScheduledLR).

Example:
    >>> Optimizer(kind="adam").update_attrs()
    {'beta1': 0.9, 'beta2': 0.999, 'decoupled': False, 'epsilon': 1e-08}
    >>> Optimizer.parse("momentum", lr=0.1).momentum
    0.9
    >>> opt = Optimizer(kind="adamw", groups=[ParamGroup(params="bias$", weight_decay=0.0)])
    >>> opt.weight_decay, [opt.group_of(p) for p in ("fc/weight", "fc/bias")]
    (0.01, [0, 1])
    >>> opt.hyperparameters(1)
    {'lr': 0.001, 'weight_decay': 0.0}
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from planner.dtypes import float32_value
from planner.ir.graph import Record
from planner.ops.lr_schedule import LRSchedule
from planner.ops.optim import UPDATE_PARTS

OptimizerKind = Literal["sgd", "momentum", "adam", "adamw"]

# Update op and the names of its per-parameter optimizer-state slots, in input order.
UPDATE_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sgd": ("SGD", ()),
    "momentum": ("ApplyMomentum", ("velocity",)),
    "adam": ("ApplyAdam", ("m", "v")),
    "adamw": ("ApplyAdam", ("m", "v")),
}

# Default learning rates, PyTorch's where it has one (Adam); SGD's is the usual starting point.
DEFAULT_LR: dict[str, float] = {"sgd": 0.01, "momentum": 0.01, "adam": 1e-3, "adamw": 1e-3}
# Default weight decay: PyTorch's (AdamW decays by default).
DEFAULT_WEIGHT_DECAY: dict[str, float] = {"sgd": 0.0, "momentum": 0.0, "adam": 0.0,
                                          "adamw": 0.01}

# The hyperparameters a step reads, per parameter group, in the update ops' input order.
HYPERPARAMETERS: tuple[str, ...] = ("lr", "weight_decay")
# The momentum a step reads as well with `cycle_momentum`, per kind (before lr).
MOMENTUM_NAMES: dict[str, str] = {"momentum": "momentum", "adam": "beta1", "adamw": "beta1"}
HYPER_SCOPE = "optim/group/"


def hyperparameter_tensor(group: int, name: str) -> str:
    """The name of group `group`'s hyperparameter `name` in a training graph.

    >>> hyperparameter_tensor(0, "lr")
    'optim/group/0/lr'
    """
    return f"{HYPER_SCOPE}{group}/{name}"


def parse_hyperparameter_tensor(name: str) -> tuple[int, str] | None:
    """(group, hyperparameter) of a tensor named by `hyperparameter_tensor`, else None.

    >>> parse_hyperparameter_tensor("optim/group/1/weight_decay"), parse_hyperparameter_tensor("w")
    ((1, 'weight_decay'), None)
    """
    if not name.startswith(HYPER_SCOPE):
        return None
    group, _, field = name.removeprefix(HYPER_SCOPE).partition("/")
    if not group.isdigit() or field not in (*HYPERPARAMETERS, *MOMENTUM_NAMES.values()):
        return None
    return int(group), field


class ParamGroup(Record):
    """A parameter group after the first: the parameters whose names contain a match of the
    regular expression `params` (re.search), with their own lr and weight decay where given
    (the optimizer's otherwise), as an entry of PyTorch's `param_groups`."""

    params: str = Field(min_length=1)
    lr: float | None = Field(default=None, ge=0)
    weight_decay: float | None = Field(default=None, ge=0)

    @field_validator("lr", "weight_decay")
    @classmethod
    def _float32(cls, v: float | None) -> float | None:
        return v if v is None else float32_value(v)

    @field_validator("params")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"parameter group pattern {pattern!r} is not a regular "
                             f"expression: {e}") from None
        return pattern


class Optimizer(Record):
    """Settings of one optimizer. `lr` and `weight_decay` default per kind (DEFAULT_LR,
    DEFAULT_WEIGHT_DECAY) when left out."""

    kind: OptimizerKind
    lr: float = Field(ge=0)  # filled from DEFAULT_LR when left out; 0 as torch.optim allows
    weight_decay: float = Field(ge=0)  # filled from DEFAULT_WEIGHT_DECAY when left out
    # momentum only (torch.optim.SGD's; nesterov needs dampening 0, as there)
    momentum: float = Field(default=0.9, ge=0)
    nesterov: bool = False
    dampening: float = Field(default=0.0, ge=0, le=1)
    # adam and adamw only
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.999, ge=0, lt=1)
    epsilon: float = Field(default=1e-8, gt=0)
    amsgrad: bool = False
    # every kind: the gradient negated before the update (torch.optim's maximize)
    maximize: bool = False
    # parameter groups after the first (module docstring)
    groups: tuple[ParamGroup, ...] = ()
    # torch.nn.utils.clip_grad_norm_(params, max_norm) before the update, None: no clipping
    clip_grad_norm: float | None = Field(default=None, gt=0)
    # A learning-rate schedule recorded in the graph (planner/ops/lr_schedule.py): each
    # group's update reads lr * factor(optimizer steps taken), computed in the step. None:
    # the rate is what set_hyperparameters last wrote (a schedule driven from Python).
    schedule: LRSchedule | None = None
    # The momentum (momentum kind) or beta1 (adam, adamw) is a run-time scalar of each group,
    # `optim/group/<k>/momentum` or `.../beta1`, as lr: a scheduler's cycle_momentum writes
    # it between steps. False (left out of the record's dump): compiled into the update.
    cycle_momentum: bool = Field(default=False, exclude_if=lambda v: not v)

    # The step reads them as float32 scalars (docs/training.md).
    @field_validator("lr", "weight_decay", "momentum", "dampening", "epsilon", "clip_grad_norm")
    @classmethod
    def _float32(cls, v: float | None) -> float | None:
        return v if v is None else float32_value(v)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") in DEFAULT_LR:
            if data.get("lr") is None:
                data = {**data, "lr": DEFAULT_LR[data["kind"]]}
            if data.get("weight_decay") is None:
                data = {**data, "weight_decay": DEFAULT_WEIGHT_DECAY[data["kind"]]}
        return data

    @model_validator(mode="after")
    def _meaningful(self) -> Optimizer:
        # A setting another kind would read is refused, never silently dropped.
        if self.kind != "momentum" and (self.nesterov or self.dampening):
            raise ValueError(f"nesterov and dampening are settings of SGD with momentum > 0 "
                             f"(kind 'momentum'), not of {self.kind!r}")
        if self.kind not in ("adam", "adamw") and self.amsgrad:
            raise ValueError(f"amsgrad is a setting of adam and adamw, not of {self.kind!r}")
        if self.cycle_momentum and self.kind not in MOMENTUM_NAMES:
            raise ValueError(f"cycle_momentum: {self.kind!r} has no momentum to cycle")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("nesterov momentum requires a momentum > 0 and zero dampening "
                             "(as torch.optim.SGD)")
        return self

    @classmethod
    def parse(cls, kind: str, **settings: Any) -> Optimizer:
        """From a command-line spelling: `kind` in sgd | momentum | adam | adamw; None
        settings are left at their defaults. Raises ValueError naming the kind or field."""
        if kind not in UPDATE_OPS:
            raise ValueError(f"unknown optimizer {kind!r}; expected one of {sorted(UPDATE_OPS)}")
        return cls(kind=kind, **{k: v for k, v in settings.items() if v is not None})

    @property
    def update_op(self) -> str:
        return UPDATE_OPS[self.kind][0]

    @property
    def slots(self) -> tuple[str, ...]:
        """Per-parameter optimizer-state slots, in the update op's input order after grad."""
        return UPDATE_PARTS[self.update_op](self.update_attrs())[0]

    @property
    def counts_steps(self) -> bool:
        """Whether the update reads the shared step count (Adam's bias correction, SGD's
        undampened first step)."""
        return "step" in UPDATE_PARTS[self.update_op](self.update_attrs())[1]

    def update_attrs(self) -> dict[str, Any]:
        """Attributes of this optimizer's update op, every one spelled out but the optional
        ones at their defaults (dampening 0, amsgrad off: graphs made before them stay
        byte-identical); the learning rate and weight decay are inputs, not attributes."""
        if self.kind == "sgd":
            return {}
        read = {"momentum_input": True} if self.cycle_momentum else {}
        if self.kind == "momentum":
            damped = {"dampening": self.dampening} if self.dampening else {}
            return {**({} if read else {"momentum": self.momentum}), "nesterov": self.nesterov,
                    **damped, **read}
        return {**({} if read else {"beta1": self.beta1}), "beta2": self.beta2,
                "decoupled": self.kind == "adamw", "epsilon": self.epsilon,
                **({"amsgrad": True} if self.amsgrad else {}), **read}

    def group_of(self, param: str) -> int:
        """The index of the parameter group `param` belongs to (module docstring)."""
        for k, group in enumerate(self.groups, start=1):
            if re.search(group.params, param):
                return k
        return 0

    def hyperparameters(self, group: int) -> dict[str, float]:
        """The first values of group `group`'s hyperparameters in the update's input order:
        with `cycle_momentum` its momentum or beta1, then HYPERPARAMETERS."""
        if not 0 <= group <= len(self.groups):
            raise ValueError(f"parameter group {group} does not exist; the optimizer has "
                             f"{len(self.groups) + 1}")
        own = self.groups[group - 1] if group else None
        lr = own.lr if own is not None and own.lr is not None else self.lr
        wd = (own.weight_decay if own is not None and own.weight_decay is not None
              else self.weight_decay)
        cycled = ({MOMENTUM_NAMES[self.kind]: self.momentum if self.kind == "momentum"
                   else self.beta1} if self.cycle_momentum else {})
        return {**cycled, "lr": lr, "weight_decay": wd}


class LossScaling(Record):
    """Dynamic loss scaling of fp16-mixed training (planner/ops/loss_scale.py), with
    torch.amp.GradScaler's defaults; the first scale is its init_scale, 2**16 (the scale
    state's init "loss-scale"). `enabled=False` plans fp16-mixed without it.

    Example:
        >>> LossScaling(growth_interval=3).update_attrs()
        {'backoff_factor': 0.5, 'growth_factor': 2.0, 'growth_interval': 3}
    """

    enabled: bool = True
    growth_factor: float = Field(default=2.0, gt=1)
    backoff_factor: float = Field(default=0.5, gt=0, lt=1)
    # At most 2^24: the clean-step count is a float32 (planner/ops/loss_scale.py), which
    # counts every integer up to 2^24 and no further (a longer interval would never end).
    growth_interval: int = Field(default=2000, ge=1, le=2**24)

    def update_attrs(self) -> dict[str, Any]:
        """Attributes of the UpdateLossScale op."""
        return {"backoff_factor": self.backoff_factor, "growth_factor": self.growth_factor,
                "growth_interval": self.growth_interval}
