"""One graph torch.compile's Dynamo hands a backend, imported as a planner Graph.

    piece = import_piece(gm, args, name="planner_0")
    piece.graph          # inputs: the graph's tensor arguments, in their order
    piece.inputs         # per argument: its input tensor (None: not a tensor, or not read)
    piece.outputs        # per output of gm: the tensor behind it
    piece.mutations      # (argument index, tensor of its new value): written back by the caller

Dynamo's graph takes parameters and buffers as arguments beside the user's tensors (modules
inlined), so every tensor is an input of the planner's graph and stays torch's: the optimizer,
`state_dict` and hooks see the module's own tensors, which each call feeds in place. The graph
module is traced by torch.export with every tensor a user input (the non-tensor arguments,
Dynamo's symbolic sizes of the call, fixed), decomposed and converted by the ATen front end
(planner/importers/torch/convert.py); what it writes into an argument (BatchNorm's running
statistics, `num_batches_tracked += 1`) torch.export reports as a USER_INPUT_MUTATION, which
becomes one more output of the planner's graph, copied back into the argument after the call.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from planner.importers.torch.context import TorchImportError
from planner.ir.graph import Graph


@dataclass(frozen=True)
class PieceImport:
    graph: Graph
    consts: dict[str, np.ndarray]  # each state tensor's value (constants of the program)
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]
    mutations: tuple[tuple[int, str], ...]


def import_piece(gm: Any, args: Sequence[Any], name: str, ranged: bool = False) -> PieceImport:
    """Trace `gm` on `args` (torch tensors as they are, other values fixed) and convert it;
    `ranged`: a graph planned as a range from its first call (its sizes declared by
    mark_dynamic's max, or called past every size planned before), traced symbolically from
    that call (_symbolic_record).
    TorchImportError in one line: an op the planner lacks (naming the node, its op and its
    module path), an output that is not a tensor, or torch.export's own failure."""
    import torch

    from planner.importers.torch.convert import convert
    from planner.importers.torch.record import Output

    tensor_at = [k for k, a in enumerate(args) if isinstance(a, torch.Tensor)]
    record = _symbolic_record(gm, args, tensor_at, ranged)
    if record is None:  # (kept per host: a restarted script reads it back, record_cache.py)
        from planner.importers.torch.convert import recorded

        record = recorded(_exported(gm, args, tensor_at), extra=decompositions())
    n_user = sum(1 for o in record.outputs if o.kind == "user_output")
    user_inputs = [i.name for i in record.inputs if i.kind == "user_input"]
    if len(user_inputs) != len(tensor_at):
        raise TorchImportError(f"the traced graph takes {len(user_inputs)} tensors, the call "
                               f"{len(tensor_at)}")
    position = {n: tensor_at[k] for k, n in enumerate(user_inputs)}
    mutated = [position.get(o.target) for o in record.outputs if o.kind == "user_input_mutation"]
    if None in mutated:
        raise TorchImportError("the graph writes into a tensor that is not one of its inputs")
    record = replace(record, outputs=tuple(
        Output("user_output", o.name) if o.kind == "user_input_mutation" else o
        for o in record.outputs))
    _complex_not_trained(args, tensor_at)
    imported = convert(record, name=name, complex_inputs=True)
    returned = imported.outputs
    # A held tensor's new value (buffer_mutation) is the planner's in-place update, no output.
    given = [o for o in record.outputs if o.kind == "user_output"]
    if len(returned) != len(given):
        raise TorchImportError(f"the graph returns {len(given)} values, the planner's "
                               f"{len(returned)}")
    # torch.export lists the inputs' new values first, then the user's outputs.
    n_mut = len(mutated)
    if n_user != len(returned) - n_mut:
        raise TorchImportError("the graph returns a value that is not a tensor")
    inputs: list[str | None] = [None] * len(args)
    present = {t.name for t in imported.graph.tensors}
    for name_, k in position.items():
        inputs[k] = name_ if name_ in present else None
    return PieceImport(imported.graph, imported.params(), tuple(inputs),
                       tuple(returned[n_mut:]),
                       tuple(zip(mutated, returned[:n_mut], strict=True)))  # type: ignore[arg-type]


def decompositions() -> dict[Any, Any]:
    """The backend's decompositions beside torch's (convert.decompose's `extra`): its fast
    paths kept whole (an encoder layer's), prims.fma as a multiply and an add, and each
    `_foreach_` op as its per-tensor ops (a compiled optimizer step's)."""
    from planner.importers.torch import fastpath, fma, foreach

    return {**fastpath.decompositions(), **fma.decompositions(), **foreach.decompositions()}


# Dynamo's graphs of symbolic sizes (its automatic-dynamic recompile: a size argument per
# dynamic dimension), each traced once for every size (planner/importers/torch/specialize.py);
# None: not symbolic, or torch could not trace it so.
_SYMBOLIC: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TRACED_ONCE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _symbolic_record(gm: Any, args: Sequence[Any], tensor_at: Sequence[int],
                     ranged: bool = False) -> Any:
    """The record of `gm` at these arguments' sizes from its one symbolic trace, or None
    where it has none (a graph of static sizes) or it does not hold them (OutsideTrace)."""
    from planner.importers.torch.record import OutsideTrace

    if gm not in _SYMBOLIC:
        # Its first call traced as it is: a symbolic trace costs several (a small CNN's: 14-18
        # s on the 2-core VM, against ~2), and a graph Dynamo made dynamic for one more size
        # (a last, smaller batch) may never see a third. Not so a range (`ranged`): its
        # largest sizes are imported next, from this trace, and many others come.
        if gm not in _TRACED_ONCE and not ranged:
            _TRACED_ONCE[gm] = True
            return None
        sources = _size_sources(gm, args, tensor_at)
        _SYMBOLIC[gm] = None if sources is None else _symbolic_trace(gm, args, tensor_at,
                                                                      sources)
    trace = _SYMBOLIC[gm]
    if trace is None:
        return None
    try:
        return trace.at([args[k] for k in tensor_at])
    except OutsideTrace:
        return None


def _size_sources(gm: Any, args: Sequence[Any], tensor_at: Sequence[int]
                  ) -> dict[int, tuple[int, int]] | None:
    """For each size argument of `gm` (a placeholder whose value is a SymInt: Dynamo's dynamic
    dimension), the tensor argument (its index among the tensors) and dimension that is the
    same symbol, read from Dynamo's own metadata (not from equal values, which two dimensions
    may share by chance); None where there is none, or one is no tensor's dimension."""
    import sympy
    import torch

    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(nodes) != len(args):
        return None
    values = [n.meta.get("example_value") for n in nodes]
    dims: dict[Any, tuple[int, int]] = {}
    for i, k in enumerate(tensor_at):
        for d, size in enumerate(getattr(values[k], "shape", ())):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                dims.setdefault(size.node.expr, (i, d))
    sources = {}
    for k, v in enumerate(values):
        if isinstance(v, torch.SymInt):
            if v.node.expr not in dims:
                return None
            sources[k] = dims[v.node.expr]
    return sources or None


def declared_sizes(args: Sequence[Any]) -> dict[int, tuple[int, ...]]:
    """Each tensor argument whose dimensions the user bounded
    (`torch._dynamo.mark_dynamic(x, dim, max=N)`, which Dynamo keeps on the tensor it hands
    the backend), at its largest: the declared maximum where there is one past its size in
    this call, its size elsewhere. (Not Dynamo's value ranges of the symbols: its guards
    narrow those too.)"""
    import torch

    out = {}
    for k, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            continue
        sizes = list(a.shape)
        for declared in getattr(a, "_dynamo_dynamic_range", ()) or ():
            top, d = getattr(declared, "max", None), getattr(declared, "dim", None)
            if isinstance(top, int) and isinstance(d, int) and 0 <= d < len(sizes) \
                    and top > sizes[d]:
                sizes[d] = top
        if tuple(sizes) != tuple(a.shape):
            out[k] = tuple(sizes)
    return out


def _symbolic_trace(gm: Any, args: Sequence[Any], tensor_at: Sequence[int],
                    sources: dict[int, tuple[int, int]]) -> Any:
    """`gm` traced once with every tensor dimension left to torch (Dim.AUTO), each size
    argument read from its tensor's dimension (SymbolicTrace: decomposed at the first size
    whose record this host has not kept); None where torch cannot."""
    import sys

    from planner.importers.torch.specialize import SymbolicTrace

    # Seconds (several concrete traces' worth): said, as every wait over ~2 s is.
    print("planner: a graph called with a new size: tracing it once for every size (torch.export "
          "with dynamic shapes), so that later sizes need no trace of their own",
          file=sys.stderr, flush=True)
    try:
        program = _exported(gm, args, tensor_at, sources)
        # (each size's record kept per host; decomposed once, at the first size not kept)
        return SymbolicTrace(program, extra=decompositions())
    except Exception:  # noqa: BLE001 - each size traced as it is then
        return None


def _complex_not_trained(args: Sequence[Any], tensor_at: Sequence[int]) -> None:
    """A complex argument (a module's complex buffer) is fed as its planes and never
    differentiated: one that requires grad (a complex nn.Parameter) is refused in one line."""
    for k in tensor_at:
        if args[k].is_complex() and args[k].requires_grad:
            raise TorchImportError(f"argument {k}: a complex tensor that requires grad; the "
                                   "planner differentiates real tensors only (pass "
                                   "torch.view_as_real of it and view_as_complex it inside)")


def check_custom_backwards(gm: Any) -> None:
    """TorchImportError naming the first torch.autograd.Function of the user's in `gm` (Dynamo
    records one as `autograd_function_apply` with its forward and backward bodies): a graph
    that is differentiated gets the planner's gradient rules, which would replace the
    Function's own backward (a straight-through estimator's, say) with the derivative of its
    forward. Eager runs that graph (Piece's fallback) with the Function's own backward.
    Likewise a gradient hook on an activation (`Tensor.register_hook` in forward: a gradient
    reversal layer), recorded as `register_hook`: the planner's rules would skip it (it
    failed in torch.export before, a line about a tensor needing no gradient)."""
    import torch

    from planner.importers.torch.origin import user_line

    what = {getattr(torch.ops.higher_order, "autograd_function_apply", None):
            "a torch.autograd.Function with its own backward, which the planner's gradient "
            "rules would replace with the derivative of its forward",
            getattr(torch.ops.higher_order, "register_hook", None):
            "a gradient hook on an activation (Tensor.register_hook), which the planner's "
            "gradient rules would skip"}
    what.pop(None, None)
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in what:
            line = user_line(n)
            raise TorchImportError(f"node {n.name!r}{' at ' + line if line else ''}: "
                                   f"{what[n.target]}")


def _exported(gm: Any, args: Sequence[Any], tensor_at: Sequence[int],
              sizes: dict[int, tuple[int, int]] | None = None) -> Any:
    """torch.export of `gm` on `args`, its tensors (at `tensor_at`) the program's inputs and
    every other argument fixed; with `sizes` (_size_sources), traced with dynamic shapes, each
    size argument its tensor's dimension. TorchImportError in one line where torch.export
    fails."""
    import torch

    fixed = list(args)

    class Piece(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gm = gm

        def forward(self, *tensors: Any) -> Any:
            full = list(fixed)
            for k, t in zip(tensor_at, tensors, strict=True):
                full[k] = t
            for k, (i, d) in (sizes or {}).items():
                full[k] = tensors[i].shape[d]
            # Run node by node with each node's meta kept: the traced calls then carry the
            # user's module path and source line (Dynamo's), which messages name.
            with torch.fx.traceback.preserve_node_meta():
                regions = _GradRegions(self.gm)
                regions.notes = notes
                out = regions.run(*full)
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    from planner.importers.torch.quiet_log import quiet_torch_logs

    examples = tuple(args[k].detach() for k in tensor_at)
    notes: list[str] = []
    with warnings.catch_warnings(), quiet_torch_logs():
        warnings.simplefilter("ignore")
        try:
            dims = tuple({d: torch.export.Dim.AUTO for d in range(t.dim())} for t in examples)
            program = torch.export.export(Piece(), examples, strict=False,
                                          dynamic_shapes=(dims,) if sizes else None)
        except Exception as e:  # torch's own failure, in one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise TorchImportError(f"torch.export of the graph: {type(e).__name__}: "
                                   f"{first[:300]}") from None
    for note in dict.fromkeys(notes):
        warnings.warn(note, UserWarning, stacklevel=2)
    return program


# A checkpointed region that writes a buffer in place (BatchNorm's running statistics): eager
# writes it again when the backward recomputes the region (two momentum updates a step,
# num_batches_tracked += 2). The plan writes it once, as torch.compile's own backends do
# (aot_eager and inductor; backend="eager" fails on it in autograd's version check), said in
# one warning line: the eager fallback of the graph would fail as backend="eager" does.
CHECKPOINT_WRITES = ("a torch.utils.checkpoint region writes a buffer in place (BatchNorm's "
                     "running statistics, say), which eager PyTorch writes again when the "
                     "backward recomputes the region; the plan writes it once a call, as "
                     "torch.compile's aot_eager and inductor do: keep that module outside the "
                     "checkpoint for eager's values")


def _grad_mode_calls() -> dict[Any, str]:
    import torch

    calls = {torch._C._set_grad_enabled: "set",
             torch.autograd.grad_mode._enter_inference_mode: "enter_inference",
             torch.autograd.grad_mode._exit_inference_mode: "exit_inference"}
    checkpoint = getattr(torch.ops.higher_order, "tag_activation_checkpoint", None)
    if checkpoint is not None:
        calls[checkpoint] = "checkpoint"
    return calls


def _interpreter() -> type:
    import torch

    class GradRegions(torch.fx.Interpreter):
        """Runs Dynamo's graph with its grad-mode switches (`torch.no_grad()`,
        `set_grad_enabled`, `enable_grad` inside them, `inference_mode`) read, not run: every
        float result computed where gradients are off is detached, which the trace records
        as `aten.detach` (a StopGradient: no gradient flows through it, as eager's none
        does); values changed in place there are inputs' mutations like any other."""

        def __init__(self, gm: Any) -> None:
            super().__init__(gm)
            self.grad = True
            self.saved: list[bool] = []
            self.calls = _grad_mode_calls()
            self.notes: list[str] = []  # what the trace computes otherwise than eager

        def run_node(self, n: Any) -> Any:
            kind = self.calls.get(n.target) if n.op == "call_function" else None
            if kind == "set":
                self.grad = bool(n.args[0])
                return None
            if kind == "enter_inference":
                self.saved.append(self.grad)
                self.grad = not bool(n.args[0]) if n.args else False
                return None
            if kind == "exit_inference":
                self.grad = self.saved.pop() if self.saved else True
                return None
            if kind == "checkpoint":
                return self.checkpointed(n)
            out = super().run_node(n)
            if not self.grad and n.op in ("call_function", "call_method", "call_module"):
                out = torch.utils._pytree.tree_map(
                    lambda t: t.detach() if isinstance(t, torch.Tensor)
                    and t.is_floating_point() else t, out)
            return out

        def checkpointed(self, n: Any) -> Any:
            """torch.utils.checkpoint's region (Dynamo's tag_activation_checkpoint of a body
            graph): its body run inline, as torch.export cannot trace the wrapper (its
            context function) and the values and gradients are the body's; what to keep or
            recompute is the plan's own memory choice (planner/memory). A region that writes
            an argument in place with gradients on is noted (CHECKPOINT_WRITES)."""
            (body, *operands), _ = self.fetch_args_kwargs_from_env(n)
            inner = GradRegions(body)
            inner.grad, inner.notes = self.grad, self.notes
            versions = [getattr(t, "_version", None) for t in operands]
            with torch.fx.traceback.preserve_node_meta():
                out = inner.run(*operands)
            if self.grad and versions != [getattr(t, "_version", None) for t in operands]:
                from planner.importers.torch.origin import user_line

                line = user_line(n)
                self.notes.append(f"planner: node {n.name!r}{' at ' + line if line else ''}: "
                                  f"{CHECKPOINT_WRITES}")
            return out

    return GradRegions


def _GradRegions(gm: Any) -> Any:  # noqa: N802  (a class, made when torch is imported)
    return _interpreter()(gm)
