"""ATen's `_foreach_*` ops (one op over lists of tensors) as the per-tensor op each stands for.

torch.optim's multi-tensor updates (`foreach=True`: Adam's `_foreach_lerp_`,
`_foreach_addcdiv_`, SGD's `_foreach_add_`) reach a graph as `aten._foreach_<op>.<overload>`
after functionalization. Each is its op applied to the i-th element of every list argument
(`Tensor[]`, `Scalar[]`) with the other arguments as they are, which is how the planner imports
it: one node per tensor, as the single-tensor update would give (the kernels are the same;
torch's foreach kernels only launch fewer of them). An overload whose op has no per-tensor form
in torch (none today) is left to the importer, which names it.
"""

from __future__ import annotations

from typing import Any

PREFIX = "_foreach_"


def per_tensor(op: Any, base: str) -> Any:
    """The decomposition of one `_foreach_` overload `op` into calls of `torch.ops.aten.<base>`
    (its overload chosen by the arguments, as a call of torch's op by name would)."""
    import torch

    schema = op._schema
    target = getattr(torch.ops.aten, base)
    listed = {a.name: str(a.type).startswith("List[") for a in schema.arguments}

    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    takes, keyword_only = _arguments(target)

    def decomposed(*args: Any, **kwargs: Any) -> Any:
        values = dict(zip(positional, args, strict=False)) | kwargs
        lengths = {len(v) for n, v in values.items() if listed[n]}
        if len(lengths) != 1:
            raise ValueError(f"{schema.name}: lists of different lengths {sorted(lengths)}")
        # What the per-tensor op takes by keyword only is given by keyword (addcdiv's value,
        # the last positional argument of _foreach_addcdiv).
        given = [n for n in positional if n in values and n not in kwargs]
        extra = dict(zip(keyword_only, given[takes:], strict=False))
        out = []
        for i in range(lengths.pop()):
            pick = {n: (v[i] if listed[n] else v) for n, v in values.items()}
            out.append(target(*(pick[n] for n in given[:takes]),
                              **{k: pick[n] for k, n in extra.items()},
                              **{n: pick[n] for n in kwargs}))
        return out

    return decomposed


def _arguments(target: Any) -> tuple[int, list[str]]:
    """How many arguments torch's per-tensor op takes by position (at most, over its
    overloads but `out`), and the keyword-only ones after them (of the first that has any)."""
    schemas = [getattr(target, o)._schema for o in target.overloads() if "out" not in o]
    takes = max((sum(not a.kwarg_only for a in s.arguments) for s in schemas), default=0)
    keyword_only = next(([a.name for a in s.arguments if a.kwarg_only] for s in schemas
                         if any(a.kwarg_only for a in s.arguments)), [])
    return takes, keyword_only


def decompositions() -> dict[Any, Any]:
    """Every out-of-place `_foreach_` overload torch has whose op exists per tensor."""
    import torch

    table: dict[Any, Any] = {}
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name.removeprefix("aten::")
        if not name.startswith(PREFIX) or name.endswith("_") or "out" in schema.overload_name:
            continue
        base = name.removeprefix(PREFIX)
        if not hasattr(torch.ops.aten, base):
            continue
        packet = getattr(torch.ops.aten, name)
        op = getattr(packet, schema.overload_name or "default")
        table[op] = per_tensor(op, base)
    return table
