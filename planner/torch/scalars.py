"""A Dynamo graph's runtime Python floats as 0-d float32 tensors: a scheduled learning rate.

Once an `lr_scheduler` has changed a parameter group's lr, Dynamo recompiles the compiled
optimizer step with the lr as an argument (a 0-d float64 tensor) read by `.item()`, so one
graph serves every later lr without a recompile. The `.item()` value (a Python float in
eager) feeds Python arithmetic (`-lr`, `lr / bias_correction1`) and the scalar arguments of
in-place updates (`p.add_(buf, alpha=-lr)`, `addcdiv_(a, b, value=-step_size)`), which
torch.export would trace as a data-dependent scalar the planner cannot read. This pass makes it
a 0-d float32 tensor instead (eager computes with a Python float met by float32 tensors in
float32, so the values are eager's up to the order of roundings), and spells each update
taking it as a scalar argument in tensor ops: `a.add_(b, alpha=s)` as `a.add_(b * s)` (and
`_foreach_add_(a, b, alpha=s)` as `_foreach_add_(a, _foreach_mul(b, s))`),
`a.addcdiv_(b, c, value=s)` as `a.add_(b / c * s)` (two more roundings: float32 noise). The
value then is an input the plan reads at every call: a new lr needs no new plan.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

# Updates whose scalar keyword multiplies one term: method or function -> (the keyword, how the
# term is made of the arguments after the first).
_SCALED = {"add": ("alpha", None), "add_": ("alpha", None), "sub": ("alpha", None),
           "sub_": ("alpha", None), "addcdiv": ("value", operator.truediv),
           "addcdiv_": ("value", operator.truediv), "addcmul": ("value", operator.mul),
           "addcmul_": ("value", operator.mul),
           # foreach=True's: `torch._foreach_add_(params, bufs, alpha=-lr)` (SGD)
           "_foreach_add": ("alpha", None), "_foreach_add_": ("alpha", None),
           "_foreach_sub": ("alpha", None), "_foreach_sub_": ("alpha", None)}


def tensor_scalars(gm: Any) -> Any:
    """A copy of `gm` with every `.item()` of a 0-d float tensor a float32 tensor and the
    updates reading it as a scalar rewritten (module docstring); `gm` itself is untouched."""
    import torch

    graph = copy.deepcopy(gm.graph)
    made: set[Any] = set()
    for n in list(graph.nodes):
        if n.op == "call_method" and n.target == "item" and _float_scalar(n.args[0]):
            with graph.inserting_before(n):
                t = graph.call_method("to", (n.args[0], torch.float32))
            n.replace_all_uses_with(t)
            graph.erase_node(n)
            made.add(t)
        elif made and _reads(n, made):
            made.add(_rewritten(graph, n, made))
    graph.lint()
    return torch.fx.GraphModule(gm, graph)


def _float_scalar(arg: Any) -> bool:
    value = getattr(arg, "meta", {}).get("example_value")
    return value is not None and value.dim() == 0 and value.is_floating_point()


def _reads(n: Any, made: set[Any]) -> bool:
    import torch

    found: list[Any] = []
    torch.fx.node.map_arg((n.args, n.kwargs), found.append)
    return any(a in made for a in found)


def _rewritten(graph: Any, n: Any, made: set[Any]) -> Any:
    """`n`, which reads a tensorized scalar: itself where tensors serve as well (arithmetic,
    tensor ops), or its update without the scalar keyword (module docstring)."""
    import torch

    name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "")
    scaled = _SCALED.get(name) if n.op in ("call_method", "call_function") else None
    if scaled is None or n.kwargs.get(scaled[0]) not in made:
        return n
    key, term = scaled
    scale = n.kwargs[key]
    first, *rest = n.args
    kwargs = {k: v for k, v in n.kwargs.items() if k != key}
    with graph.inserting_before(n):
        part = rest[0] if term is None else graph.call_function(term, (rest[0], rest[1]))
        part = graph.call_function(torch._foreach_mul if name.startswith("_foreach")
                                   else operator.mul, (part, scale))
        plain = name if term is None else "add_" if name.endswith("_") else "add"
        if n.op == "call_method":
            new = graph.call_method(plain, (first, part), kwargs)
        else:
            new = graph.call_function(getattr(torch, plain), (first, part), kwargs)
    n.replace_all_uses_with(new)
    graph.erase_node(n)
    return new


def item_only(gm: Any) -> set[int]:
    """The positions of `gm`'s arguments read only by `.item()`: a runtime float (a scheduled
    lr, 0-d float64), which the plan is fed as float32, the dtype eager computes it in."""
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {k for k, n in enumerate(places)
            if n.users and all(u.op == "call_method" and u.target == "item" for u in n.users)}
