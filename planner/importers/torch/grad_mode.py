"""Where the module turned gradients off, the program gets a `detach`, so the planner
differentiates what PyTorch differentiates and nothing more.

torch.export records a `torch.no_grad()` region, and a `torch.set_grad_enabled(False)` one, as
a call of `torch.ops.higher_order.wrap_with_set_grad_enabled(False, submodule, *inputs)` whose
results `getitem` takes apart: PyTorch's autograd stops at those results (a teacher's logits
under no_grad, a pseudo-label from the same model, a no_grad target network). Each float one
read inside the program gets an `aten.detach` (the importer's StopGradient) before the
decomposition to core ATen (convert.py) inlines the region and the record is lost. The detach
changes no value and no PyTorch gradient (the region's results have none), so the program,
changed in place, computes what it did.

A region's result may also be one of its inputs changed in place (`self.buf.add_(...)`,
`w.mul_(0.5)` under no_grad): a buffer, a frozen parameter or a user input carries no
gradient, and detaching it changes nothing; a trained parameter changed in forward is refused
where the program writes it (convert.py); an activation changed in place under no_grad
(`y.clamp_(0, 1)`) keeps PyTorch's gradient of the value before the change, which the
planner's graph, reading the changed value, cannot: refused, naming the node.
(`torch.enable_grad()` inside no_grad is traced by torch.export as a region of its own, with
gradients on; `torch.inference_mode()` is not recorded by torch.export at all: the trainer
traces it as no_grad, planner/torch/export_watch.py.)
"""

from __future__ import annotations

import operator
from typing import Any

from planner.importers.torch.context import TorchImportError


def _grad_off_region(node: Any) -> bool:
    """Is `node` a wrap_with_set_grad_enabled(False, ...) call?"""
    import torch

    return (node.op == "call_function"
            and node.target is torch.ops.higher_order.wrap_with_set_grad_enabled
            and bool(node.args) and node.args[0] is False)


def _changed_inputs(program: Any, region: Any) -> dict[int, Any]:
    """{result index: the region's input that result is, changed in place}: results the
    region's submodule returns from an in-place op (`aten.mul_`) on one of its inputs."""
    sub = getattr(program.graph_module, getattr(region.args[1], "target", ""), None)
    graph = getattr(sub, "graph", None)
    if graph is None:
        return {}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    out: dict[int, Any] = {}
    returned = next((n for n in graph.nodes if n.op == "output"), None)
    results = returned.args[0] if returned is not None and returned.args else ()
    for k, node in enumerate(results if isinstance(results, (tuple, list)) else ()):
        while (getattr(node, "op", "") == "call_function" and node.args
               and getattr(getattr(node.target, "_schema", None), "is_mutable", False)):
            node = node.args[0]
        if getattr(node, "op", "") == "placeholder" and node in placeholders:
            out[k] = region.args[2 + placeholders.index(node)]
    return out


def detach_grad_off(program: Any) -> int:
    """Insert `aten.detach` after every float result of a grad-off region of `program` (an
    ExportedProgram) that the program reads, but of the inputs the region changed in place;
    returns how many. Outputs of the program keep their names (the graph signature names
    them). TorchImportError for an activation changed in place under no_grad (module
    docstring)."""
    import torch

    graph = program.graph_module.graph
    count = 0
    for region in [n for n in graph.nodes if _grad_off_region(n)]:
        changed = _changed_inputs(program, region)
        for node in list(region.users):
            val = node.meta.get("val")
            if (node.target is not operator.getitem or not isinstance(val, torch.Tensor)
                    or not val.is_floating_point()):
                continue
            if node.args[1] in changed:
                source = changed[node.args[1]]
                if getattr(source, "op", "") == "call_function":
                    raise TorchImportError(
                        f"node {source.name!r}: changed in place under torch.no_grad(), "
                        f"where PyTorch keeps the gradient of its value before the change; "
                        f"compute the changed value out of place (y = y.clamp(...)) or "
                        f"detach it")
                continue  # a buffer, a parameter or an input itself: no detach needed
            readers = [u for u in node.users if u.op != "output"]
            if not readers:
                continue
            with graph.inserting_after(node):
                detached = graph.call_function(torch.ops.aten.detach.default, (node,))
            detached.meta = {k: v for k, v in node.meta.items() if k != "from_node"}
            for reader in readers:
                reader.replace_input_with(node, detached)
            count += 1
    if count:
        program.graph_module.recompile()
    return count
