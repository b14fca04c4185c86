"""What every planned Dynamo graph shares: its executors (planned, built, loaded, cached),
how a call's tensors are fed to them and how their arrays come back to torch.

    ex = _executor(graph, consts, options, examples)    # planned for options.target, loaded
    feeds = _Feeds(inputs, draws).of(args)              # torch's tensors, read in place
    as_torch(out["y"])                                  # an executor's array, no copy
    lease = _pool(graph, ...).lease()                   # an executor for one call in flight
    h = lease.kept(lease.ex.forward(feeds, [], ["h"])["h"])  # a view of its arena; lease held
    lease.close()                                       # back to the pool once h is freed

Used by planner/torch/piece.py (a model's graphs) and planner/torch/held.py (a graph holding
the tensors it updates: a compiled optimizer step).
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import math
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.runtime.forked import ForkLock
from planner.torch.backend_options import BackendOptions
from planner.torch.lane_choice import ChosenWay, StepWay

# Loaded executor packages by plan digest: a plan planned twice (a second module of the same
# shapes, a recompile) is built and loaded once per process.
_PACKAGES: dict[str, Any] = {}
# Loaded executors by content (_content_key): an executor holds no state a call leaves behind
# (every tensor of the piece is fed; its constants are loaded once), so pieces share one.
_EXECUTORS: dict[str, Any] = {}
# Range plans by graph structure (_structure): a smaller shape of a graph planned before runs on
# its build, planned, measured and built nothing (planner/pipeline/ranges.py).
_RANGES: dict[str, list[_Range]] = {}
# Lease pools of forward plans by content (_content_key): their executors' arenas hold a call's
# saved activations until its backward (ExecutorPool), so they are never _EXECUTORS' shared ones.
# (Weak: a pool lives while a planned call holds it; kept_calls lets calls go, piece.py.)
_POOLS: weakref.WeakValueDictionary[str, ExecutorPool] = weakref.WeakValueDictionary()
# The arenas of each range plan's build (by its package's name), shared by the pools of every
# call signature it runs (weak: a range's arenas live while a pool of it does).
_SLOTS: weakref.WeakValueDictionary[str, ArenaSlots] = weakref.WeakValueDictionary()
# The one arena of each range plan's inference build (by its package's name), shared by the
# executors of every call signature it runs (weak: while one of them lives).
_ARENAS: weakref.WeakValueDictionary[str, SharedArena] = weakref.WeakValueDictionary()
# The way every lanes="measured" plan of the process runs (planner/torch/lane_choice.py).
STEP_WAY = StepWay()
# Every planned call, so that its executors are dropped before the interpreter's teardown
# (Dynamo's code cache and a last loss's autograd graph hold them to the end; nanobind reports
# executors alive then).
_RUNS: weakref.WeakSet = weakref.WeakSet()
# Every lease whose arrays are still kept (a call never backwarded, alive at the end).
_LEASES: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _release() -> None:
    import gc

    for lease in list(_LEASES):
        lease.release()
    for run in list(_RUNS):
        run.release()
    _EXECUTORS.clear()
    _POOLS.clear()
    _PACKAGES.clear()
    _RANGES.clear()
    gc.collect()  # an arena's views in reference cycles (torch tensors a held graph re-pointed)


# The int64 scalar input a piece's Dropout and random nodes read as their step (their draws'
# stream, planner/ops/dropout.py): one count over every call of every piece in the process, so
# no two calls draw alike (each piece numbers its random nodes' seeds from 1), and a backward
# call recomputes its forward call's Dropout mask from the count that call was given.
RNG_STEP = "dynamo/rng_step"
_DRAWS = itertools.count()


def _with_draw_count(graph: Any) -> Any:
    """`graph` with RNG_STEP as the step input of every Dropout and random node that has none
    (as planner.frontend.autodiff.add_dropout_step gives a training graph its rng/step)."""
    from planner.frontend.autodiff import draws_without_step
    from planner.graph.validate import check_graph
    from planner.ir.graph import Graph, Tensor

    nodes = [n.model_copy(update={"inputs": (*n.inputs, RNG_STEP)})
             if draws_without_step(graph, n) else n for n in graph.nodes]
    if nodes == list(graph.nodes):
        return graph
    count = Tensor(name=RNG_STEP, shape=(), dtype="int64", role="input")
    return check_graph(Graph(**{**{f: getattr(graph, f) for f in Graph.model_fields},
                                "nodes": tuple(nodes), "tensors": (*graph.tensors, count)}))


@dataclass(frozen=True)
class _Feeds:
    """The graph's input tensor of each argument, and whether it reads RNG_STEP."""

    inputs: tuple[str | None, ...]
    draws: bool = False

    def of(self, args: Sequence[Any]) -> dict[str, Any]:
        feeds = {n: _in_place(a) for n, a in zip(self.inputs, args, strict=True) if n}
        if self.draws:
            feeds[RNG_STEP] = np.array(next(_DRAWS), dtype=np.int64)
        return feeds

    def examples(self, args: Sequence[Any]) -> dict[str, np.ndarray]:
        from planner.importers.torch.record import to_numpy

        # (to_numpy: a bfloat16 tensor through its bits, which torch's .numpy() refuses)
        feeds = {n: to_numpy(_in_place(a)) for n, a in zip(self.inputs, args, strict=True)
                 if n}
        if self.draws:
            feeds[RNG_STEP] = np.array(0, dtype=np.int64)
        return feeds


def _in_place(t: Any) -> Any:
    """The tensor as the executor reads it in place: no autograd (DLPack refuses a tensor that
    requires grad), contiguous (a copy only when it is not), a complex one as its planes
    (torch.view_as_real: the graph's input, planner/importers/torch/rules_complex.py)."""
    t = t.detach()
    t = t if t.is_contiguous() else t.contiguous()
    if t.is_complex():
        import torch

        return torch.view_as_real(t)
    return t


def as_torch(value: Any) -> Any:
    """An executor's array as a torch tensor sharing its memory; a bfloat16 one (ml_dtypes',
    which torch.from_numpy does not take: autocast's results) by its bits."""
    import torch

    a = np.asarray(value)
    # (kind first: a call converts hundreds of arrays, and dtype.name is slow)
    if a.dtype.kind == "V" and a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _executor(graph: Any, consts: dict[str, np.ndarray], options: BackendOptions,
              examples: dict[str, np.ndarray] | None, shared: bool = True) -> Any:
    """Plan `graph` for the options' target (the front end's passes, the pipeline's stages,
    priced as the options say), build it (cached by content unless not `shared`: an executor
    whose state is torch's tensors, planner/torch/held.py) and load it with its constants."""
    key = _content_key(graph, consts, options)
    if shared and key in _EXECUTORS:
        return _EXECUTORS[key]
    make = _maker(graph, consts, options, examples)
    ex = _on_range_arena(make) if shared and make.range is not None else make()
    if shared:
        _EXECUTORS[key] = ex
    return ex


def _on_range_arena(make: _Maker) -> ArenaCall:
    """An executor of a range plan's inference call signature on the range's one arena (its
    results are copies: calls take turns there, each with its own constants loaded)."""
    arena = _ARENAS.get(make.range)
    if arena is None:
        ex = make()
        arena = _ARENAS[make.range] = SharedArena(ex)
    else:
        ex = make(arena.owner)
    call = ArenaCall(ex, arena, make.load)
    arena.loaded = call  # (made with its constants)
    return call


def forget(*held: Any) -> None:
    """Executors and pools no longer shared by content (a call let go: piece.py's kept_calls),
    so that nothing here keeps their arenas alive."""
    for cache in (_EXECUTORS, _POOLS):
        for key in [k for k, v in cache.items() if any(v is h for h in held)]:
            del cache[key]


def _pool(graph: Any, consts: dict[str, np.ndarray], options: BackendOptions,
          examples: dict[str, np.ndarray] | None) -> ExecutorPool:
    """The lease pool of `graph`'s executors (ExecutorPool), planned and built as _executor
    plans and builds, cached by content apart from _executor's: a pooled executor is run only
    by the call that leased it."""
    key = _content_key(graph, consts, options)
    pool = _POOLS.get(key)
    if pool is None:
        make = _maker(graph, consts, options, examples)
        slots = None
        if make.range is not None:  # every call signature of the range on its arenas
            slots = _SLOTS.get(make.range)
            if slots is None:
                slots = _SLOTS[make.range] = ArenaSlots()
        pool = _POOLS[key] = ExecutorPool(make, slots)
    return pool


def _maker(graph: Any, consts: dict[str, np.ndarray], options: BackendOptions,
           examples: dict[str, np.ndarray] | None) -> _Maker:
    """A maker of new executors of `graph`, planned and built once (_executor): each has its
    own arena and the same constants."""
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph import init_params
    from planner.graph.validate import check_graph, checked_each_pass
    from planner.target.presets import load_target
    from planner.torch.training import _check_runs_here

    prepared = prepare(graph, GraphOptions())
    within = _in_range(prepared, options)  # (its target checked when it was planned)
    with checked_each_pass():  # (once in full what a caller's checked_at_the_end did not)
        if within is None:
            prepared = check_graph(prepared)
            target = load_target(options.target)
            _check_runs_here(target)
            stale = _measured_range(prepared, options)
            if stale is not None:  # its measurements are in: planned again, at its largest
                _planned_here(stale.prepared, options, _widened(examples, stale.prepared),
                              target)
                within = _in_range(prepared, options)
        if within is not None:  # a smaller shape of a graph planned before: its build
            name, package, step, concrete = within
            check_graph(step)
        else:
            name, package, step = _planned_here(prepared, options, examples, target)
            concrete = {}
    held = [t for t in step.by_role("param", "state") if t.updates is None]
    start = init_params(step)
    values = {t.name: consts.get(t.name, start.get(t.name)) for t in held}

    # BackendOptions.lanes: the plan's lanes, one op at a time on PyTorch's team, or whichever
    # the process's steps measure faster (one way for every measured plan: STEP_WAY). Either
    # way the executor runs the schedule the trainer's would (adaptive: the main one, or its
    # variant for the cores granted and measured free; executor.h's team_choice_ on the team).
    lanes = options.lanes is not False
    measured = options.lanes == "measured"

    def make(arena_of: Any = None) -> Any:
        ex = package.Executor(concurrent=lanes, adaptive=options.adaptive,
                              arena_of=_raw(arena_of), **concrete)
        ex.load_params(values)
        return ChosenWay(ex, STEP_WAY, name) if measured else ex

    return _Maker(make, lambda ex: _raw(ex).load_params(values),
                  name if any(r.name == name for rs in _RANGES.values() for r in rs) else None)


@dataclass(frozen=True)
class _Maker:
    """A maker of executors of one planned graph (`make(arena_of=None)`: its own arena, or
    another executor's of the same build), the loading of its constants into an executor's
    arena again (`load`: after another call signature's executor ran there), and the range
    plan's package whose arenas it may share (None: its arena is its own)."""

    make: Callable[..., Any]
    load: Callable[[Any], None]
    range: str | None

    def __call__(self, arena_of: Any = None) -> Any:
        return self.make(arena_of)


def _raw(ex: Any) -> Any:
    """The runtime's executor behind a ChosenWay (or None)."""
    return ex.ex if isinstance(ex, ChosenWay) else ex


def _planned_here(prepared: Any, options: BackendOptions, examples: dict[str, np.ndarray] | None,
                  target: Any) -> tuple[str, Any, Any]:
    """`prepared` planned for `target` as the options say, built (or found built) and kept as
    a range plan where it can be one: its package's name, the package and the step graph."""
    import sys

    from codegen.cached import load_built, package_name
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions
    from planner.pipeline.kept import kept_plan
    from planner.schedule.options import ScheduleOptions
    from planner.torch.training import _cost_table

    shapes = ", ".join(str(list(s)) for s in _inputs(prepared))
    print(f"planner: graph {prepared.name!r} for inputs {shapes}: planning",
          file=sys.stderr, flush=True)
    folder = options.folder()
    by_name = {t.name: t for t in prepared.tensors}
    settings = PlanOptions(schedule=ScheduleOptions(strategy=options.strategy),
                           memory=MemoryOptions(budget_bytes=options.memory_budget))
    table = _cost_table(options.costs, prepared, target, folder,
                        {k: v.astype(by_name[k].dtype, copy=False)
                         for k, v in (examples or {}).items() if k in by_name},
                        options=settings, prefix="dynamo_")
    with warnings.catch_warnings():  # an op the table lacks is priced analytically
        warnings.simplefilter("ignore")
        planned = kept_plan(prepared, target, table, settings)  # (this host's, planned before)
    name = package_name(planned, "dynamo_")
    if name not in _PACKAGES:
        _PACKAGES[name] = load_built(planned, folder, name)[0]
    _keep_range(prepared, planned, name, _PACKAGES[name], target, table, options)
    return name, _PACKAGES[name], planned.graph


def _widened(examples: dict[str, np.ndarray] | None, prepared: Any
             ) -> dict[str, np.ndarray] | None:
    """A call's example values repeated to `prepared`'s input shapes (shapes.widened): values
    of the data's own kinds for planning its range again."""
    from planner.torch.shapes import widened

    if examples is None:
        return None
    by_name = {t.name: t for t in prepared.tensors}
    return {k: widened([v], (tuple(by_name[k].shape),))[0] if k in by_name else v
            for k, v in examples.items()}


@dataclass(frozen=True)
class _Range:
    """A plan kept as a range (planner/pipeline/ranges.py): its build runs every smaller
    shape of its graph."""

    largest: tuple[tuple[int, ...], ...]  # its graph's input shapes
    prepared: Any  # the front-end graph it was planned from (at `largest`)
    name: str  # its package's
    plan: Any
    package: Any
    choices: Any  # what its step graph was made with (planner.step.StepChoices)
    # The watch it was planned in (codegen/measure_later.py): the background jobs it waits
    # on, known once that watch ends (the call's planning); once they end, the range is
    # planned again by its next call. None, or a watch with none: priced by all it asked.
    watch: Any = None

    @property
    def provisional(self) -> frozenset[str] | None:
        return self.watch.provisional if self.watch is not None else None


def _structure(prepared: Any, options: BackendOptions | None) -> str:
    """What a graph is apart from its shapes and attrs (its nodes, tensors by name, dtype,
    role and rank) under the options: the graphs a range may hold."""
    h = hashlib.sha256(repr(options).encode())
    for n in prepared.nodes:
        h.update(repr((n.name, n.op, n.inputs, n.outputs)).encode())
    for t in prepared.tensors:
        h.update(repr((t.name, t.dtype, t.role, len(t.shape))).encode())
    return h.hexdigest()


def _inputs(graph: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in graph.tensors if t.role in ("input", "label"))


def _in_range(prepared: Any, options: BackendOptions) -> tuple[str, Any, Any, dict] | None:
    """The name and build of the smallest kept range plan whose range holds `prepared` (a front-end
    graph at new shapes), the step graph it runs and the executor's concrete schedule; None
    where none does (planner/pipeline/ranges.py re-derives it from the two graphs)."""
    from codegen.concrete import concrete_options
    from codegen.measure_later import done, ranged_on
    from planner.pipeline.ranges import covers, outside_range, step_at

    shapes = _inputs(prepared)
    for r in sorted(_RANGES.get(_structure(prepared, options), ()),
                    key=lambda r: sum(map(math.prod, r.largest))):
        jobs = r.provisional
        if covers(r.largest, shapes) and (jobs is None or not done(jobs)):
            step = step_at(r.choices, prepared)
            if outside_range(r.plan.graph, step) is None:
                ranged_on(jobs)
                return r.name, r.package, step, concrete_options(r.plan, step)
    return None


def _measured_range(prepared: Any, options: BackendOptions) -> _Range | None:
    """The smallest kept range plan holding `prepared`'s shapes whose background measurements
    have ended since it was planned (_in_range passes it over): planned again at its own
    largest shapes, not at the call's, so that the range stays one."""
    from codegen.measure_later import done
    from planner.pipeline.ranges import covers

    shapes = _inputs(prepared)
    for r in sorted(_RANGES.get(_structure(prepared, options), ()),
                    key=lambda r: sum(map(math.prod, r.largest))):
        if covers(r.largest, shapes) and r.provisional is not None and done(r.provisional):
            return r
    return None


def _keep_range(prepared: Any, planned: Any, name: str, package: Any, target: Any, table: Any,
                options: BackendOptions) -> None:
    """Keep `planned` as a range plan where it can be one (planner.pipeline.ranges.
    range_choices)."""
    from codegen.measure_later import current_watch
    from planner.pipeline.ranges import range_choices

    choices = range_choices(prepared, planned.graph, target, None, table)
    if choices is not None:
        largest = _inputs(prepared)
        kept = _RANGES.setdefault(_structure(prepared, options), [])
        kept[:] = [r for r in kept if r.largest != largest]  # planned again: the new one
        kept.append(_Range(largest, prepared, name, planned, package, choices,
                           current_watch()))


class ArenaSlots:
    """The arenas of one range plan's build (planner/pipeline/ranges.py), each a slot leased
    whole: the executors of every call signature the range runs share them (the runtime's
    `arena_of`), so a run of many shapes holds as many arenas as calls in flight, not one per
    shape, and a new shape's executor allocates nothing. A slot remembers whose constants its
    arena holds (a constant built from a length differs between shapes): a lease by another
    pool loads its own first."""

    def __init__(self) -> None:
        self._idle: list[_Slot] = []
        self._lock = ForkLock(reentrant=True)

    def take(self) -> _Slot | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def give(self, slot: _Slot) -> None:
        with self._lock:
            self._idle.append(slot)

    def idle(self) -> tuple[_Slot, ...]:
        with self._lock:
            return tuple(self._idle)


class SharedArena:
    """The arena of a range plan's inference build: the executor that owns it, a lock (a call
    and the loading of its constants before it are one turn), whose constants it holds."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.lock = ForkLock(reentrant=True)
        self.loaded: Any = None


class ArenaCall:
    """An inference call signature's executor on its range's SharedArena: `forward` loads
    its constants first where another signature ran there last; the rest is the
    executor's."""

    def __init__(self, ex: Any, arena: SharedArena, load: Callable[[Any], None]) -> None:
        self.ex, self.arena, self._load = ex, arena, load

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.arena.lock:
            if self.arena.loaded is not self:
                self._load(self.ex)
                self.arena.loaded = self
            return self.ex.forward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ex, name)


class _Slot:
    """One arena of a range's build: the executor that owns it, whose constants it holds now
    (the pool), and each pool's executor on it."""

    def __init__(self, owner: Any, pool: ExecutorPool) -> None:
        self.owner, self.loaded = owner, pool
        self.on: weakref.WeakKeyDictionary[ExecutorPool, Any] = weakref.WeakKeyDictionary()
        self.on[pool] = owner


class ExecutorPool:
    """Executors of one forward plan, each leased by one call whose results the backward reads
    in place from its arena (arena views, no copy): a leased executor is not run again until
    every view of its call is gone (Lease), so several calls in flight before their backwards
    (a model called twice a step, checkpointing) lease one each and the pool grows to their
    number. A pool of a range plan's call signature leases its arenas from the range's
    ArenaSlots instead, shared with the range's other signatures. Thread-safe; a lease may be
    returned from any thread (by the garbage collector)."""

    def __init__(self, make: _Maker | Callable[..., Any], slots: ArenaSlots | None = None
                 ) -> None:
        self._make = make
        self._slots = slots
        self._idle: list[Any] = []
        # Reentrant: a view freed by a collection inside lease() returns its lease here.
        self._lock = ForkLock(reentrant=True)
        self.size = 0  # executors made
        # The leases not yet ended, each with its kept arrays' weak references (Lease).
        self._out: dict[Lease, list[weakref.ref]] = {}

    def lease(self) -> Lease:
        if self._slots is not None:
            return self._lease_slot(self._slots)
        with self._lock:
            if self._idle:
                return Lease(self, self._idle.pop())
            self.size += 1
        try:
            ex = self._make()
        except BaseException:
            with self._lock:
                self.size -= 1
            raise
        return Lease(self, ex)

    def _lease_slot(self, slots: ArenaSlots) -> Lease:
        slot = slots.take()
        try:
            if slot is None:  # every arena in use: a new one, this pool's executor owning it
                ex = self._made(None)
                slot = _Slot(ex, self)
            else:
                ex = slot.on.get(self)
                if ex is None:  # this signature's executor on that arena (it loads its own)
                    ex = slot.on[self] = self._made(slot.owner)
                elif slot.loaded is not self:
                    self._make.load(ex)
                slot.loaded = self
        except BaseException:
            if slot is not None:
                slots.give(slot)
            raise
        return Lease(self, ex, slot)

    def _made(self, arena_of: Any) -> Any:
        ex = self._make(arena_of)
        with self._lock:
            self.size += 1
        return ex

    def let_go(self) -> None:
        """Its idle executors let go (a later lease makes them again: no plan, no build); an
        executor that owns a range's arena stays, with the arena."""
        if self._slots is not None:
            for slot in self._slots.idle():
                if slot.on.get(self) is not slot.owner:
                    slot.on.pop(self, None)
            return
        with self._lock:
            self._idle.clear()

    def idle(self) -> tuple[Any, ...]:
        """The executors not leased now."""
        if self._slots is not None:
            return tuple(s.on[self] for s in self._slots.idle() if self in s.on)
        with self._lock:
            return tuple(self._idle)

    def _give_back(self, ex: Any, slot: _Slot | None = None) -> None:
        if slot is not None and self._slots is not None:
            self._slots.give(slot)
            return
        with self._lock:
            self._idle.append(ex)


class Lease:
    """One call's hold on a pooled executor: the call's own (ended by close()) and one per
    array it keeps (kept()); the executor goes back to the pool when all have ended."""

    def __init__(self, pool: ExecutorPool, ex: Any, slot: _Slot | None = None) -> None:
        self.pool, self.ex, self.slot = pool, ex, slot
        self._holds = 1
        self._lock = ForkLock(reentrant=True)
        self._tensors: list[weakref.ref] = []  # what kept() gave, for release()
        self._arrays: list[dict[str, Any]] = []  # what anchor() holds, for release()
        self._leaves: Sequence[weakref.ref] = ()  # whose .grad may be what kept() gave
        # One weak reference per kept array, calling _dropped (a finalizer each was four
        # objects the cyclic collector tracks, per gradient and step: mobilenet_v2's 160
        # gradients, a third of its young collections). The pool holds them, and so the
        # lease, until the lease ends (no cycle through the lease).
        pool._out[self] = []

    def kept(self, value: Any) -> Any:
        """`value` (an array of this call, a view of the executor's arena or a copy) as a torch
        tensor sharing its memory, holding the lease while any tensor over that memory lives
        (torch.from_numpy keeps the array it is given alive through the storage; the array
        held is the one handed to torch, not a view numpy may base elsewhere)."""
        import torch

        a = np.asarray(value)
        # (kind first: a call keeps hundreds of arrays, and dtype.name is slow)
        bf16 = a.dtype.kind == "V" and a.dtype.name == "bfloat16"
        held = a.view(np.uint16) if bf16 else a
        with self._lock:
            self._holds += 1
            self.pool._out[self].append(weakref.ref(held, self._dropped))
        t = torch.from_numpy(held)
        t = t.view(torch.bfloat16) if bf16 else t
        if not self._tensors:
            _LEASES.add(self)
        self._tensors.append(weakref.ref(t))
        return t

    def anchor(self, arrays: dict[str, Any]) -> Any:
        """One torch tensor (empty) holding the lease for `arrays`, this call's results kept
        as they are (views of the arena, or copies) for a later call to read: while the
        tensor lives, the arena is this call's. A backward's saved activations are hundreds
        of arrays; one hold for all of them, not a tensor and a finalizer each. The arrays are
        let go when the anchor is freed (autograd frees it after the backward), and at the
        interpreter's end (release())."""
        self._arrays.append(arrays)
        held = np.empty(0, np.uint8)
        anchor = self.kept(held)
        end = weakref.finalize(held, arrays.clear)  # no reference to the arena past the lease
        end.atexit = False
        return anchor

    def gradients_of(self, leaves: Sequence[weakref.ref]) -> None:
        """The tensors whose `.grad` autograd may make of the tensors kept() gave (it takes a
        gradient as it is where it can: the tensor kept() made is then gone, its memory not),
        for release(): weak references, a tuple a planned call shares between its calls
        (piece.py's _Training.leaves_of)."""
        self._leaves = leaves

    def close(self) -> None:
        """The call's own hold ended (its arrays are kept, or the call failed)."""
        self._end()

    def release(self) -> None:
        """Before the interpreter's teardown: the tensors kept() gave, still alive (saved by a
        call never backwarded, a gradient kept as `.grad`), given memory of their own, so
        none keeps the executor alive."""
        for ref in self._tensors:
            t = ref()
            if t is not None:
                t.data = t.detach().clone()
        for ref in self._leaves:
            leaf = ref()
            if leaf is not None and leaf.grad is not None:
                leaf.grad = leaf.grad.detach().clone()
        for arrays in self._arrays:
            arrays.clear()

    def _end(self) -> None:
        with self._lock:
            self._holds -= 1
            done = self._holds == 0
        if done:
            self.pool._out.pop(self, None)
            self.pool._give_back(self.ex, self.slot)

    def _dropped(self, _ref: weakref.ref) -> None:
        self._end()  # a kept array freed


def _content_key(graph: Any, consts: dict[str, np.ndarray], options: BackendOptions) -> str:
    """What decides an executor: the graph (under any piece's name), its constants' values and
    the options. Dynamo's re-trace of a piece for dynamic shapes is one more piece, whose call
    of an earlier shape then imports to the same graph: planned, built and loaded once."""
    h = hashlib.sha256(graph.model_copy(update={"name": "piece"}).to_json().encode())
    h.update(repr(options).encode())
    for name in sorted(consts):
        value = np.asarray(consts[name], order="C")
        h.update(f"{name}:{value.dtype}:{value.shape}".encode())
        h.update(value.tobytes())
    return h.hexdigest()
