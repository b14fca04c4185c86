"""A Dynamo graph that holds the tensors it writes: a compiled `optimizer.step()`.

    step = torch.compile(optimizer.step, backend="planner")      # or a function calling it

Dynamo hands a compiled model's parameters to the graph as arguments, but a compiled
optimizer step's parameters and optimizer state (Adam's exp_avg, exp_avg_sq and step, SGD's
momentum_buffer) as tensors the graph module holds (`get_attr`), which the graph updates in
place (foreach or single-tensor updates, traced from torch.optim's own code), reading the
gradients and, once a scheduler has changed it, the learning rate as arguments. The graph is
planned as it is (its pointwise ops, no pattern matched to the planner's update ops): every held
tensor is a state tensor of the planner's graph and each in-place write its update
(`<tensor>.next`, planner/importers/torch/convert.py), so the executor writes the new values
over the state's bytes in its arena.

No copy per step: the held tensors are re-pointed at the executor's arena (`t.data = view`, the
same tensor objects: the model, `state_dict`, `optimizer.state` and `clip_grad_norm_` see them
as before), so the executor updates torch's tensors where they lie, and the gradients and the
learning rate are read in place. A call finding a held tensor elsewhere (re-pointed by another
graph of the same optimizer, or assigned by the user, `load_state_dict`'s copies excepted: they
write into the arena) loads the tensors' values into its executor first, then re-points them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from planner.importers.torch.context import TorchImportError

# The name the export wrapper gives Dynamo's graph module (dynamo_import._exported): a held
# tensor `attr` is the planner's state tensor `gm.<attr>`.
PREFIX = "gm."


def held_tensors(gm: Any) -> dict[str, Any]:
    """The tensors `gm` holds (parameters and buffers Dynamo registered on it), by attribute."""
    return {**dict(gm.named_parameters()), **dict(gm.named_buffers())}


def as_buffers(gm: Any) -> Any:
    """`gm` with every held tensor a buffer (its storage shared, no autograd): torch.export then
    reports each in-place write as a buffer mutation (a parameter mutation would be refused),
    which the ATen front end makes the state's update; a runtime float (a scheduled lr) a
    tensor (planner/torch/scalars.py). Dynamo's own `gm` is left as it is."""
    import torch

    from planner.torch.scalars import tensor_scalars

    root = torch.nn.Module()
    for name, t in held_tensors(gm).items():
        root.register_buffer(name, t.detach())
    return torch.fx.GraphModule(root, tensor_scalars(gm).graph)


class Held:
    """The run of a graph holding state: the executor, its state tensors and torch's."""

    def __init__(self, piece: Any, feeds: Any, ex: Any, tensors: dict[str, Any],
                 floats: set[int]) -> None:
        from planner.torch.executors import _RUNS, as_torch

        _RUNS.add(self)
        self.piece, self.feeds, self.ex = piece, feeds, ex
        self.tensors = tensors  # planner state name -> torch's tensor
        self.floats = floats  # the arguments fed as float32 (scalars.item_only)
        views = ex.params(copy=False)
        self.views = {n: as_torch(views[n]) for n in tensors}
        for n, v in self.views.items():
            t = tensors[n]
            if (tuple(v.shape), v.dtype) != (tuple(t.shape), t.dtype) or not v.is_contiguous():
                raise TorchImportError(f"held tensor {n.removeprefix(PREFIX)!r}: the plan "
                                       f"keeps it as {v.dtype} {list(v.shape)}, not as torch's "
                                       f"{t.dtype} {list(t.shape)}")

    def release(self) -> None:
        """Before the interpreter's teardown: torch's tensors given memory of their own, so
        none keeps the executor alive."""
        for n, t in self.tensors.items():
            if n in self.views and t.data_ptr() == self.views[n].data_ptr():
                t.data = t.detach().clone()
        self.ex = None
        self.views = {}

    def __call__(self, args: Sequence[Any]) -> tuple:
        import torch

        from planner.torch.executors import as_torch

        self._own()
        args = _floats(args, self.floats)
        out = self.ex.forward(self.feeds.of(args))
        with torch.no_grad():
            for k, t in self.piece.mutations:
                args[k].copy_(as_torch(out[t]))
        return tuple(as_torch(out[o]) for o in self.piece.outputs)

    def _own(self) -> None:
        """Point every held tensor at this executor's arena, its value first loaded there,
        unless all already are (every call after the first, in a loop of one graph)."""
        import torch

        moved = [n for n, t in self.tensors.items()
                 if t.data_ptr() != self.views[n].data_ptr()]
        if not moved:
            return
        self.ex.load_params({n: self.tensors[n].detach().contiguous().numpy() for n in moved})
        with torch.no_grad():
            for n in moved:
                self.tensors[n].data = self.views[n]


def held_run(gm: Any, args: Sequence[Any], name: str, options: Any) -> Held:
    """Import and plan `gm` (its held tensors the planner's state), build an executor of its
    own (the state lives in it) and make the run; TorchImportError in one line where a held
    tensor is not a state tensor the plan keeps as torch does."""
    from planner.torch.dynamo_import import import_piece
    from planner.torch.executors import RNG_STEP, _executor, _Feeds, _with_draw_count
    from planner.torch.scalars import item_only

    held = held_tensors(gm)
    for attr, t in held.items():
        # Re-pointing a tensor that shares a larger storage (a view, a flat buffer's slice)
        # would part it from the rest of that storage.
        if t.untyped_storage().nbytes() != t.numel() * t.element_size() or t.dim() and \
                not t.is_contiguous():
            raise TorchImportError(f"held tensor {attr!r}: shares its storage with other "
                                   "tensors (a view or a slice of a flat buffer); the planner "
                                   "updates a tensor that owns its storage")
    floats = item_only(gm)
    args = _floats(args, floats)
    piece = import_piece(as_buffers(gm), args, name)
    graph = _with_draw_count(piece.graph)
    # The graph's state: the held tensors (`gm.<attr>`) and the importer's constants (a lerp's
    # weight as a tensor), which stay the executor's.
    state = {t.name for t in graph.by_role("param", "state")
             if t.updates is None and t.name.startswith(PREFIX)}
    unknown = sorted(n for n in state if n.removeprefix(PREFIX) not in held)
    if unknown:
        raise TorchImportError(f"state tensor {unknown[0]!r}: not a tensor the graph holds")
    # A held tensor the graph reads but the plan does not keep was folded into a constant at
    # import: its later values would go unseen.
    read = sorted(n.target for n in gm.graph.nodes if n.op == "get_attr" and n.users
                  and n.target in held and PREFIX + n.target not in state)
    if read:
        raise TorchImportError(f"held tensor {read[0]!r}: read by the graph but folded into a "
                               "constant of the plan, which would not see its later values")
    feeds = _Feeds(piece.inputs, RNG_STEP in graph.tensor_map)
    ex = _executor(graph, piece.consts, options, feeds.examples(args), shared=False)
    # The constants were the held tensors' values, sharing their memory (perhaps another
    # executor's arena): loaded now, and not kept.
    piece = replace(piece, consts={})
    return Held(piece, feeds, ex, {n: held[n.removeprefix(PREFIX)] for n in sorted(state)},
                floats)


def _floats(args: Sequence[Any], floats: set[int]) -> list[Any]:
    """`args` with the runtime floats at `floats` as float32 (scalars.item_only)."""
    import torch

    return [a.to(torch.float32) if k in floats else a for k, a in enumerate(args)]
