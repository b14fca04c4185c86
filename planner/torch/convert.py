"""An ExportedProgram (torch.export) to a planner Graph: the driver of the ATen rules.

    convert(program) -> TorchImport(graph, consts, inputs, counters)

1. `run_decompositions` to core ATen, keeping the ops the planner has as one op
   (PRESERVED: F.linear, F.cross_entropy, F.mse_loss, dropout, scaled_dot_product_attention,
   PReLU and Softplus, whose decompositions compare, which no planner op does, reflect and
   replicate padding, which decompose to gathers (the planner's Pad has those modes), and
   torch.roll, which decomposes to gathers too (it becomes two Slices and a Concat),
   so a linear layer is one GEMM with its weight transposed in place and the loss is the
   planner's loss op, whose gradient make_training_graph knows.
2. The graph signature names every placeholder: a PARAMETER becomes a param tensor under its
   state_dict name, a BUFFER a state tensor (BatchNorm's running statistics), a lifted constant
   a state tensor holding its value, a USER_INPUT an input.
3. Every call_function node goes through its rule (rules.py), or, when it reads only
   constants (a mask built in forward by arange, tril, comparisons), torch evaluates it now
   and the result is a constant; the planner's shape for each result is checked against the
   node's own FakeTensor shape.
4. Outputs: USER_OUTPUTs are the graph's outputs; the first, when it is a float scalar no
   loss op writes (a loss of several terms traced with the model), is marked as the graph's
   loss. A BUFFER_MUTATION must be what the planner
   updates itself (the new running statistics of a training BatchNorm reading that buffer), or
   an integer counter incremented by a constant (`num_batches_tracked += 1`), which the graph
   leaves out and `counters` reports, for the trainer to count steps into. Anything else is
   refused.

Names from the program (node names, state_dict keys) are data: they name tensors and nodes,
never code; the graph's validation refuses control characters in them.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import planner.torch.rules  # noqa: F401  (registering the rules)
import planner.torch.rules_scalar  # noqa: F401
from planner.graph.ir import Graph
from planner.graph.validate import check_graph
from planner.importers.onnx.context import Importer
from planner.importers.onnx.errors import Unsupported
from planner.importers.onnx.fold import FOLD_OUTPUT_LIMIT
from planner.importers.onnx.values import Const
from planner.torch.context import RULES, UNAVAILABLE, NodeCtx, TorchImportError, _in
from planner.torch.origin import location, module_path  # noqa: F401  (module_path: re-exported)

PRESERVED = ("linear.default", "cross_entropy_loss.default", "mse_loss.default",
             "dropout.default", "scaled_dot_product_attention.default", "prelu.default",
             "softplus.default", "reflection_pad1d.default", "reflection_pad2d.default",
             "replication_pad1d.default", "replication_pad2d.default", "roll.default")


@dataclass(frozen=True)
class TorchImport:
    """An imported program: its forward graph, the value behind each param and state tensor,
    the graph's input tensors in the program's argument order, and the integer buffers the
    program increments by a constant each call (state_dict name -> increment)."""

    graph: Graph
    consts: Mapping[str, Const]
    inputs: tuple[str, ...]
    counters: Mapping[str, int] = field(default_factory=dict)

    def params(self) -> dict[str, np.ndarray]:
        """Every param and state tensor's value, by name (state_dict names for the module's)."""
        return {t.name: self.consts[t.name].value().astype(t.dtype, copy=False)
                for t in self.graph.by_role("param", "state")}


def decompose(program: Any) -> Any:
    """The program in core ATen, with PRESERVED ops kept whole."""
    import torch

    table = torch.export.default_decompositions()
    for name in PRESERVED:
        op, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, op), overload), None)
    return program.run_decompositions(table)


def convert(program: Any, name: str = "torch", module_root: str = "") -> TorchImport:
    """Import an ExportedProgram (see the module docstring). Raises TorchImportError, naming
    the node, its ATen op and its module path (from the node's nn_module_stack), less
    `module_root`: the path of the user's module inside the exported one (the trainer's
    wrapper holds it as `model`)."""
    try:
        program = decompose(program)
    except Exception as e:  # a program torch itself cannot decompose
        raise TorchImportError(f"cannot decompose the program: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
    from torch.export.graph_signature import InputKind

    sig = program.graph_signature
    gm = program.graph_module
    nodes = list(gm.graph.nodes)
    specs = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
    buffers = {s.target for s in sig.input_specs if s.kind == InputKind.BUFFER}
    reserved = {n.name for n in nodes} | {s.target for s in sig.input_specs if s.target}
    imp = Importer(graph_name=name, opset=0, reserved=reserved, state_names=set(buffers),
                   init_hints={}, used=set())
    env: dict[str, Any] = {}
    inputs: list[str] = []
    state = program.state_dict
    constants = getattr(program, "constants", {}) or {}
    for node in nodes:
        if node.op != "placeholder":
            continue
        spec = specs.get(node.name)
        kind = spec.kind if spec is not None else None
        if kind == InputKind.USER_INPUT:
            shape, dtype = _meta(node)
            env[node.name] = imp.builder.input(node.name, shape, dtype)
            inputs.append(node.name)
        elif kind in (InputKind.PARAMETER, InputKind.BUFFER):
            source = state if spec.target in state else constants
            env[node.name] = _const(spec.target, source, "initializer")
        elif kind in (InputKind.CONSTANT_TENSOR,):
            env[node.name] = _const(spec.target, constants, "constant")
        else:
            raise TorchImportError(f"input {node.name!r}: unsupported kind "
                                   f"{getattr(kind, 'name', kind)}")
    counters = _counters(program, nodes)
    _convert_nodes(imp, nodes, env, skip=set(counters.values()), root=module_root)
    graph_outputs = _outputs(program, nodes, env, imp, counters)
    graph = check_graph(imp.builder.build(outputs=graph_outputs,
                                          loss=_traced_loss(imp, graph_outputs)))
    return TorchImport(graph, {t.name: imp.consts[t.name] for t in graph.tensors
                               if t.name in imp.consts}, tuple(inputs),
                       {buf: 1 for buf in counters})


def _meta(node: Any) -> tuple[tuple[int, ...], str]:
    val = node.meta.get("val")
    if val is None or not hasattr(val, "shape"):
        raise TorchImportError(f"node {node.name!r}: no tensor metadata")
    try:
        shape = tuple(int(d) for d in val.shape)
    except TypeError:
        raise TorchImportError(f"node {node.name!r}: symbolic shape {list(val.shape)}; export "
                               f"with static shapes") from None
    return shape, str(val.dtype).removeprefix("torch.")


def _const(target: str, source: Mapping[str, Any], origin: str) -> Const:
    if target not in source:
        raise TorchImportError(f"tensor {target!r}: not in the program's state")
    t = source[target]
    if not hasattr(t, "shape"):
        raise TorchImportError(f"tensor {target!r}: not a tensor")
    dtype = str(t.dtype).removeprefix("torch.")
    return Const(target, tuple(int(d) for d in t.shape), dtype, origin,  # type: ignore[arg-type]
                 lambda: t.detach().cpu().contiguous().numpy())


def _counters(program: Any, nodes: list) -> dict[str, str]:
    """Integer buffers mutated as `buffer + constant` (BatchNorm's num_batches_tracked): buffer
    name -> the fx node computing the new value, which the graph leaves out."""
    from torch.export.graph_signature import OutputKind

    placeholders = {s.arg.name: s.target for s in program.graph_signature.input_specs
                    if hasattr(s.arg, "name")}
    by_name = {n.name: n for n in nodes}
    out: dict[str, str] = {}
    for spec in program.graph_signature.output_specs:
        if spec.kind != OutputKind.BUFFER_MUTATION:
            continue
        node = by_name.get(spec.arg.name)
        if (node is not None and str(node.target) == "aten.add.Tensor" and len(node.args) >= 2
                and getattr(node.args[0], "op", None) == "placeholder"
                and placeholders.get(node.args[0].name) == spec.target
                and node.args[1] == 1 and len(node.users) == 1
                and str(node.meta["val"].dtype) in ("torch.int64", "torch.int32")):
            out[spec.target] = node.name
    return out


def _convert_nodes(imp: Importer, nodes: list, env: dict[str, Any], skip: set[str],
                   root: str = "") -> None:
    """Convert every call_function node; collect every unsupported op, then raise once."""
    import torch.fx

    unsupported: dict[str, str] = {}
    modules: dict[str, str] = {}
    first_error: TorchImportError | None = None
    dropouts = [0]
    poisoned: set[str] = set()
    for node in nodes:
        if node.op != "call_function" or node.name in skip:
            continue
        op = "getitem" if node.target is operator.getitem else str(node.target)
        reads = [a.name for a in node.all_input_nodes]
        if any(r in poisoned for r in reads):
            poisoned.add(node.name)
            continue
        try:
            if node.target is operator.getitem:
                value = env[node.args[0].name][node.args[1]]
            elif _foldable(node, env):
                value = _fold(imp, node, env)
            else:
                if op not in RULES:
                    raise Unsupported(op)
                args = torch.fx.node.map_arg(node.args, lambda a: env[a.name])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: env[a.name])
                shape, dtype = _meta(node) if hasattr(node.meta.get("val"), "shape") else \
                    (None, None)
                ctx = NodeCtx(imp, node.name, op, args, dict(kwargs), shape, dropouts, dtype,
                              node, location(node, root))
                value = RULES[op](ctx)
            _check(imp, node, value)
            env[node.name] = value
        except Unsupported as e:
            if e.what not in unsupported:
                unsupported[e.what], modules[e.what] = node.name, location(node, root)
            poisoned.add(node.name)
        except TorchImportError as e:
            first_error = first_error or e
            poisoned.add(node.name)
        except Exception as e:  # a corrupt program: still one line naming the node
            first_error = first_error or TorchImportError(
                f"node {node.name!r}{_in(location(node, root))} ({op}): cannot convert: "
                f"{type(e).__name__}: {e}")
            poisoned.add(node.name)
    if unsupported:
        raise TorchImportError.unsupported_ops(unsupported, modules)
    if first_error is not None:
        raise first_error


def _foldable(node: Any, env: Mapping[str, Any]) -> bool:
    """Is the node a computation on constants alone (a causal mask built in forward from
    arange, tril, comparisons), which torch itself evaluates now? Not on float parameters or
    buffers (they stay tensors the planner trains or updates), not a random op, and not an
    output past FOLD_OUTPUT_LIMIT elements."""
    import torch

    reads = [env.get(a.name) for a in node.all_input_nodes]
    if not all(isinstance(v, Const) and v.foldable for v in reads):
        return False
    if not isinstance(node.target, torch._ops.OpOverload) or \
            torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    return all(hasattr(v, "numel") for v in vals) and \
        sum(v.numel() for v in vals) <= FOLD_OUTPUT_LIMIT


def _fold(imp: Importer, node: Any, env: Mapping[str, Any]) -> Const | tuple[Const, ...]:
    import torch
    import torch.fx

    def tensor(a: Any) -> Any:
        # np.array, not np.ascontiguousarray, which makes a 0-d value 1-d
        return torch.from_numpy(np.array(env[a.name].value(), order="C"))

    def const(t: Any) -> Const:
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"{node.target} (of constants, giving {type(t).__name__})")
        return Const.of(imp.fresh(node.name), t.detach().cpu().numpy(), origin="constant")

    args = torch.fx.node.map_arg(node.args, tensor)
    kwargs = torch.fx.node.map_arg(node.kwargs, tensor)
    with torch.no_grad():
        out = node.target(*args, **kwargs)
    return tuple(const(t) for t in out) if isinstance(out, (tuple, list)) else const(out)


def _check(imp: Importer, node: Any, value: Any) -> None:
    """The planner's shape for a tensor result is the one torch traced."""
    if isinstance(value, (str, Const)) and hasattr(node.meta.get("val"), "shape"):
        want, _ = _meta(node)
        got = imp.type_of(value, node.name).shape
        if got != want:
            raise TorchImportError(f"node {node.name!r} ({node.target}): planner shape "
                                   f"{list(got)}, torch's {list(want)}")


def _outputs(program: Any, nodes: list, env: dict[str, Any], imp: Importer,
             counters: Mapping[str, str]) -> list[str]:
    from torch.export.graph_signature import OutputKind

    placeholders = {s.target: s.arg.name for s in program.graph_signature.input_specs
                    if hasattr(s.arg, "name")}
    outputs: list[str] = []
    for spec in program.graph_signature.output_specs:
        arg = getattr(spec.arg, "name", None)
        if spec.kind == OutputKind.USER_OUTPUT:
            value = env.get(arg) if arg else None
            if not isinstance(value, (str, Const)):
                raise TorchImportError(f"output {arg!r}: not a tensor the planner computes")
            outputs.append(imp.as_tensor(value))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            if spec.target in counters:
                continue
            if not _planner_updates(imp, env.get(arg), env.get(placeholders.get(spec.target))):
                raise TorchImportError(f"buffer {spec.target!r}: mutated by node {arg!r}, "
                                       f"which the planner does not update in place")
        else:
            raise TorchImportError(f"output {arg!r}: unsupported kind {spec.kind.name}")
    return list(dict.fromkeys(outputs))


def _traced_loss(imp: Importer, outputs: list[str]) -> str | None:
    """The first output, when it is a float scalar no loss op writes (a loss of several terms,
    `F.mse_loss(o, y) + beta * kl`, traced with the model, or a module returning its own loss
    first): marked as the graph's loss (Graph.loss), which autodiff seeds."""
    from planner.graph.autodiff import LOSS_OPS

    if not outputs:
        return None
    first = imp.builder.type(outputs[0])
    node = imp.builder.producer(outputs[0])
    if first.shape != () or not first.dtype.startswith(("float", "bfloat")) or \
            (node is not None and node.op in LOSS_OPS):
        return None
    return outputs[0]


def _planner_updates(imp: Importer, new: Any, old: Any) -> bool:
    """Is `new` the planner's own next value of buffer `old` (a training BatchNorm's running
    statistic output 1 or 2 reading it as input 3 or 4), or `old` itself (no change)?"""
    if new is old and new is not None and new is not UNAVAILABLE:
        return True
    if not isinstance(new, str) or not isinstance(old, Const):
        return False
    node = imp.builder.producer(new)
    if node is None or node.op != "BatchNorm" or not node.attrs.get("training"):
        return False
    k = node.outputs.index(new)
    return k in (1, 2) and node.inputs[k + 2] == old.name
