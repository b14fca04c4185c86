"""One Dynamo graph behind torch.compile(backend="planner"): planned per call signature, run by
generated executors, differentiated by the planner's own gradient rules.

    piece = Piece(gm, "planner_0", options)
    outs = piece(*args)          # what gm(*args) returns; autograd flows through it

Each distinct call (tensor shapes and dtypes, which tensors need gradients, the non-tensor
arguments: Dynamo's guards already split most of these, and a call with a new batch size under
automatic dynamic shapes is one more) is imported (dynamo_import.py) and planned once:

- without gradients (torch.no_grad, eval loops, frozen models): one inference plan of the graph;
- with gradients: the graph's vector-Jacobian product cut in two (planner.frontend.vjp): the
  forward plan returns the outputs and the activations the backward reads, the backward plan
  takes those and the outputs' incoming gradients and returns the gradients of the tensors that
  need one, which autograd then accumulates into `.grad` as for any op (an autograd.Function).

Every tensor argument (parameters and buffers included) is fed in place (DLPack; a
non-contiguous one is made contiguous first), so the module's parameters stay torch's; the
forward's outputs come back as copies torch wraps; the activations the backward reads stay in
the forward executor's arena until autograd frees them, and the gradients the backward returns
are views of its executor's arena until autograd and the user free them (planner/torch/
executors.py's ExecutorPool: an executor leased per call whose arrays are alive). New values
of arguments the graph writes (BatchNorm's running statistics, num_batches_tracked) are copied
back into them.

Dropout and random ops draw from the planner's generator (planner/ops/random.py), keyed by a
count of calls over the process (RNG_STEP), so each call draws anew and a backward call redraws
its forward call's Dropout mask; the bits are not torch's.

A second-order gradient (`torch.autograd.grad(..., create_graph=True)` through a planned graph:
WGAN-GP's and R1's penalties, MAML) is refused when asked for (DoubleBackward, naming the graph),
as Inductor's aot_autograd refuses it: the backward executor's gradients have no autograd graph,
and a gradient handed back without one would train nothing, silently.

A call the planner refuses (an op it lacks, an op without a gradient rule) runs gm itself,
eagerly, after one warning line naming the op and where (PlannerFallback), or raises with
options fallback=False.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from planner.collection import collector_off
from planner.frontend.vjp import FEEDS
from planner.importers.torch.context import TorchImportError
from planner.torch.backend_options import BackendOptions
from planner.torch.executors import (
    _RUNS,
    RNG_STEP,
    _executor,
    _Feeds,
    _in_place,
    _pool,
    _with_draw_count,
    as_torch,
    forget,
)


class PlannerFallback(UserWarning):
    """A graph torch.compile(backend="planner") runs eagerly: the planner refused it."""


# Every planned call signature of every piece, least recently called first: beyond the options'
# kept_calls, the oldest's executors are let go (_LET_GO: a later call of it makes them again
# on its range's arena, or from the build kept by its plan's digest: no planning, no build);
# beyond PLANS_PER_CALL times as many, its plans too (a later call imports and plans it again,
# building nothing). A run of dynamic padding comes back to its lengths in any order: its
# calls' plans (its import, gradient and step graphs) are what a new length costs, its
# executors (kernels, lane threads) what it holds.
_KEPT: OrderedDict[tuple[int, tuple], weakref.ref] = OrderedDict()
_LET_GO: OrderedDict[tuple[int, tuple], weakref.ref] = OrderedDict()
PLANS_PER_CALL = 4


def _keep(piece: Piece, key: tuple) -> None:
    """`piece`'s call signature `key` the most recently used; the least recently used past
    the bounds let go (_KEPT)."""
    _LET_GO.pop((id(piece), key), None)
    _KEPT[(id(piece), key)] = weakref.ref(piece)  # (a piece Dynamo lets go is not kept)
    _KEPT.move_to_end((id(piece), key))
    while len(_KEPT) > piece.options.kept_calls:  # the least recently used call's executors
        (owner_id, old), ref = _KEPT.popitem(last=False)
        owner = ref()
        run = owner.runs.get(old) if owner is not None else None
        if isinstance(run, _Training):
            run.let_go()
            _LET_GO[(owner_id, old)] = ref
        elif owner is not None:
            forget(*_executors_of(owner.runs.pop(old, None)))
    while len(_LET_GO) > PLANS_PER_CALL * piece.options.kept_calls:  # and their plans
        (_, old), ref = _LET_GO.popitem(last=False)
        owner = ref()
        if owner is not None:
            forget(*_executors_of(owner.runs.pop(old, None)))


class DoubleBackward(RuntimeError):
    """A gradient asked of a planned graph's backward (create_graph=True): refused, where a
    gradient without an autograd graph would be silently non-differentiable."""


class Piece:
    """A callable standing for gm (module docstring)."""

    def __init__(self, gm: Any, name: str, options: BackendOptions) -> None:
        self.gm = gm
        self.name = name
        self.options = options
        self.runs: dict[tuple, Any] = {}  # call signature -> _Inference | _Training | None
        # Call signatures planned while this host's measurements of them are taken in the
        # background (codegen/measure_later.py), with the jobs they wait on.
        self.provisional: dict[tuple, frozenset[str]] = {}
        self.aliases = output_aliases(gm)

    def __call__(self, *args: Any) -> Any:
        import torch

        training = torch.is_grad_enabled()
        needs = tuple(isinstance(a, torch.Tensor) and training and a.requires_grad
                      and a.is_floating_point() for a in args)
        # Dynamo guards on autocast's state (one graph per state); a piece keys on it too, since
        # the graph the planner imports carries that state's casts.
        autocast = (torch.is_autocast_enabled("cpu"), str(torch.get_autocast_dtype("cpu")))
        key = (tuple(_signature(a) for a in args), needs if any(needs) else (), autocast)
        if key not in self.runs or key in self.provisional:
            with collector_off():  # planning (planner/collection.py)
                self._plan_call(key, args, needs)
        run = self.runs[key]
        _keep(self, key)
        if run is None:
            return self.gm(*args)
        return realiased(run(args), self.aliases)

    def _plan_call(self, key: tuple, args: Sequence[Any], needs: tuple[bool, ...]) -> None:
        """`self.runs[key]` planned, or planned again from this host's measurements once
        they are in."""
        imported = None
        if key in self.provisional and self._measured(key):
            # This host's measurements are in: planned again from them, from the same import
            # (the calls in flight keep their executors to their backwards).
            old = self.runs.pop(key)
            imported = getattr(old, "piece", None)
            forget(*_executors_of(old))
        if key not in self.runs:
            from codegen.measure_later import watch

            with watch() as priced:
                # Another signature of the same kind (gradients asked, autocast) planned
                # before: the same import, gradient and passes at other shapes.
                alike = any(k[1:] == key[1:] for k in self.runs)
                self.runs[key] = self._planned(args, needs if any(needs) else None, imported,
                                               alike)
            if priced.provisional:
                self.provisional[key] = priced.provisional

    def _measured(self, key: tuple) -> bool:
        """Whether the background measurements `key` was planned without have ended; said
        once per call signature planned again."""
        import sys

        from codegen.measure_later import done

        if not done(self.provisional[key]):
            return False
        del self.provisional[key]
        print(f"planner: graph {self.name}: this host's measurements are in; planning it "
              f"again from them for its next calls", file=sys.stderr, flush=True)
        return True

    def _planned(self, args: Sequence[Any], needs: tuple[bool, ...] | None,
                 imported: Any = None, alike: bool = False) -> Any:
        from planner.errors import PlanError, UserError
        from planner.frontend.autodiff import AutodiffError
        from planner.graph.validate import checked_at_the_end

        try:
            # A later call signature of this graph and kind (`alike`): its import, gradient
            # and passes are those already checked at the first one's shapes, and the step
            # graph a call runs is checked once, in full (planner/torch/executors.py's _maker).
            with checked_at_the_end() if alike else contextlib.nullcontext():
                if imported is not None:  # planned again: the call's import as it was
                    return _planned_calls(imported, args, needs, self.name, self.options)
                return _plan(self.gm, args, needs, self.name, self.options)
        except (TorchImportError, AutodiffError, UserError, PlanError, ValueError) as e:
            if not self.options.fallback:
                raise
            message = " ".join(str(e).split())
            # One line: the message names the op and the user's line; no source line of
            # Dynamo's frames under it (warn's usual second line).
            warnings.warn_explicit(f"graph {self.name} runs eagerly: {message}",
                                   PlannerFallback, filename="<planner>", lineno=0,
                                   module="planner.torch.piece")
            return None


def _executors_of(run: Any) -> tuple[Any, ...]:
    """What a planned call holds of executors.py's shared executors and pools."""
    return tuple(getattr(run, f, None) for f in ("ex", "forward", "backward"))


def output_aliases(gm: Any) -> tuple[tuple[int, int, tuple, tuple, int], ...]:
    """Outputs of `gm` that eager PyTorch returns as views of another output (`(y,
    y.view(-1))`): (the view's index, its base output's, the view's size, stride and storage
    offset), from the traced example values, where the base is contiguous from its storage's
    start (so the executor's contiguous copy of it lays out the same) and every number is a
    concrete int."""
    from torch.multiprocessing.reductions import StorageWeakRef

    out_node = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if out_node is None:
        return ()
    flat = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)
    vals = [getattr(n, "meta", {}).get("example_value", getattr(n, "meta", {}).get("val"))
            if hasattr(n, "meta") else None for n in flat]
    found = []
    bases: dict[Any, int] = {}
    for k, v in enumerate(vals):
        try:
            ref = StorageWeakRef(v.untyped_storage())
            size, stride, offset = tuple(v.shape), tuple(v.stride()), v.storage_offset()
            concrete = all(type(d) is int for d in (*size, *stride, offset))
        except Exception:  # not a tensor, or no storage to compare (a sparse one): no alias
            continue
        if not concrete:
            continue
        if ref in bases:
            found.append((k, bases[ref], size, stride, offset))
        elif offset == 0 and v.is_contiguous():
            bases[ref] = k
    return tuple(found)


def realiased(outs: Any, aliases: Sequence[tuple[int, int, tuple, tuple, int]]) -> Any:
    """The executor's outputs with each eager view of another output made that view again
    (output_aliases): a write through one is seen through the other, and a gradient into the
    view reaches the base, as eager."""
    if not aliases:
        return outs
    outs = list(outs)
    for view, base, size, stride, offset in aliases:
        if outs[base].is_contiguous():  # the layout the view's strides were traced over
            outs[view] = outs[base].as_strided(size, stride, offset)
    return tuple(outs)


def _signature(a: Any) -> Any:
    import torch

    if isinstance(a, torch.Tensor):
        # Hashable as they are (a call keys hundreds of arguments): the device itself, not
        # its type's string, which torch makes anew at each read.
        return ("tensor", a.shape, a.dtype, a.device)
    return ("value", repr(a))


def _plan(gm: Any, args: Sequence[Any], needs: tuple[bool, ...] | None, name: str,
          options: BackendOptions) -> Any:
    import torch

    from planner.torch.dynamo_import import check_custom_backwards, declared_sizes, import_piece

    for a in args:
        if isinstance(a, torch.Tensor) and a.device != torch.device("cpu"):
            raise TorchImportError(f"a {a.device.type} tensor: the planner's torch.compile "
                                   "backend runs CPU tensors")
    from planner.torch.held import held_run, held_tensors

    # A compiled optimizer step: the tensors it updates held by the graph (a differentiated
    # graph holding tensors, a model's global constant, say, keeps them as constants below).
    if held_tensors(gm) and needs is None:
        return held_run(gm, args, name, options)
    if needs is not None:
        check_custom_backwards(gm)
    declared = declared_sizes(args)
    ranged = bool(declared) or _past_data(args)
    piece = _named_as_before(import_piece(gm, args, name, ranged=ranged))
    grown = _grown_args(piece, args, declared)
    if grown is not None:  # shapes vary past those planned: the next range, planned once
        import sys

        shapes = _shapes_text(grown)
        to_declared = any(tuple(getattr(a, "shape", ())) == declared.get(k)
                          for k, a in enumerate(grown))
        why = ("sizes declared by mark_dynamic" if to_declared
               else "called with shapes past those planned")
        print(f"planner: graph {name} ({why}): planning its range up to {shapes} once",
              file=sys.stderr, flush=True)
        try:  # kept as the range's plans and builds; its executors are let go
            at = _range_import(gm, grown, args, piece, name)
            if at is not None:
                forget(*_executors_of(_planned_calls(*at, needs, name, options)))
        except Exception:  # noqa: BLE001 - a graph specialised to its shapes: planned as it is
            pass
    return _planned_calls(piece, args, needs, name, options)


def _range_import(gm: Any, grown: list[Any], args: Sequence[Any], piece: Any, name: str
                  ) -> tuple[Any, list[Any]] | None:
    """The import of `gm` at a range's largest shapes (`grown`, else each grown dimension one
    smaller) whose graph is the call's own (`piece`), with those arguments; None where neither
    is. A range holds only calls of its graph (executors._in_range), and torch traces another
    graph at some sizes: a position table sliced to the length is no slice at the table's own
    length, a power of two when the table's is; planned there, the range held no call of its
    own length, and that call was planned and built again."""
    import sys

    from planner.torch.dynamo_import import import_piece
    from planner.torch.executors import _structure

    wanted = _structure(piece.graph, None)
    at: list[Any] | None = grown
    while at is not None:
        imported = _named_as_before(import_piece(gm, at, name))
        if _structure(imported.graph, None) == wanted:
            if at is not grown:
                _set_largest(piece, at)
                print(f"planner: graph {name}: torch traces another graph at those shapes; "
                      f"its range is up to {_shapes_text(at)}", file=sys.stderr, flush=True)
            return imported, at
        at = _one_smaller(piece, args, at) if at is grown else None
    print(f"planner: graph {name}: torch traces another graph at those shapes; the call's "
          f"own shapes are its range", file=sys.stderr, flush=True)
    return None


def _shapes_text(args: Sequence[Any]) -> str:
    import torch

    return ", ".join(str(list(a.shape)) for a in args if isinstance(a, torch.Tensor))


def _one_smaller(piece: Any, args: Sequence[Any], grown: Sequence[Any]) -> list[Any] | None:
    """`grown` with each tensor dimension grown past the call's `args` one smaller (and a size
    argument of such a dimension with it), or None where none is past them by more than one."""
    import torch

    sizes: set[int] = set()
    out: list[Any] = []
    for n, a, g in zip(piece.inputs, args, grown, strict=True):
        if n and isinstance(g, torch.Tensor):
            past = [s > d + 1 for s, d in zip(g.shape, a.shape, strict=True)]
            sizes |= {s for s, p in zip(g.shape, past, strict=True) if p}
            cut = g[tuple(slice(0, s - 1) if p else slice(None)
                          for s, p in zip(g.shape, past, strict=True))]
            out.append(cut.detach().clone().requires_grad_(g.requires_grad))
        else:
            out.append(g)
    if not sizes:
        return None
    return [g - 1 if type(g) is int and g != a and g in sizes else g
            for a, g in zip(args, out, strict=True)]


def _set_largest(piece: Any, args: Sequence[Any]) -> None:
    """The largest shapes of `piece`'s graph planned as a range: those of `args` (calls past
    them plan the next range: _grown_args)."""
    import torch

    from planner.torch.executors import _structure

    _LARGEST[_structure(piece.graph, None)] = {
        n: tuple(a.shape) for n, a in zip(piece.inputs, args, strict=True)
        if n and isinstance(a, torch.Tensor)}


# The largest sizes of the data (tensor arguments that are no parameter) each model's graphs
# were called with, by its parameters' storages and the data's ranks: a graph's call past them
# plans a range (_grown_args), whose shapes torch traces symbolically anyway, so that call is
# imported from the same trace rather than traced as it is first (seconds, on the 2-core VM).
_DATA_LARGEST: dict[tuple, tuple[tuple[int, ...], ...]] = {}


def _past_data(args: Sequence[Any]) -> bool:
    """Whether this call's data is larger in some dimension than every earlier call of a
    graph of the same model had it (_DATA_LARGEST), recorded; False at a model's first call."""
    import torch

    params = tuple(a.data_ptr() for a in args if isinstance(a, torch.nn.Parameter))
    data = tuple(tuple(a.shape) for a in args
                 if isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Parameter))
    key = (params, tuple(len(s) for s in data))
    seen = _DATA_LARGEST.get(key)
    _DATA_LARGEST[key] = data if seen is None else tuple(
        tuple(map(max, a, b)) for a, b in zip(seen, data, strict=True))
    return seen is not None and any(d > s for a, b in zip(data, seen, strict=True)
                                    for d, s in zip(a, b, strict=True))


# The first import of each computation (its ops and edges, without names or sizes): a later
# graph of the same computation (Dynamo's recompile of a piece with symbolic sizes, traced
# once for every size, whose calls torch numbers otherwise) takes its names, so that it finds
# the plans and ranges made for it (planner.torch.executors._structure keys them by name).
_FIRST: dict[str, Any] = {}  # computation -> Graph


def _named_as_before(piece: Any) -> Any:
    """`piece` under the names of the first import of its computation (_FIRST)."""
    import hashlib
    from dataclasses import replace

    from planner.importers.torch.specialize import names_like, renamed

    index = {t.name: k for k, t in enumerate(piece.graph.tensors)}
    key = hashlib.sha256(repr((
        [(t.role, t.dtype, len(t.shape)) for t in piece.graph.tensors],
        [(n.op, [index[i] for i in n.inputs], [index[o] for o in n.outputs])
         for n in piece.graph.nodes], [index[o] for o in piece.graph.outputs],
        [index[i] for i in piece.inputs if i])).encode()).hexdigest()
    first = _FIRST.setdefault(key, piece.graph)  # (the graph only: no constants' values)
    names = None if first is piece.graph else names_like(piece.graph, first)
    if names is None or all(k == v for k, v in names.items()):
        return piece
    graph = renamed(piece.graph, names, first).model_copy(update={"name": piece.graph.name})
    return replace(piece, graph=graph,
                   consts={names.get(k, k): v for k, v in piece.consts.items()},
                   inputs=tuple(names.get(i, i) if i else i for i in piece.inputs),
                   outputs=tuple(names[o] for o in piece.outputs),
                   mutations=tuple((k, names[t]) for k, t in piece.mutations))


# The largest shapes each piece graph (by structure: planner.torch.executors._structure) was
# called with, by graph input: a call past them in some dimension plans the next range, each
# larger dimension rounded up to a power of two, and runs in it (Dynamo's automatic-dynamic
# moment, answered once rather than at each new size: planner/pipeline/ranges.py).
_LARGEST: dict[str, dict[str, tuple[int, ...]]] = {}


class ShapeChurn(UserWarning):
    """A graph torch.compile(backend="planner") keeps being called with new shapes."""


# Distinct input shapes per piece structure, and after how many the user is told (once).
_DISTINCT: dict[str, set] = {}
CHURN = 8


def _tell_churn(piece: Any, key: str, shapes: dict[str, tuple[int, ...]]) -> None:
    seen = _DISTINCT.setdefault(key, set())
    seen.add(tuple(sorted(shapes.items())))
    if len(seen) == CHURN:
        varying = {n for n in shapes
                   if len({s for d in seen for m, s in d if m == n}) > 1}
        largest = {n: tuple(max(s[k] for d in seen for m, s in d if m == n)
                            for k in range(len(shape))) for n, shape in shapes.items()
                   if n in varying}
        said = ", ".join(f"{n} {list(s)}" for n, s in sorted(largest.items()))
        warnings.warn(f"graph {piece.graph.name}: called with {CHURN} distinct input shapes so "
                      f"far (largest {said}); each runs in a range plan, and a size past them "
                      f"plans the next power of two once: call it first with the largest "
                      f"shapes it will see (or torch._dynamo.mark_dynamic(x, dim, max=N) "
                      f"its inputs), and one range holds them all", ShapeChurn,
                      stacklevel=2)


def _grown_args(piece: Any, args: Sequence[Any], declared: dict[int, tuple[int, ...]]
                ) -> list[Any] | None:
    """`args` at the next range's shapes when some tensor is larger than every earlier call of
    a piece graph of this structure had it, or at the sizes the user declared (`declared`,
    dynamo_import.declared_sizes: mark_dynamic's max) on its first call (its values repeated
    to the new sizes; a size argument Dynamo passes for a dynamic dimension set to match), else
    None; the largest shapes recorded either way."""
    import numpy as np
    import torch

    from planner.torch.executors import _structure
    from planner.torch.shapes import grown_key

    shapes = {n: tuple(a.shape) for n, a in zip(piece.inputs, args, strict=True)
              if n and isinstance(a, torch.Tensor)}
    bounds = {piece.inputs[k]: s for k, s in declared.items() if piece.inputs[k] in shapes}
    key = _structure(piece.graph, None)
    seen = _LARGEST.setdefault(key, shapes)
    _tell_churn(piece, key, shapes)
    names = sorted(shapes)
    if set(seen) != set(shapes):
        return None
    # What the user declared, where it is past what was planned: planned at once.
    wanted = {n: tuple(max(b, d) for b, d in zip(bounds.get(n, seen[n]), seen[n], strict=True))
              for n in names}
    if bounds and (seen is shapes or any(wanted[n] != seen[n] for n in names)):
        grown = tuple(wanted[n] for n in names)
    elif seen is shapes:
        return None
    else:
        grown = grown_key([tuple(seen[n] for n in names)], tuple(shapes[n] for n in names))
        if grown is not None and bounds:  # no further than declared (where it holds the call)
            grown = tuple(tuple(min(g, b) if s <= b else g for g, b, s in zip(
                grown[i], bounds.get(n, grown[i]), shapes[n], strict=True))
                for i, n in enumerate(names))
    seen.update({n: tuple(max(a, b) for a, b in zip(seen[n], shapes[n], strict=True))
                 for n in names})
    if grown is None or grown == tuple(seen[n] for n in names) and seen is not shapes:
        return None
    to = dict(zip(names, grown, strict=True))
    seen.update(to)
    sizes = {old: new for n in names for old, new in zip(shapes[n], to[n], strict=True)
             if new != old}
    out = []
    for n, a in zip(piece.inputs, args, strict=True):
        if n and isinstance(a, torch.Tensor) and tuple(a.shape) != to[n]:
            wide = np.pad(a.detach().numpy(), [(0, t - d) for d, t in zip(a.shape, to[n],
                                                                          strict=True)],
                          mode="wrap")
            out.append(torch.from_numpy(wide).requires_grad_(a.requires_grad))
        elif isinstance(a, int) and not isinstance(a, bool) and a in sizes:
            out.append(sizes[a])
        else:
            out.append(a)
    return out


def _planned_calls(piece: Any, args: Sequence[Any], needs: tuple[bool, ...] | None,
                   name: str, options: BackendOptions) -> Any:
    """The imported piece planned for its calls: one inference plan, or the forward and
    backward plans of its vector-Jacobian product (module docstring)."""
    graph = _with_draw_count(piece.graph)
    feeds = _Feeds(piece.inputs, RNG_STEP in graph.tensor_map)
    if needs is None:
        return _Inference(piece, feeds, _executor(graph, piece.consts, options,
                                                  feeds.examples(args)))
    from planner.frontend.vjp import split_vjp

    wrt = [piece.inputs[k] for k, need in enumerate(needs) if need and piece.inputs[k]]
    reached = _reached(graph, set(wrt))
    of = [o for o in dict.fromkeys(piece.outputs) if o in reached]
    split = split_vjp(graph, wrt, of)
    forward = _pool(split.forward, piece.consts, options, feeds.examples(args))
    backward = _pool(split.backward, piece.consts, options, None) \
        if split.backward.nodes else None
    return _Training(piece, feeds, split, forward, backward, needs, frozenset(of), name)


class _Inference:
    def __init__(self, piece: Any, feeds: _Feeds, ex: Any) -> None:
        self.piece, self.feeds, self.ex = piece, feeds, ex
        _RUNS.add(self)

    def release(self) -> None:
        self.ex = None

    def __call__(self, args: Sequence[Any]) -> tuple:
        out = self.ex.forward(self.feeds.of(args))
        _write_back(args, self.piece.mutations, out)
        return tuple(as_torch(out[o]) for o in self.piece.outputs)


class _Training:
    def __init__(self, piece: Any, feeds: _Feeds, split: Any, forward: Any, backward: Any,
                 needs: tuple[bool, ...], differentiable: frozenset[str], name: str) -> None:
        self.piece, self.feeds, self.split = piece, feeds, split
        self.name = name
        self.forward, self.backward = forward, backward
        self.needs = needs
        self.differentiable = differentiable
        position = {n: k for k, n in enumerate(piece.inputs) if n}
        self.read = tuple(position[t] for t in split.forward_inputs_read if t in position)
        # The arguments the call writes back into (a buffer written in forward): what the
        # backward reads of them is their value before the write, saved as a copy (the write
        # would otherwise change what autograd saved: its version check refuses the backward).
        self.written = frozenset(k for k, _ in piece.mutations)
        # The saved activations the forward call returns as views of its leased arena: not
        # the user's (outputs and written-back arguments are copies, so a loss kept in a list
        # pins no arena; a saved output is saved as the output tensor itself).
        shown = {*piece.outputs, *(t for _, t in piece.mutations)}
        self.views = tuple(t for t in split.saved if t not in shown)
        # The gradients the backward call returns, as views of its leased arena too: copying
        # them out cost a ResNet-18's backward 6.3 of its 32.6 ms (page faults on the fresh
        # memory, each step). Autograd makes them the `.grad`s or adds them into those.
        returned = set(split.backward.outputs)
        self.grad_views = tuple(dict.fromkeys(g for g in split.grads.values() if g in returned))
        self._leaves: tuple[weakref.ref, ...] = ()
        # What the backward executor is fed (a set over its graph's tensors: hundreds, once).
        self.backward_feeds = frozenset(t.name for t in split.backward.tensors
                                        if t.role in FEEDS)
        _RUNS.add(self)

    def leaves_of(self, args: Sequence[Any]) -> tuple[weakref.ref, ...]:
        """Weak references to the leaves among `args` that need a gradient: the last call's,
        where they are the same tensors (a training loop's parameters, step after step), so
        a call makes none (each is an object the cyclic collector tracks)."""
        leaves = [a for a, need in zip(args, self.needs, strict=True) if need and a.is_leaf]
        kept = self._leaves
        if len(kept) != len(leaves) or any(r() is not a for r, a in zip(kept, leaves,
                                                                          strict=True)):
            kept = self._leaves = tuple(weakref.ref(a) for a in leaves)
        return kept

    def release(self) -> None:
        self.forward = self.backward = None

    def let_go(self) -> None:
        """The executors its pools hold idle let go (kernels, lane threads); its plans kept."""
        for pool in (self.forward, self.backward):
            if pool is not None:
                pool.let_go()

    def __call__(self, args: Sequence[Any]) -> tuple:
        n_out = len(self.piece.outputs)
        result = _Step.apply(self, *args)
        outs, mutations = result[:n_out], result[n_out:]
        _copied_into([args[k] for k, _ in self.piece.mutations], mutations)
        return tuple(outs)


class _Step:
    """autograd.Function over the forward and backward executors (made on first use: torch is
    imported only when a graph is planned)."""

    _fn: Any = None

    @classmethod
    def apply(cls, run: _Training, *args: Any) -> Any:
        if cls._fn is None:
            cls._fn = _function()
        return cls._fn.apply(run, *args)


def _function() -> Any:
    import torch

    class Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, run: _Training, *args: Any) -> Any:
            return _forward(ctx, run, args)

        @staticmethod
        def backward(ctx: Any, *grad_outs: Any) -> Any:
            return _backward(ctx, grad_outs)

    return Step


def _forward(ctx: Any, run: _Training, args: tuple) -> Any:
    """Step.forward: the forward executor's run on the leased arena, what the backward reads
    saved on `ctx`, the outputs and mutations returned."""
    given = run.feeds.of(args)
    piece = run.piece
    lease = run.forward.lease()
    try:
        out = lease.ex.forward(given, [], list(run.views))
        outs = [as_torch(out[o]) for o in piece.outputs]
        mutations = [as_torch(out[t]) for _, t in piece.mutations]
        shown = dict(zip(piece.outputs, outs, strict=True))
        shown.update((t, m) for (_, t), m in zip(piece.mutations, mutations,
                                                  strict=True))
        # What the backward reads of the user's is saved for it (autograd frees it
        # after the backward, or with a graph never backwarded, and its version counter
        # catches an in-place change of a saved output). The activations only the
        # backward sees stay the executor's arrays, held by one saved anchor: the
        # arena is this call's until autograd frees the anchor with the others.
        # Under the user's saved-tensor hooks (non-reentrant checkpointing drops what
        # is saved and recomputes it) every activation goes through them, as eager's.
        if _saved_tensor_hooks():
            saved = [shown[t] if t in shown else lease.kept(out[t])
                     for t in run.split.saved]
            ctx.arena = None
        else:
            saved = [shown[t] for t in run.split.saved if t in shown]
            ctx.arena = {t: _feedable(out[t]) for t in run.split.saved if t not in shown}
            saved.append(lease.anchor(ctx.arena))
    finally:
        lease.close()
    ctx.run = run
    # (the leaves whose .grad the backward's views may become: Lease.gradients_of)
    ctx.leaves = run.leaves_of(args)
    ctx.draws = given.get(RNG_STEP)  # the backward's Dropout redraws this call's masks
    ctx.save_for_backward(*(args[k].detach().clone() if k in run.written else args[k]
                            for k in run.read), *saved)
    ctx.mark_non_differentiable(*[t for o, t in zip(piece.outputs, outs, strict=True)
                                  if o not in run.differentiable], *mutations)
    return (*outs, *mutations)


def _refuse_create_graph(run: _Training) -> None:
    """create_graph=True (autograd runs a backward with gradients on only then): the
    executor's gradients have no autograd graph of their own, so they would come back silently
    non-differentiable (a WGAN-GP penalty that trains nothing). Refused in one line."""
    raise DoubleBackward(
        f"graph {run.name}: torch.autograd.grad(..., create_graph=True) (or "
        f"backward(create_graph=True)) through a graph planned by "
        f"torch.compile(backend=\"planner\"): the planner's backward is not "
        f"differentiable again; compute that gradient with the module uncompiled "
        f"(the compiled module's _orig_mod) or compiled by another backend")


def _backward(ctx: Any, grad_outs: tuple) -> Any:
    """Step.backward: the backward executor's run on what the forward saved and the incoming
    gradients, a gradient (or None) per input of Step.forward."""
    import torch

    run: _Training = ctx.run
    if torch.is_grad_enabled():
        _refuse_create_graph(run)
    piece, split = run.piece, run.split
    # (unpacked first: a second backward of a freed graph raises here, as eager does,
    # before the arena's arrays, no longer this call's, are read)
    values = ctx.saved_tensors
    feeds: dict[str, Any] = {}
    for k, t in zip(run.read, values, strict=False):
        feeds[piece.inputs[k]] = _in_place(t)
    if ctx.arena is None:  # every activation saved as a tensor
        feeds.update(zip(split.saved, map(_in_place, values[len(run.read):]),
                         strict=True))
    else:
        shown = iter(values[len(run.read):-1])  # (the last: the arena's anchor)
        feeds.update((t, ctx.arena[t] if t in ctx.arena else _in_place(next(shown)))
                     for t in split.saved)
    if ctx.draws is not None:
        feeds[RNG_STEP] = ctx.draws
    seeds: dict[str, Any] = {}
    for o, g in zip(piece.outputs, grad_outs, strict=False):
        s = split.seeds.get(o)
        if s is not None and g is not None:  # an output returned twice: both summed
            seeds[s] = g if s not in seeds else seeds[s] + g
    for s in split.seeds.values():
        if s not in seeds and s in split.backward.tensor_map:
            shape = split.backward.tensor(s).shape
            seeds[s] = torch.zeros(shape, dtype=torch.float32)
    # Each incoming gradient in its output's dtype (bfloat16 under autocast).
    feeds.update({s: _in_place(g.to(_torch_dtype(split.backward.tensor(s).dtype)))
                  for s, g in seeds.items() if s in split.backward.tensor_map})
    wanted = run.backward_feeds
    out: dict[str, Any] = {}
    if run.backward is not None:
        # Each gradient a view of the leased arena, holding it while it lives: the
        # `.grad` it becomes (set_to_none frees it: the executor is free again), or
        # the one autograd adds it into (a second executor runs the next backward
        # while the first's views are kept: gradient accumulation, two at most).
        lease = run.backward.lease()
        try:
            got = lease.ex.forward({n: v for n, v in feeds.items() if n in wanted}, [],
                                   list(run.grad_views))
            out = {g: lease.kept(got[g]) for g in run.grad_views}
            lease.gradients_of(ctx.leaves)
        finally:
            lease.close()
    grads: list[Any] = [None]
    for k, a in enumerate(ctx.run.needs):
        g = split.grads.get(piece.inputs[k]) if a else None
        value = out.get(g) if g in out else feeds.get(g) if g else None
        grads.append(value if value is None or isinstance(value, torch.Tensor)
                     else as_torch(value))
    return tuple(grads)


def _saved_tensor_hooks() -> bool:
    """Whether saved-tensor hooks are in force (torch.autograd.graph.saved_tensors_hooks;
    a torch without the query counts as hooked: every activation saved as a tensor)."""
    import torch

    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top is None or top(False) is not None


def _feedable(a: Any) -> Any:
    """An executor's array as an executor takes it back: as it is, but a bfloat16 one
    (ml_dtypes', which has no DLPack form) as a torch tensor over its bits."""
    return as_torch(a) if a.dtype.kind == "V" else a


def _torch_dtype(dtype: str) -> Any:
    import torch

    return getattr(torch, dtype)


def _write_back(args: Sequence[Any], mutations: Sequence[tuple[int, str]], out: Any) -> None:
    _copied_into([args[k] for k, _ in mutations], [as_torch(out[t]) for _, t in mutations])


def _copied_into(targets: Sequence[Any], values: Sequence[Any]) -> None:
    """Each value copied into its argument (the graph's writes: BatchNorm's running
    statistics), in one call (a model's 150 buffers one copy_ at a time were 150 dispatches
    each step)."""
    import torch

    if targets:
        with torch.no_grad():
            torch._foreach_copy_(list(targets), list(values))


def _reached(graph: Any, wrt: set[str]) -> set[str]:
    """Float tensors computed from a `wrt` tensor through differentiable inputs: the outputs
    that get a gradient (the others are marked non-differentiable, as eager leaves them)."""
    from planner.dtypes import is_float
    from planner.ops import get_op

    reached = set(wrt)
    for n in graph.nodes:
        skip = get_op(n.op).nondiff_inputs
        if any(i in reached for k, i in enumerate(n.inputs) if k not in skip):
            reached.update(o for o in n.outputs if is_float(graph.tensor(o).dtype))
    return reached

