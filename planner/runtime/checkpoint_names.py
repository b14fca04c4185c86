"""One checkpoint for every world size: optimizer state keyed by index or by parameter name.

A plan that shards nothing (one process, plain data parallel) lays its optimizer state out as
torch.optim's `state_dict()` does, by parameter index, and names each group's parameters in
`param_names` beside their indices (as torch.optim does for an optimizer built from
`named_parameters()`); a sharded plan (ZeRO-1, ZeRO-3) keys the state and the groups'
`params` by name, as `torch.distributed.checkpoint` gives an FSDP model's (its buckets reorder
the parameters, so an index would name another one). Each loader takes both: `by_index`
turns a name-keyed checkpoint into indices of the plan's parameters, `by_name` an
index-keyed one into names through its `param_names`. So a checkpoint of any world size loads
into any other of the same model and optimizer.

Example (a sharded checkpoint's state, as a one-process plan of parameters a, b reads it):
    >>> state, groups = by_index({"b": {"step": 1}, "a": {"step": 1}},
    ...                          [{"lr": 0.1, "params": ["b", "a"]}], ["a", "b"])
    >>> sorted(state), groups[0]["params"]
    ([0, 1], [0, 1])
    >>> by_name(state, [{**groups[0], "param_names": ["a", "b"]}])[0]
    {'a': {'step': 1}, 'b': {'step': 1}}
"""

from __future__ import annotations

from typing import Any


def _named(state: dict, param_groups: list) -> bool:
    """Whether the checkpoint keys its optimizer state and groups by parameter name."""
    keys = [*state, *(p for g in param_groups if isinstance(g, dict)
                      for p in g.get("params", ()))]
    return any(isinstance(k, str) for k in keys)


def by_index(state: dict, param_groups: list, params: list[str]) -> tuple[dict, list]:
    """(state, param_groups) keyed by the indices of `params` (the plan's parameters in its
    order): a name-keyed checkpoint's mapped, its groups' parameters in ascending order; an
    index-keyed one's as they are (its indices are checked against the plan's groups, its
    tensors' shapes against the plan's, where they are loaded). ValueError naming a
    parameter this plan lacks."""
    index = {p: k for k, p in enumerate(params)}
    if not _named(state, param_groups):
        return state, param_groups

    def one(name: Any, where: str) -> int:
        if not isinstance(name, str) or name not in index:
            raise ValueError(f"load_state_dict: {where} names {name!r}, not a parameter this "
                             f"plan updates")
        return index[name]

    mapped = dict(sorted((one(name, "the optimizer state"), v) for name, v in state.items()))
    groups = [{**group, "params": sorted(one(p, f"parameter group {g}")
                                         for p in group.get("params", ()))}
              if isinstance(group, dict) else group for g, group in enumerate(param_groups)]
    return mapped, groups


def by_name(state: dict, param_groups: list) -> tuple[dict, list]:
    """(state, param_groups) keyed by parameter name: a name-keyed checkpoint's as they are;
    an index-keyed one's through its groups' `param_names`. ValueError where an index-keyed
    checkpoint names none (one saved before checkpoints named them)."""
    if _named(state, param_groups) or not (state or any(
            isinstance(g, dict) and g.get("params") for g in param_groups)):
        return state, param_groups
    names: dict[Any, str] = {}
    groups = []
    for g, group in enumerate(param_groups):
        ids = list(group.get("params", ())) if isinstance(group, dict) else []
        given = group.get("param_names") if isinstance(group, dict) else None
        if not isinstance(given, list | tuple) or len(given) != len(ids) or not all(
                isinstance(n, str) for n in given):
            raise ValueError(f"load_state_dict: parameter group {g} gives its parameters by "
                             f"index without their param_names; a sharded plan needs the "
                             f"names (save the checkpoint again with this planner)")
        names.update(zip(ids, given, strict=True))
        groups.append({k: v for k, v in group.items() if k != "param_names"}
                      | {"params": list(given)})
    missing = [k for k in state if k not in names]
    if missing:
        raise ValueError(f"load_state_dict: optimizer state {missing[0]!r} is of no "
                         f"parameter in param_groups")
    return {names[k]: v for k, v in state.items()}, groups
