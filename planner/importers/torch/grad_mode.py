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

A region that turns gradients back on inside (`torch.enable_grad()` within no_grad) returns
values that do carry a gradient in PyTorch: refused, naming the region's first node.
(`torch.inference_mode()` is not recorded by torch.export at all: the trainer traces it as
no_grad, planner/torch/export_watch.py.)
"""

from __future__ import annotations

import operator
from typing import Any

from planner.torch.context import TorchImportError


def _grad_off_region(node: Any) -> bool:
    """Is `node` a wrap_with_set_grad_enabled(False, ...) call?"""
    import torch

    return (node.op == "call_function"
            and node.target is torch.ops.higher_order.wrap_with_set_grad_enabled
            and bool(node.args) and node.args[0] is False)


def _turns_grad_on(program: Any, region: Any) -> bool:
    """Does the region's submodule hold a wrap_with_set_grad_enabled(True, ...) call?"""
    import torch

    sub = getattr(program.graph_module, getattr(region.args[1], "target", ""), None)
    graph = getattr(sub, "graph", None)
    return graph is not None and any(
        n.op == "call_function" and n.target is torch.ops.higher_order.wrap_with_set_grad_enabled
        and n.args and n.args[0] is True for n in graph.nodes)


def detach_grad_off(program: Any) -> int:
    """Insert `aten.detach` after every float result of a grad-off region of `program` (an
    ExportedProgram) that the program reads; returns how many. Outputs of the program keep
    their names (the graph signature names them). TorchImportError for a region that turns
    gradients back on inside."""
    import torch

    graph = program.graph_module.graph
    count = 0
    for region in [n for n in graph.nodes if _grad_off_region(n)]:
        if _turns_grad_on(program, region):
            raise TorchImportError(f"node {region.name!r}: torch.enable_grad() inside a "
                                   f"torch.no_grad() region, whose results then carry a "
                                   f"gradient; compute them outside the no_grad region")
        for node in list(region.users):
            val = node.meta.get("val")
            if (node.target is not operator.getitem or not isinstance(val, torch.Tensor)
                    or not val.is_floating_point()):
                continue
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
