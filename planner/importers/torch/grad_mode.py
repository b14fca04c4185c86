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

A region's result may also be one of its inputs changed in place (`self.mean.lerp_(h.mean(0),
m)`, `self.sq.mul_(m).add_(...)`, `copy_`, `fill_` under no_grad: a running-statistics layer):
a buffer, a frozen parameter or a user input. PyTorch's later reads of it see the new value
with no gradient into what the region computed it from (the layers below `h`), while the
decomposition to core ATen makes the write a value computed from `h` (functionalization): its
readers get the detach too. The write itself (the buffer's new value, an output of the
program) is not detached: no gradient flows through an update. An input written through a
view (`self.sq[1:] = ...`) is not a result of the region: the outer graph reads the input
itself after it, and those reads get the detach. A trained parameter changed in
forward is refused where the program writes it (convert.py); an activation changed in place
under no_grad (`y.clamp_(0, 1)`) keeps PyTorch's gradient of the value before the change,
which the planner's graph, reading the changed value, cannot: refused, naming the node.
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


def _written_inputs(program: Any, region: Any) -> list[Any]:
    """The region's inputs (nodes of the outer graph) its submodule writes in place, directly
    or through a view (`self.sq[1:] = ...`: a copy_ into a slice, which the region need not
    return: the outer graph reads the input itself after it)."""
    sub = getattr(program.graph_module, getattr(region.args[1], "target", ""), None)
    graph = getattr(sub, "graph", None)
    if graph is None:
        return []
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    written: list[Any] = []
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or not getattr(schema, "is_mutable", False):
            continue
        # the arguments the op writes (`self` of `lerp_`; a train-mode batch norm's running
        # statistics, not its input)
        for arg, base in zip(schema.arguments, node.args, strict=False):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            while getattr(base, "op", "") == "call_function" and base.args and _aliases(base):
                base = base.args[0]
            if base in placeholders:
                source = region.args[2 + placeholders.index(base)]
                if source not in written:
                    written.append(source)
    return written


def _aliases(node: Any) -> bool:
    """Does the op's result alias its first input (a view, or an in-place op's result)?"""
    schema = getattr(node.target, "_schema", None)
    returns = getattr(schema, "returns", ())
    return bool(returns) and returns[0].alias_info is not None


def _refused(source: Any) -> TorchImportError:
    return TorchImportError(
        f"node {source.name!r}: changed in place under torch.no_grad(), where PyTorch keeps "
        f"the gradient of its value before the change; compute the changed value out of "
        f"place (y = y.clamp(...)) or detach it")


def _detach_later_reads(graph: Any, region: Any, source: Any) -> bool:
    """Readers of `source` after `region` (which wrote it) read a detach of it instead."""
    import torch

    order = {n: k for k, n in enumerate(graph.nodes)}
    readers = [u for u in source.users if u.op != "output" and order[u] > order[region]]
    if not readers:
        return False
    with graph.inserting_after(region):
        detached = graph.call_function(torch.ops.aten.detach.default, (source,))
    detached.meta = {k: v for k, v in source.meta.items() if k != "from_node"}
    for reader in readers:
        reader.replace_input_with(source, detached)
    return True


def detach_grad_off(program: Any) -> int:
    """Insert `aten.detach` after every float result of a grad-off region of `program` (an
    ExportedProgram) that the program reads (the inputs the region changed in place included:
    module docstring); returns how many. Outputs of the program keep their names (the graph
    signature names them). TorchImportError for an activation changed in place under no_grad
    (module docstring)."""
    import torch

    graph = program.graph_module.graph
    count = 0
    for region in [n for n in graph.nodes if _grad_off_region(n)]:
        changed = _changed_inputs(program, region)
        for source in _written_inputs(program, region):
            val = source.meta.get("val")
            if not isinstance(val, torch.Tensor) or not val.is_floating_point():
                continue
            if source.op == "call_function":
                raise _refused(source)
            count += _detach_later_reads(graph, region, source)
        for node in list(region.users):
            val = node.meta.get("val")
            if (node.target is not operator.getitem or not isinstance(val, torch.Tensor)
                    or not val.is_floating_point()):
                continue
            if node.args[1] in changed:
                source = changed[node.args[1]]
                if getattr(source, "op", "") == "call_function":
                    raise _refused(source)
                # a buffer, a frozen parameter or an input, changed: its readers detached
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
