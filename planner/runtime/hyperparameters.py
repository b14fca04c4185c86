"""The hyperparameters a training step reads: each parameter group's learning rate and weight
decay (and with the optimizer's cycle_momentum its momentum or beta1), float32 scalars an
executor holds beside the parameters (planner/graph/optimizer.py names them), set between
steps. Every backend's executor binds these two functions as methods:

    ex.set_hyperparameters({"lr": 0.05}, group=0)   # the next step reads 0.05
    ex.hyperparameters()                            # {0: {"lr": 0.05, "weight_decay": 0.0}}

They work on anything with an executor's `param_names`, `params(copy, names)` and
`load_params(values, partial=True)` (views of the hyperparameters alone: a view of a weight a
CPU executor holds in its kernels' layout would release it to plain, docs/executor.md);
a schedule (planner/runtime/schedules.py) or a PyTorch scheduler (planner/torch/schedule.py)
drives them.

Example (a stand-in holding what an executor holds):
    >>> import numpy as np
    >>> class Held:
    ...     def __init__(self): self.values = {"optim/group/0/lr": np.float32(0.1), "w": 0}
    ...     param_names = property(lambda self: list(self.values))
    ...     def params(self, copy=True, names=None):
    ...         return {n: self.values[n] for n in (self.values if names is None else names)}
    ...     def load_params(self, values, partial): self.values.update(values)
    >>> ex = Held()
    >>> set_hyperparameters(ex, {"lr": 0.25})
    >>> hyperparameters(ex)
    {0: {'lr': 0.25}}
    >>> set_hyperparameters(ex, {"lr": 0.1}, group=3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: set_hyperparameters: the plan has no hyperparameter 'lr' of parameter group 3 ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from planner.dtypes import float32_value
from planner.graph.optimizer import hyperparameter_tensor, parse_hyperparameter_tensor


def hyperparameters(ex: Any) -> dict[int, dict[str, float]]:
    """{group: {name: value}} of every hyperparameter `ex` holds, groups and names sorted."""
    held = _held(ex)
    try:  # views of host memory (CPU): nothing copied
        values = {n: float(np.asarray(v)) for n, v in held.items()}
    except (TypeError, ValueError, RuntimeError):  # device memory: one copy of the state
        copies = ex.params()
        values = {n: float(np.asarray(copies[n])) for n in held}
    out: dict[int, dict[str, float]] = {}
    for name, value in values.items():
        group, field = parse_hyperparameter_tensor(name)
        out.setdefault(group, {})[field] = value
    return {g: dict(sorted(out[g].items())) for g in sorted(out)}


def _held(ex: Any) -> dict[str, Any]:
    """The hyperparameter tensors of `ex` by name, as live views (no copy)."""
    return ex.params(copy=False, names=[n for n in ex.param_names
                                        if parse_hyperparameter_tensor(n) is not None])


def set_hyperparameters(ex: Any, values: Mapping[str, float], group: int = 0) -> None:
    """Set parameter group `group`'s hyperparameters (`lr`, `weight_decay`) for the next steps.
    Every name and value is checked before any is written; ValueError names a bad one."""
    held: dict[int, list[str]] = {}
    for name in _held(ex):
        g, field = parse_hyperparameter_tensor(name)
        held.setdefault(g, []).append(field)
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise ValueError(f"set_hyperparameters: group must be an int, got {group!r}")
    writes: dict[str, np.ndarray] = {}
    for name, value in values.items():
        if name not in held.get(int(group), {}):
            have = "; ".join(f"group {g}: {', '.join(sorted(h))}"
                             for g, h in sorted(held.items())) or "none"
            raise ValueError(f"set_hyperparameters: the plan has no hyperparameter {name!r} of "
                             f"parameter group {group} (it has: {have})")
        number = hyperparameter_value(value, f"set_hyperparameters: {name}")
        writes[hyperparameter_tensor(int(group), name)] = np.asarray(number, dtype=np.float32)
    if writes:
        ex.load_params(writes, partial=True)


def hyperparameter_value(value: Any, what: str) -> float:
    """`value` as the number a step reads: finite, >= 0, and held by float32 as itself or
    at least not as inf or a lost 0 (planner.dtypes.float32_value); ValueError naming `what`.

    >>> hyperparameter_value("fast", "lr")
    Traceback (most recent call last):
    ValueError: lr must be a number, got 'fast'
    """
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what} must be finite and >= 0, got {value}")
    try:
        return float32_value(number)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
