"""The optimizer of a training graph: which update op each parameter gets, with what settings.

One record, one parameter group: every trainable parameter is updated with the same settings, as
`torch.optim.SGD(model.parameters(), ...)` or `torch.optim.Adam(...)` with one group.

| kind     | update op     | optimizer-state per param | PyTorch equivalent                        |
| -------- | ------------- | ------------------------- | ----------------------------------------- |
| sgd      | SGD           | none                      | SGD(lr, weight_decay)                     |
| momentum | ApplyMomentum | velocity                  | SGD(lr, momentum, weight_decay, nesterov) |
| adam     | ApplyAdam     | m, v (+ one shared step)  | Adam(lr, betas, eps, weight_decay)        |

Example:
    >>> Optimizer(kind="adam").update_attrs()
    {'beta1': 0.9, 'beta2': 0.999, 'epsilon': 1e-08, 'lr': 0.001, 'weight_decay': 0.0}
    >>> Optimizer.parse("momentum", lr=0.1).momentum
    0.9
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from planner.graph.ir import Record

OptimizerKind = Literal["sgd", "momentum", "adam"]

# Update op and the names of its per-parameter optimizer-state slots, in input order.
UPDATE_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sgd": ("SGD", ()),
    "momentum": ("ApplyMomentum", ("velocity",)),
    "adam": ("ApplyAdam", ("m", "v")),
}

# Default learning rates, PyTorch's where it has one (Adam); SGD's is the usual starting point.
DEFAULT_LR: dict[str, float] = {"sgd": 0.01, "momentum": 0.01, "adam": 1e-3}


class Optimizer(Record):
    """Settings of one optimizer. `lr` defaults per kind (see DEFAULT_LR) when left out."""

    kind: OptimizerKind
    lr: float = Field(gt=0)  # filled from DEFAULT_LR when left out
    weight_decay: float = Field(default=0.0, ge=0)
    # momentum only
    momentum: float = Field(default=0.9, ge=0)
    nesterov: bool = False
    # adam only
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.999, ge=0, lt=1)
    epsilon: float = Field(default=1e-8, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _default_lr(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("lr") is None and data.get("kind") in DEFAULT_LR:
            data = {**data, "lr": DEFAULT_LR[data["kind"]]}
        return data

    @classmethod
    def parse(cls, kind: str, **settings: Any) -> Optimizer:
        """From a command-line spelling: `kind` in sgd | momentum | adam; None settings are
        left at their defaults. Raises ValueError naming the kind or field."""
        if kind not in UPDATE_OPS:
            raise ValueError(f"unknown optimizer {kind!r}; expected one of {sorted(UPDATE_OPS)}")
        return cls(kind=kind, **{k: v for k, v in settings.items() if v is not None})

    @property
    def update_op(self) -> str:
        return UPDATE_OPS[self.kind][0]

    @property
    def slots(self) -> tuple[str, ...]:
        """Per-parameter optimizer-state slots, in the update op's input order after grad."""
        return UPDATE_OPS[self.kind][1]

    def update_attrs(self) -> dict[str, Any]:
        """Attributes of this optimizer's update op, every one spelled out."""
        if self.kind == "sgd":
            return {"lr": self.lr, "weight_decay": self.weight_decay}
        if self.kind == "momentum":
            return {"lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov,
                    "weight_decay": self.weight_decay}
        return {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon, "lr": self.lr,
                "weight_decay": self.weight_decay}


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
    growth_interval: int = Field(default=2000, ge=1)

    def update_attrs(self) -> dict[str, Any]:
        """Attributes of the UpdateLossScale op."""
        return {"backoff_factor": self.backoff_factor, "growth_factor": self.growth_factor,
                "growth_interval": self.growth_interval}
