"""The trainer's optimizer as PyTorch spells it: a torch.optim instance, or a name with
torch.optim's keyword names, read into planner.graph.Optimizer; what cannot be honoured is
refused in one line naming it, never dropped.

    trainer(model, ..., optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3,
                                                    betas=(0.9, 0.95), weight_decay=0.1))
    trainer(model, ..., optimizer="sgd", lr=0.1, momentum=0.9, nesterov=True)

| torch.optim                         | planner.graph.Optimizer                          |
| ----------------------------------- | ------------------------------------------------ |
| SGD(momentum=0)                     | kind sgd                                         |
| SGD(momentum>0, dampening, nesterov)| kind momentum (its momentum, dampening, nesterov)|
| Adam(betas, eps, amsgrad)           | kind adam (beta1, beta2, epsilon, amsgrad)       |
| AdamW, Adam(decoupled_weight_decay) | kind adamw                                       |
| lr, weight_decay, maximize          | the same names                                   |
| param_groups[k]                     | group k: its parameters by identity, its lr and  |
|                                     | weight_decay (run-time scalars of the step)      |
| a scheduler's cycle_momentum        | cycle_momentum: each group's momentum or         |
|                                     | betas[0] a run-time scalar of the step too       |

Momentum and betas[0] are compiled into the update unless a scheduler made before the
trainer cycles them (OneCycleLR's and CyclicLR's cycle_momentum, on by default: they leave
`max_momentum` and `base_momentum` in each group): then the step reads each group's, as it
reads lr, and Adam's bias correction takes this step's beta1 (torch's `1 - beta1 ** step`).
A change to a setting the plan compiled in is refused in one line before the step that would
ignore it.

`foreach` and `fused` choose how torch.optim loops over the parameters, not the update it
computes (the planner runs its own kernel per parameter), so they are accepted; `capturable`
likewise (CUDA graphs); `differentiable=True` (autograd through the step) is refused. A
setting other than lr, weight_decay (and a cycled momentum) that differs between param
groups is refused (the planner compiles it into the update), as is optimizer state already
held (steps taken, or a state_dict loaded: the executor starts from zero state), a
parameter in a group that is not the module's, and a parameter that requires grad, gets a
gradient and that no group holds (torch would leave it alone; the planner would train it).
One in no group that gets no gradient (a teacher called only under torch.no_grad()) is a
constant of the step.

Example:
    >>> from_settings("sgd", lr=0.1, momentum=0.9, dampening=0.1).update_attrs()
    {'momentum': 0.9, 'nesterov': False, 'dampening': 0.1}
    >>> from_settings("adam", betas=(0.8, 0.99), eps=1e-6, amsgrad=True).update_attrs()
    {'beta1': 0.8, 'beta2': 0.99, 'decoupled': False, 'epsilon': 1e-06, 'amsgrad': True}
    >>> try:
    ...     from_settings("adam", beta1=0.8)
    ... except ValueError as e:
    ...     print(str(e).split("; ")[-1])
    beta1 and beta2 are betas=(beta1, beta2)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

# torch.optim's keyword names per kind of the string form; the planner's own extras after.
TORCH_NAMES = {
    "sgd": ("lr", "weight_decay", "momentum", "dampening", "nesterov", "maximize"),
    "momentum": ("lr", "weight_decay", "momentum", "dampening", "nesterov", "maximize"),
    "adam": ("lr", "weight_decay", "betas", "eps", "amsgrad", "maximize"),
    "adamw": ("lr", "weight_decay", "betas", "eps", "amsgrad", "maximize"),
}
PLANNER_EXTRAS = ("clip_grad_norm", "groups", "schedule")
# The planner's old spellings, named in the refusal of each.
OLD_NAMES = {"beta1": "beta1 and beta2 are betas=(beta1, beta2)",
        "beta2": "beta1 and beta2 are betas=(beta1, beta2)", "epsilon": "epsilon is eps="}
# The settings besides lr and weight_decay each family reads per group (the planner's are
# one per optimizer); foreach, fused and capturable choose torch's loop, not its update.
_GROUP_KEYS = {"sgd": ("momentum", "dampening", "nesterov", "maximize"),
               "adam": ("betas", "eps", "amsgrad", "maximize", "decoupled_weight_decay")}


def from_settings(kind: str, lr: float | None = None, **settings: Any) -> Any:
    """planner.graph.Optimizer of the string form `kind` (sgd | momentum | adam | adamw) with
    torch.optim's keyword names (`sgd` with momentum > 0 is momentum SGD, as torch.optim.SGD);
    ValueError in one line naming a bad or unknown setting."""
    from planner.graph.optimizer import UPDATE_OPS, Optimizer

    if not isinstance(kind, str) or kind not in UPDATE_OPS:
        raise ValueError(f"optimizer {kind!r}: expected one of {', '.join(UPDATE_OPS)} or a "
                         f"torch.optim.SGD, Adam or AdamW instance")
    known = TORCH_NAMES[kind]
    for name in settings:
        if name not in known and name not in PLANNER_EXTRAS:
            hint = f"; {OLD_NAMES[name]}" if name in OLD_NAMES else ""
            raise ValueError(f"optimizer setting {name}: not one of torch.optim's names for "
                             f"{kind} ({', '.join(known)}; planner's: "
                             f"{', '.join(PLANNER_EXTRAS)}){hint}")
    fields: dict[str, Any] = {k: v for k, v in settings.items() if v is not None}
    if lr is not None:
        fields["lr"] = _number("lr", lr)
    if "betas" in fields:
        fields["beta1"], fields["beta2"] = _betas(fields.pop("betas"))
    if "eps" in fields:
        fields["epsilon"] = _number("eps", fields.pop("eps"))
    if kind == "sgd" and _number("momentum", fields.get("momentum", 0)) > 0:
        kind = "momentum"  # torch.optim.SGD(momentum=m) is momentum SGD
    elif kind == "sgd" and fields.get("momentum") is not None:
        fields.pop("momentum")  # momentum 0: plain SGD, torch's dampening then reads nothing
        if not fields.get("nesterov"):
            fields.pop("dampening", None)
    return _record(Optimizer, kind, fields)


def from_torch(optimizer: Any, module: Any, prefix: str) -> Any:
    """planner.graph.Optimizer of a torch.optim instance built on `module`'s parameters: its
    class, defaults and param groups (module docstring); the groups' parameters named as the
    graph names them (`prefix` + state_dict key). ValueError in one line for what it cannot
    honour."""
    import torch

    from planner.graph.optimizer import Optimizer, ParamGroup

    cls = type(optimizer)
    if cls not in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
        raise ValueError(f"optimizer {cls.__module__}.{cls.__qualname__}: the trainer runs "
                         f"torch.optim.SGD, Adam and AdamW (their exact classes); use one of "
                         f"them or the string form")
    family = "sgd" if cls is torch.optim.SGD else "adam"
    if any(optimizer.state.values()):
        raise ValueError(f"optimizer {cls.__name__}: it already holds state (steps taken or a "
                         f"state_dict loaded), which the trainer does not read; pass a fresh "
                         f"optimizer and load the state with Trainer.executor.load_state_dict")
    groups = optimizer.param_groups
    first = groups[0]
    cycle = cycles_momentum(optimizer)
    settings = compiled(optimizer, cycle)
    for k, group in enumerate(groups):
        if group.get("differentiable"):
            raise ValueError(f"optimizer {cls.__name__}: param_groups[{k}] differentiable=True "
                             f"(autograd through the step) is not built; leave it False")
        for key, value in settings[k].items():
            if k and value != settings[0][key]:
                raise ValueError(f"optimizer {cls.__name__}: param_groups[{k}] {key}="
                                 f"{value!r} differs from param_groups[0]'s "
                                 f"{settings[0][key]!r}; the planner takes per-group lr and "
                                 f"weight_decay only (give every group the same {key})")
    names = _names(module, groups, prefix, cls.__name__)
    fields: dict[str, Any] = {"lr": _number("lr", first["lr"]),
                              "weight_decay": _number("weight_decay", first["weight_decay"]),
                              "maximize": bool(first.get("maximize", False))}
    if family == "sgd":
        momentum = _number("momentum", first["momentum"])
        kind = "momentum" if momentum > 0 else "sgd"
        if momentum > 0:
            fields |= {"momentum": momentum, "dampening": _number("dampening",
                                                                  first["dampening"]),
                       "nesterov": bool(first["nesterov"])}
    else:
        kind = "adamw" if cls is torch.optim.AdamW or first.get("decoupled_weight_decay") \
            else "adam"
        fields["beta1"], fields["beta2"] = _betas(first["betas"])
        fields |= {"epsilon": _number("eps", first["eps"]), "amsgrad": bool(first["amsgrad"])}
    if cycle and kind != "sgd":  # momentum 0 cycled: torch's SGD reads no momentum then
        fields["cycle_momentum"] = True
    fields["groups"] = tuple(
        ParamGroup(params="^(" + "|".join(re.escape(n) for n in names[k]) + ")$",
                   lr=_number(f"param_groups[{k}] lr", group["lr"]),
                   weight_decay=_number(f"param_groups[{k}] weight_decay",
                                        group["weight_decay"]))
        for k, group in enumerate(groups) if k)
    return _record(Optimizer, kind, fields)


def cycles_momentum(optimizer: Any) -> bool:
    """Whether a scheduler on `optimizer` cycles momentum or betas[0] (OneCycleLR's and
    CyclicLR's cycle_momentum: they leave `max_momentum` and `base_momentum` in each group;
    equal ones cycle nothing)."""
    return any(_value(g.get("max_momentum")) != _value(g.get("base_momentum"))
               for g in optimizer.param_groups)


def compiled(optimizer: Any, cycle: bool) -> list[dict[str, Any]]:
    """The settings of each param group that the plan compiles in (all but lr and
    weight_decay, and with `cycle` momentum or betas[0]), as they are now."""
    family = "sgd" if "momentum" in optimizer.defaults else "adam"
    out = []
    for g in optimizer.param_groups:
        settings = {key: _value(g.get(key)) for key in _GROUP_KEYS[family]}
        if cycle and family == "sgd":
            settings.pop("momentum")
        elif cycle and isinstance(settings["betas"], tuple) and len(settings["betas"]) == 2:
            settings["betas[1]"] = settings.pop("betas")[1]
        out.append(settings)
    return out


def group_hyperparameters(optimizer: Any, planned: list[dict[str, Any]], cycle: bool
                          ) -> list[dict[str, float]]:
    """Each of a torch.optim instance's param groups' run-time scalars, now: lr and
    weight_decay, and with `cycle` momentum (SGD) or beta1 (Adam): what a scheduler last set
    (read before each step). ValueError in one line where a setting the plan compiled in has
    changed since (`planned`, `compiled` then)."""
    if not cycle and cycles_momentum(optimizer):
        what = "betas[0]" if "betas" in optimizer.param_groups[0] else "momentum"
        raise ValueError(f"optimizer: a scheduler made after the trainer cycles its {what} "
                         f"(cycle_momentum=True, OneCycleLR's and CyclicLR's default), which "
                         f"the plan compiled in; make the scheduler before the trainer (the "
                         f"step then reads it) or pass cycle_momentum=False")
    now = compiled(optimizer, cycle)
    if len(now) != len(planned):
        raise ValueError(f"the optimizer has {len(now)} param groups; the trainer was planned "
                         f"with {len(planned)} (add_param_group needs a new trainer)")
    for k, (was, is_) in enumerate(zip(planned, now, strict=True)):
        for key in was:
            if was[key] != is_[key]:
                raise ValueError(f"optimizer param_groups[{k}] {key} changed from {was[key]!r} "
                                 f"to {is_[key]!r}: the plan compiled it in; only lr, "
                                 f"weight_decay (and momentum or betas[0] where a scheduler "
                                 f"made before the trainer cycles them) change between steps")
    out = []
    for k, g in enumerate(optimizer.param_groups):
        values = {"lr": _number(f"param_groups[{k}] lr", g["lr"]),
                  "weight_decay": _number(f"param_groups[{k}] weight_decay", g["weight_decay"])}
        if cycle and "betas" in g:
            values["beta1"] = _betas(g["betas"])[0]
        elif cycle:
            values["momentum"] = _number(f"param_groups[{k}] momentum", g["momentum"])
        out.append(values)
    return out


def _names(module: Any, groups: list[Mapping[str, Any]], prefix: str,
           what: str) -> list[list[str]]:
    """Each group's parameters as the graph names them; ValueError for a parameter the
    module lacks or one in two groups (one in no group: `outside_groups`, once the graph
    says whether it gets a gradient)."""
    by_id = {}
    for key, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), key)  # a tied weight: its first name, as the export's
    out: list[list[str]] = []
    seen: dict[int, int] = {}
    for k, group in enumerate(groups):
        names = []
        for j, p in enumerate(group["params"]):
            if id(p) not in by_id:
                raise ValueError(f"optimizer {what}: param_groups[{k}] parameter {j} (shape "
                                 f"{list(p.shape)}) is not a parameter of the module; build the "
                                 f"optimizer on the trained module's parameters")
            if id(p) in seen:
                raise ValueError(f"optimizer {what}: parameter {by_id[id(p)]!r} is in "
                                 f"param_groups[{seen[id(p)]}] and [{k}]")
            seen[id(p)] = k
            names.append(prefix + by_id[id(p)])
        out.append(names)
    return out


def outside_groups(optimizer: Any, module: Any, prefix: str, graph: Any) -> None:
    """ValueError in one line for a parameter of `module` that requires grad, is in none of
    the torch.optim instance's groups, and gets a gradient in the training `graph` (the
    planner would train it; torch.optim would not). One that gets none (a teacher called
    under torch.no_grad() only, as PyTorch's distillation tutorial leaves it requires_grad)
    is a constant of the step, as in PyTorch: no update, no optimizer state."""
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    updated = {t.updates for t in graph.tensors if t.updates is not None}
    for key, p in module.named_parameters():
        if p.requires_grad and id(p) not in held and prefix + key in updated:
            raise ValueError(f"optimizer {type(optimizer).__name__}: parameter {key!r} gets a "
                             f"gradient (requires_grad, and the loss depends on it) but is in "
                             f"no param group, so torch.optim would not update it; add it to "
                             f"a group or call {key}.requires_grad_(False)")


def _record(cls: type, kind: str, fields: dict[str, Any]) -> Any:
    """cls(kind=kind, **fields), a ValidationError as one line naming the setting."""
    try:
        return cls(kind=kind, **fields)
    except ValidationError as e:
        first = e.errors()[0]
        name = {"beta1": "betas[0]", "beta2": "betas[1]", "epsilon": "eps"}.get(
            str(first["loc"][0]) if first["loc"] else "", ".".join(map(str, first["loc"])))
        msg = first["msg"].removeprefix("Value error, ")
        where = f"optimizer setting {name}" if name else f"optimizer {kind}"
        shown = f" = {first['input']!r}" if name and "input" in first else ""
        raise ValueError(f"{where}{shown}: {msg[:1].lower()}{msg[1:]}") from None


def _number(what: str, value: Any) -> float:
    """A hyperparameter as a finite float (a 0-d tensor's value); ValueError naming it."""
    try:
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        raise ValueError(f"optimizer setting {what}: expected a number, got {value!r}") from None
    if isinstance(value, (bool, str)) or not math.isfinite(number):
        raise ValueError(f"optimizer setting {what}: expected a finite number, got {value!r}")
    return number


def _betas(value: Any) -> tuple[float, float]:
    try:
        b1, b2 = value
    except (TypeError, ValueError):
        raise ValueError(f"optimizer setting betas: expected (beta1, beta2), got "
                         f"{value!r}") from None
    return _number("betas[0]", b1), _number("betas[1]", b2)


def _value(v: Any) -> Any:
    """A group's setting comparable across groups (tensors and tuples by value)."""
    if isinstance(v, (tuple, list)):
        return tuple(_value(x) for x in v)
    return v.item() if hasattr(v, "item") else v
