"""The whole state of a training run as PyTorch names it, from and into an executor:

    ckpt = ex.state_dict()      # {"model": .., "optimizer": {"state": .., "param_groups": ..},
                                #  "planner": ..}
    ex.load_state_dict(ckpt)    # every tensor checked, then all written

`model` holds the parameters and buffers (BatchNorm running statistics) by graph name (a
planner.torch executor's are its module's state_dict keys behind "model."); `optimizer` is
laid out as torch.optim's `state_dict()`: `param_groups` with each group's `lr`,
`weight_decay`, the indices of its parameters and their names (`param_names`, as torch.optim
gives them for an optimizer of `named_parameters()`: a sharded plan's checkpoint keys the
state by name, and each loads the other's, planner/runtime/checkpoint_names.py), `state` per
index with `momentum_buffer` (momentum) or `step`, `exp_avg`, `exp_avg_sq` (Adam, AdamW);
`planner` holds the rest of what
the executor keeps between steps (the dropout step count, the fp16 loss scale and its
clean-step count), so a run stopped and resumed from it continues bit for bit. A schedule's
position is the step count the caller gives it (planner/runtime/schedules.py), kept beside
this, as a PyTorch scheduler's `state_dict()` is.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from planner.graph.optimizer import (
    HYPERPARAMETERS,
    MOMENTUM_NAMES,
    hyperparameter_tensor,
    parse_hyperparameter_tensor,
)
from planner.ir.accumulation import MICRO_STEP
from planner.ir.graph import Graph
from planner.ops.optim import UPDATE_PARTS
from planner.runtime.checkpoint_names import by_index, by_name
from planner.runtime.hyperparameters import hyperparameter_value
from planner.runtime.sharded_checkpoint import (
    Layout,
    held_shards,
    own_shards,
    sharded_layout,
    whole_state,
)

# PyTorch's names of the update ops' state slots.
TORCH_SLOTS = {"velocity": "momentum_buffer", "m": "exp_avg", "v": "exp_avg_sq",
               "v_max": "max_exp_avg_sq"}


def _layout(graph: Graph) -> tuple[list[str], dict[str, tuple[int, str]], dict[int, list[int]],
                                   str | None]:
    """(updated parameters in graph order, {state tensor: (parameter index, torch slot name)},
    {group: parameter indices}, the step-count tensor or None) of a training graph that
    shards nothing."""
    params: list[str] = []
    slots: dict[str, tuple[int, str]] = {}
    groups: dict[int, list[int]] = {}
    step = None
    for n in graph.nodes:
        if n.op not in UPDATE_PARTS:
            continue
        k = len(params)
        params.append(n.inputs[0])
        held, scalars = UPDATE_PARTS[n.op](n.attrs)
        for j in range(len(held)):
            slot = n.inputs[2 + j].rsplit("/", 1)[-1]
            slots[n.inputs[2 + j]] = (k, TORCH_SLOTS[slot])
        if "step" in scalars:  # it reads this step's count: the held one, incremented
            at = n.inputs[2 + len(held) + scalars.index("step")]
            count = graph.producer.get(at)
            step = count.inputs[0] if count is not None else at
        parsed = parse_hyperparameter_tensor(n.inputs[-2])
        groups.setdefault(parsed[0] if parsed else 0, []).append(k)
    return params, slots, groups, step


def _graph(ex: Any) -> Graph:
    return Graph.model_validate(json.loads(ex.plan)["graph"])


def state_dict(ex: Any) -> dict[str, Any]:
    """The run's state held by executor `ex` (module docstring): copies, by PyTorch's names."""
    graph = _graph(ex)
    layout = sharded_layout(graph, TORCH_SLOTS)
    if layout is not None:
        return _sharded_state_dict(ex, graph, layout)
    held = ex.params()
    params, slots, groups, step = _layout(graph)
    hyper = ex.hyperparameters()
    state: dict[int, dict[str, Any]] = {}
    model, planner = {}, {}
    for name, value in held.items():
        if name in slots:
            k, slot = slots[name]
            state.setdefault(k, {})[slot] = value
        elif parse_hyperparameter_tensor(name) is not None:
            continue  # in param_groups
        elif name == step:
            for k in range(len(params)):
                state.setdefault(k, {})["step"] = value.copy()
        elif _in_model(graph, name):
            model[name] = value
        else:
            planner[name] = value
    param_groups = [{**hyper.get(g, {}), "params": groups[g],
                     "param_names": [params[k] for k in groups[g]]} for g in sorted(groups)]
    return {"model": model,
            "optimizer": {"state": dict(sorted(state.items())), "param_groups": param_groups},
            "planner": planner}


def _sharded_state_dict(ex: Any, graph: Graph, layout: Layout) -> dict[str, Any]:
    """A sharded plan's whole state, gathered from every rank (planner.runtime.
    sharded_checkpoint): optimizer state and parameter groups by parameter name."""
    held = ex.params()
    params, slots = whole_state(ex, layout, held)
    shards = held_shards(layout)
    model: dict[str, Any] = dict(params)
    planner: dict[str, Any] = {}
    for name, value in held.items():
        if (name in shards or name in params or name == layout.step
                or parse_hyperparameter_tensor(name) is not None):
            continue
        (model if _in_model(graph, name) else planner)[name] = value
    step = {"step": held[layout.step].copy()} if layout.step is not None else {}
    state = {p: {**step, **slots[p]} for b in layout.buckets for p in b.params if p in slots}
    hyper = ex.hyperparameters()
    groups = _sharded_groups(layout)
    return {"model": model,
            "optimizer": {"state": state, "param_groups": [
                {**hyper.get(g, {}), "params": groups[g]} for g in sorted(groups)]},
            "planner": planner}


def _sharded_groups(layout: Layout) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = {}
    for b in layout.buckets:
        groups.setdefault(b.group, []).extend(b.params)
    return groups


def _in_model(graph: Graph, name: str) -> bool:
    """Whether held tensor `name` is the module's (a parameter or buffer), not the planner's."""
    t = graph.tensor(name)
    return t.role == "param" or (t.role == "state" and not name.startswith(("rng/", "optim/")))


def load_state_dict(ex: Any, checkpoint: dict[str, Any]) -> None:
    """Load a `state_dict` into executor `ex` (a fresh one or the same): ValueError naming
    what is missing or does not fit, before anything is written."""
    graph = _graph(ex)
    try:
        model, optimizer = checkpoint["model"], checkpoint["optimizer"]
        planner, state = checkpoint.get("planner", {}), optimizer["state"]
        param_groups = optimizer["param_groups"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"load_state_dict: the checkpoint lacks {e}; expected model, "
                         f"optimizer (state, param_groups) and planner") from None
    if not all(isinstance(part, dict) for part in (model, planner, state)) \
            or not isinstance(param_groups, list):
        raise ValueError("load_state_dict: model, planner and optimizer state must be dicts "
                         "and optimizer param_groups a list")
    layout = sharded_layout(graph, TORCH_SLOTS)
    if layout is not None:
        _load_sharded(ex, graph, layout, model, planner, state, param_groups)
        return
    params, slots, groups, step = _layout(graph)
    # A sharded plan's checkpoint keys the optimizer state by name (checkpoint_names).
    state, param_groups = by_index(state, param_groups, params)
    _check_complete(ex, graph, model, planner, slots, step)
    flat = {**model, **planner}
    by_slot = {v: k for k, v in slots.items()}
    for (k, slot), name in by_slot.items():
        try:
            flat[name] = state[k][slot]
        except (KeyError, TypeError):
            raise ValueError(f"load_state_dict: optimizer state of parameter {k} "
                             f"({params[k]!r}) lacks {slot!r}") from None
    if step is not None:
        try:
            flat[step] = np.asarray(state[0]["step"], np.float32)
        except (KeyError, TypeError):
            raise ValueError("load_state_dict: optimizer state 0 lacks 'step'") from None
    _load_groups(param_groups, groups, flat, held=set(ex.param_names))
    if MICRO_STEP in flat:
        _check_micro_step(flat[MICRO_STEP])
    ex.load_params(flat)


def _load_groups(param_groups: list, groups: dict[int, list], flat: dict[str, Any],
                 by_name: bool = False, held: Any = ()) -> None:
    """Each parameter group's hyperparameters into `flat`, after checking that the
    checkpoint's groups hold the plan's parameters (`groups`: per group, its parameters'
    indices; `by_name`: their names, in any order, as a sharded plan's)."""
    if len(param_groups) != len(groups):
        raise ValueError(f"load_state_dict: {len(param_groups)} parameter group(s), the plan "
                         f"has {len(groups)}")
    for g, group in zip(sorted(groups), param_groups, strict=True):
        if not isinstance(group, dict):
            raise ValueError(f"load_state_dict: parameter group {g} is not a dict")
        for name in HYPERPARAMETERS:
            if name not in group:
                raise ValueError(f"load_state_dict: parameter group {g} lacks {name!r}")
            value = hyperparameter_value(group[name], f"load_state_dict: parameter group {g} "
                                                      f"{name}")
            flat[hyperparameter_tensor(g, name)] = np.asarray(value, np.float32)
        for name in MOMENTUM_NAMES.values():  # a plan with cycle_momentum reads it too
            if name in group and hyperparameter_tensor(g, name) in held:
                value = hyperparameter_value(group[name], f"load_state_dict: parameter group "
                                                          f"{g} {name}")
                flat[hyperparameter_tensor(g, name)] = np.asarray(value, np.float32)
        got = list(group.get("params", ()))
        if (sorted(map(str, got)) != sorted(groups[g]) if by_name else got != groups[g]):
            raise ValueError(f"load_state_dict: parameter group {g} holds parameters "
                             f"{group.get('params')!r}, the plan's group {g} holds {groups[g]}")


def _check_complete(ex: Any, graph: Graph, model: dict, planner: dict,
                    slots: dict[str, tuple[int, str]], step: str | None) -> None:
    """ValueError naming the first tensor the executor holds that the checkpoint's model or
    planner part lacks (docs/training.md: a missing parameter is never kept silently)."""
    for name in sorted(ex.param_names):
        if name in slots or name == step or parse_hyperparameter_tensor(name) is not None:
            continue  # from the optimizer part
        part, where = (model, "model") if _in_model(graph, name) else (planner, "planner")
        if name not in part:
            raise ValueError(f"load_state_dict: the checkpoint's {where} part lacks {name!r}")


def _load_sharded(ex: Any, graph: Graph, layout: Layout, model: dict, planner: dict,
                  state: dict, param_groups: list) -> None:
    """A whole state (any rank's state_dict of this model) into a sharded plan's executor:
    this rank's shards cut from it; ValueError naming what is missing or does not fit."""
    # One that shards nothing keys the optimizer state by index (checkpoint_names).
    state, param_groups = by_name(state, param_groups)
    flat = own_shards(ex, layout, model, state)
    sharded = {p for b in layout.buckets for p in b.params}
    if layout.step is not None:
        first = layout.buckets[0].params[0]
        try:
            flat[layout.step] = np.asarray(state[first]["step"], np.float32)
        except (KeyError, TypeError):
            raise ValueError(f"load_state_dict: optimizer state of parameter {first!r} lacks "
                             f"'step'") from None
    _load_groups(param_groups, _sharded_groups(layout), flat, by_name=True,
                 held=set(ex.param_names))
    shards = held_shards(layout)
    held = set(ex.param_names)
    for name in sorted(held):
        if name in flat or name in shards or parse_hyperparameter_tensor(name) is not None:
            continue
        part, where = (model, "model") if _in_model(graph, name) else (planner, "planner")
        if name not in part:
            raise ValueError(f"load_state_dict: the checkpoint's {where} part lacks {name!r}")
        flat[name] = part[name]
    for name in (*model, *planner):
        if name not in flat and name not in sharded:
            raise ValueError(f"load_state_dict: {name!r} is not a parameter or state tensor of "
                             f"this plan")
    if MICRO_STEP in flat:
        _check_micro_step(flat[MICRO_STEP])
    ex.load_params(flat)


# The micro-batches a run may have taken: the int64 count grows by one a step, and one near
# 2^63 would wrap negative within a run (its micro-batch index, count % K, negative: no update
# would run again).
MAX_MICRO_STEP = 2**62


def _check_micro_step(value: Any) -> None:
    """ValueError unless the micro-batch count is a whole number from 0 to MAX_MICRO_STEP."""
    try:
        count = np.asarray(value)
        ok = count.shape == () and count.dtype.kind in "iu" and 0 <= int(count) <= MAX_MICRO_STEP
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"load_state_dict: {MICRO_STEP} must be a whole number from 0 to 2^62 "
                         f"(the micro-batches taken), got {value!r}")
