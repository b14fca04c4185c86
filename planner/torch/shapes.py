"""The input shapes of one training run: an executor per shape, one run state between them.

A trainer is planned for its example inputs' shapes, and that plan is a range
(planner/pipeline/ranges.py): a batch of smaller shapes (the last, smaller batch of a
DataLoader with drop_last=False, an evaluation batch, a shorter sequence) is traced at its
shapes and runs on the range plan's build, an executor made for those shapes with nothing
planned or built; a batch past every kept range plans the next range (each larger dimension
rounded up to a power of two) and runs in it. Executors are kept here, least recently used
first out beyond `limit` (range plans last; the first shape, the primary, is never dropped).

One arena per plan, not per shape. A shape run in a range runs on the range plan's executor's
arena (the CPU executor's `arena_of`): the same library, so every persistent tensor at the
same offset, the run's parameters, buffers, optimizer slots, step counts and hyperparameters
read and updated in place, nothing copied between the range's executors; each keeps only its
kernels (made for its shapes), its weight packs and scratch blocks, and every tensor is held
plain there (a convolution weight's kept layout is one kernel's choice at its shapes: the
range executor's are released when the first shape joins it). The bytes only a shape
owns there (`Built.own`: state the step never writes whose value follows the batch, a
constant built from a length) are loaded before its call and the range's loaded back after
it (`Built.restore`), so between calls the arena holds the range's. The executors on one
arena take turns (one lock; a step of one is refused while another's step_async is in
flight): the trainer steps one at a time. The dynamic-padding fine-tune (71 lengths) held
one arena per kept length before, and handed its state over twice a step.

    primary [8, 56]          -- arena A --  [8, 30], [8, 41], ...  (on A: nothing moves)
    declared range [8, 96]   -- arena B --  [8, 70], [8, 88], ...  (A -> B in, B -> A back)

Shapes planned apart (another plan, other offsets: weight packs, the update ops' in-place
writes place parameters where their plan does) hand the run state over: a copy of the
persistent tensors (parameters, buffers, optimizer slots, step counts, hyperparameters), the
bytes an optimizer update already reads and writes once per step, so a step on another plan
costs at most about one more update's memory traffic (docs/architecture.md). The primary
holds the run between calls: a step on another arena copies the primary's state in, steps,
and copies it back, so live views of the primary (`Trainer.load_into`, `params(copy=False)`)
and the hyperparameters a scheduler sets on `Trainer.executor` are always the run's; its
range's shapes share them outright.

What is handed over: every persistent tensor (param, state, optimizer-state) the two plans
hold under one name and shape. A tensor the step writes (some tensor `updates` it) that
the other plan lacks, or holds with another shape, would lose the run's state: refused in one
line. One the step never writes and whose shape follows the batch (a constant built for a
sequence length) stays the shape's own, from its own export. A data-parallel plan that shards
(ZeRO-1's optimizer state, ZeRO-3's parameters too) holds buckets of several tensors' floats
under one name (`shard/0/param`): handed over only where both plans lay every bucket out alike
(the same members, shapes and order), else refused in one line.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from planner.errors import UserError

PERSISTENT = ("param", "state", "optimizer-state")
# Executors kept besides the primary's, least recently used dropped first: by default this
# many of shapes planned apart (each a plan and build of its own), and of shapes run on a kept
# range plan's build (an executor only, on the range's arena) as many as the bytes they hold
# of their own (weight packs, scratch blocks) fit in WITHIN_BYTES. Under a count of 4 for
# both, a dynamic-padding run (71 lengths, one range) made an executor again at nearly every
# step: 53 ms a step where a kept one stepped in 10-32 (the text workload of
# bench/bench_first_step.py).
DEFAULT_LIMIT = 4
WITHIN_BYTES = 1 << 30
# Shapes planned apart (none in a kept range) after which the run is told the range to declare.
CHURN = 3

ShapeKey = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Built:
    """One planned and built shape: its import, the graph its executor runs, the plan, the
    loaded package (its `trace`) and executor, and what the plan was priced with (`explain`)."""

    key: ShapeKey
    imported: Any
    graph: Any
    plan: Any
    package: Any
    executor: Any
    target: Any
    table: Any
    feeds: tuple[Any, ...]
    # What the plan's step graph was made with (planner.step.StepChoices): a plan with
    # them is a range plan, whose build runs any smaller shapes of its graph
    # (planner/pipeline/ranges.py); None: its own shapes only (a data-parallel plan's).
    choices: Any = None
    # The shapes of the range plan this one runs on with no build of its own; None: its own.
    within: ShapeKey | None = None
    # Priced in part by the model while this host's measurements of it are taken in the
    # background (codegen/measure_later.py): the jobs it waits on; None: priced by all it
    # asked.
    provisional: frozenset[str] | None = None
    # A shape run on a range plan's build (`within`) runs on that plan's executor's arena: the
    # persistent tensors whose bytes are its own there (never written by the step, of another
    # value than the range's: a constant built from a length), loaded before each of its
    # calls, and the range's values of them, loaded back after it (own_values).
    own: Mapping[str, np.ndarray] = field(default_factory=dict)
    restore: Mapping[str, np.ndarray] = field(default_factory=dict)
    # The bytes its executor holds of its own (a shape on a range's arena: its weight packs
    # and scratch blocks; else its plan's arena), what the kept executors are bounded by.
    held_bytes: int | None = None


def key_of(arrays: Sequence[np.ndarray]) -> ShapeKey:
    return tuple(tuple(int(d) for d in a.shape) for a in arrays)


def spell(key: ShapeKey) -> str:
    """`[7, 20], [7]`: a shape key as a line says it."""
    return ", ".join("[" + ", ".join(map(str, s)) + "]" for s in key)


def grown_key(ranges: Sequence[ShapeKey], key: ShapeKey) -> ShapeKey | None:
    """The shapes to plan as a range when `key` is no shape of the kept `ranges`: each
    dimension larger than every range's rounded up to a power of two (a length or batch that
    varies past the range gets the next range planned once, not each new size), the others
    the largest range's; None where no range has `key`'s ranks, no dimension is past them, or
    rounding adds nothing.

    >>> grown_key([((32, 20), (32,))], ((32, 37), (32,)))
    ((32, 64), (32,))
    >>> grown_key([((32, 20), (32,))], ((32, 64), (32,))) is None
    True
    """
    alike = [r for r in ranges if len(r) == len(key)
             and all(len(a) == len(b) for a, b in zip(r, key, strict=True))]
    if not alike:
        return None
    largest = tuple(tuple(max(r[i][d] for r in alike) for d in range(len(s)))
                    for i, s in enumerate(key))
    grown = tuple(tuple(m if d <= m else 1 << (d - 1).bit_length()
                        for d, m in zip(s, b, strict=True))
                  for s, b in zip(key, largest, strict=True))
    # Only past the ranges: a shape inside one whose graph differs is planned as it is.
    return None if grown == key or grown == largest else grown


def widened(arrays: Sequence[np.ndarray], key: ShapeKey) -> tuple[np.ndarray, ...]:
    """`arrays` repeated along each axis to the shapes of `key` (no smaller): example values
    of the data's own kinds (token ids, class labels) for planning a range.

    >>> widened([np.array([[1, 2]])], ((2, 3),))[0].tolist()
    [[1, 2, 1], [1, 2, 1]]
    """
    return tuple(np.pad(a, [(0, n - d) for d, n in zip(a.shape, s, strict=True)], mode="wrap")
                 for a, s in zip(arrays, key, strict=True))


def written(graph: Any) -> set[str]:
    """The persistent tensors the step writes: those some tensor of the graph `updates`."""
    return {t.updates for t in graph.tensors if t.updates is not None}


def own_values(ranged: Built, graph: Any, exported: Mapping[str, np.ndarray],
               initial: Callable[[], Mapping[str, np.ndarray]] | None = None
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """What a shape whose step graph is `graph`, run on the range plan `ranged`'s arena,
    holds there of its own (Built.own): the persistent tensors the step never writes whose
    value at these shapes (`exported`: what its import starts from; `initial()`, asked only
    where a tensor the range's import holds is not in `exported`, for the others: the graph's
    init values) differs from the range's import's (a constant built from a length, of one
    shape at every length: a range keeps every persistent tensor's shape); and the range's
    values of them, as its arena holds them between calls. A frozen parameter or buffer
    imports alike at every shape: the run's."""
    state = written(graph) | written(ranged.graph)
    theirs = ranged.imported.params()
    kept = [t.name for t in graph.tensors if t.role in PERSISTENT and t.name not in state
            and t.name in theirs]
    if initial is not None and any(n not in exported for n in kept):
        exported = {**initial(), **exported}
    names = [n for n in kept if n in exported and not np.array_equal(exported[n], theirs[n])]
    if not names:
        return {}, {}
    held = ranged.executor.params(copy=False)
    return ({n: exported[n] for n in names},
            {n: np.array(held[n]) for n in names if n in held})


def shard_layout(graph: Any) -> dict[tuple[str, str], tuple]:
    """What each shard tensor of a sharded data-parallel graph holds, by (op, shard): an
    AllGather's members (names and shapes, in bucket order), a ShardedUpdate's parameters;
    {} for a graph that shards nothing (planner/ops/collective.py)."""
    from planner.ops.collective import gathered_shapes

    tensors = {t.name: t for t in graph.tensors}
    out: dict[tuple[str, str], tuple] = {}
    for n in graph.nodes:
        if n.op == "AllGather":
            names = [o.removeprefix("regathered/").removeprefix("gathered/") for o in n.outputs]
            out[(n.op, n.inputs[0])] = tuple(zip(names, gathered_shapes(n.attrs), strict=True))
        elif n.op == "ShardedUpdate":
            members = tuple((i, tuple(tensors[i].shape)) for i in n.inputs
                            if i in tensors and tensors[i].role == "param")
            for i in n.inputs:
                if i.startswith("shard/"):
                    out[(n.op, i)] = members
    return out


def hand_over(source: Built, target: Built, keep: Collection[str] = ()) -> None:
    """Copy the run state held by `source`'s executor into `target`'s (module docstring),
    but the tensors named in `keep` (each executor's own)."""
    if source is target:
        return
    held = source.executor.params(copy=False)
    if not all(isinstance(v, np.ndarray) for v in held.values()):
        held = source.executor.params()  # device memory (a CUDA executor's): host copies
    held = {k: v for k, v in held.items() if k not in keep}
    theirs = {t.name: t for t in target.graph.tensors if t.role in PERSISTENT}
    state = written(source.graph) | written(target.graph)
    out: dict[str, Any] = {}
    for name, value in held.items():
        t = theirs.get(name)
        if t is not None and tuple(t.shape) == tuple(value.shape):
            out[name] = value
        elif name in state:
            where = ("has no such tensor" if t is None
                     else f"holds it as {list(t.shape)} {t.dtype}")
            raise UserError(f"trainer: shapes {spell(target.key)}: the run's tensor {name!r} "
                            f"({list(value.shape)} {value.dtype.name}) is state the step "
                            f"updates, and the plan for these shapes {where}; feed batches "
                            f"of the first shapes ({spell(source.key)})")
    if any(name.startswith("shard/") for name in out):
        mine, other = shard_layout(source.graph), shard_layout(target.graph)
        if mine != other:
            where = next(k[1] for k in sorted(set(mine) | set(other))
                         if mine.get(k) != other.get(k))
            raise UserError(f"trainer: shapes {spell(target.key)}: the plan for these shapes "
                            f"lays the shards out otherwise than the first plan ({where!r} holds "
                            f"other tensors), so the run's sharded state cannot move between "
                            f"them; give bucket_bytes= so every shape's buckets are alike")
    lost = sorted(n for n in state if n in theirs and n not in out and n not in held)
    if lost:
        raise UserError(f"trainer: shapes {spell(target.key)}: the plan updates {lost[0]!r}, "
                        f"which the run's first plan does not hold; feed batches of the "
                        f"first shapes ({spell(source.key)})")
    # Into the target's live views where it gives them (the CPU executor's arena: a memcpy per
    # tensor, 3.4 ms for 25 MiB here, where load_params took 92 ms); load_params for the rest.
    views = target.executor.params(copy=False)
    rest = {}
    for name, value in out.items():
        view = views.get(name)
        if (isinstance(view, np.ndarray) and view.flags.writeable and view.shape == value.shape
                and view.dtype == value.dtype):
            np.copyto(view, value)
        else:
            rest[name] = value
    if rest:
        target.executor.load_params(rest, partial=True)


class Shapes:
    """The run's executors by input shapes: the primary, and up to `limit` others (LRU).

    A new shape no larger than a kept range plan's (planner/pipeline/ranges.py: the smallest
    such) runs on that plan's build (`within`: the module traced at the new shape, its step
    graph checked against the range's, an executor made for it; no planning, measuring or
    build); else, or where the graphs differ, it is planned and built apart."""

    def __init__(self, primary: Built, build: Callable[..., Built],
                 limit: int | None = None, progress: Any = None,
                 within: Callable[[Built, Sequence[np.ndarray]], Built | None] | None = None,
                 examples: Sequence[Any] = ()) -> None:
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                                  or limit < 0):
            raise UserError(f"trainer: shape_cache must be an int >= 0 (executors kept "
                            f"besides the first shape's), not {limit!r}")
        self.primary = primary
        self.by_default = limit is None
        self.limit = DEFAULT_LIMIT if limit is None else limit
        self._build = build
        self._within = within
        self.distinct: set[ShapeKey] = {primary.key}  # every shape the run has brought
        self.churn_told = self.drop_told = False
        self._others: OrderedDict[ShapeKey, Built] = OrderedDict()
        self._progress = progress if progress is not None else sys.stderr
        self.planned = 1  # shapes planned and built so far in this run (a new one counts)
        self.last = primary
        self._examples = tuple(examples)  # the primary's, to plan it again (refined)
        self._arrays: dict[ShapeKey, tuple[Any, ...]] = {}  # those of shapes planned apart

    def refined(self) -> Built | None:
        """The primary planned again, where it was priced in part by the model while this
        host's measurements were taken in the background and they are in now
        (codegen/measure_later.py), and the new plan differs: the run's state handed to it,
        the executors of shapes run on the old plan's build let go (each made again on the
        new one's at its next use); None where nothing changed."""
        from codegen.measure_later import done

        self._refine_others()
        old = self.primary
        if old.provisional is None or not self._examples or not done(old.provisional):
            return None
        new = self._build(self._examples, old.imported)
        if new.plan.to_json() == old.plan.to_json():
            self.primary = replace(old, provisional=new.provisional)
            return None
        hand_over(old, new)
        self.primary = self.last = new
        # Shapes run on the old plan's build are run on the new one's from their next step;
        # shapes planned apart keep their plans (each hands the run's state over by name).
        for key in [k for k, b in self._others.items() if b.within == old.key]:
            del self._others[key]
        return new

    def kept(self) -> list[ShapeKey]:
        return [self.primary.key, *self._others]

    def get(self, arrays: Sequence[np.ndarray]) -> Built:
        """The executor for these feeds' shapes, planned and built on first use."""
        key = key_of(arrays)
        if key == self.primary.key:
            return self.primary
        if key in self._others:
            self._others.move_to_end(key)
            return self._others[key]
        self._check_ranks(arrays)
        self.distinct.add(key)
        built = self._in_range(key, arrays)
        if built is None:
            self._tell_churn()
            grown = grown_key(self._ranges(), key)
            if grown is not None:  # shapes vary past the range: plan the next one, once
                print(f"trainer: new input shapes {spell(key)} are larger than those planned "
                      f"({spell(self.primary.key)}): planning and building shapes up to "
                      f"{spell(grown)} once, and running these in their range",
                      file=self._progress, flush=True)
                self._arrays[grown] = widened(arrays, grown)
                ranged = self._build(self._arrays[grown])
                self.planned += 1
                self._keep(grown, ranged)
                built = self._in_range(key, arrays)
        if built is None:
            print(f"trainer: new input shapes {spell(key)} (planned for "
                  f"{spell(self.primary.key)}): planning and building them once, kept for "
                  f"later steps", file=self._progress, flush=True)
            self._arrays[key] = tuple(arrays)
            built = self._build(arrays)
            self.planned += 1
        return self._keep(key, built)

    def _refine_others(self) -> None:
        """The shapes planned apart while their measurements were taken in the background,
        planned again once they are in (their executors hold no run state: it is handed to
        them at each step), and the shapes run on their builds let go."""
        from codegen.measure_later import done

        for key, built in list(self._others.items()):
            if (built.within is not None or built.provisional is None
                    or key not in self._arrays or not done(built.provisional)):
                continue
            new = self._build(self._arrays[key], built.imported)
            self._others[key] = new if new.plan.to_json() != built.plan.to_json() else \
                replace(built, provisional=new.provisional)
            for other in [k for k, b in self._others.items() if b.within == key]:
                del self._others[other]

    def _to_drop(self) -> ShapeKey | None:
        """The least recently used executor over the bound, or None: with a `shape_cache`
        given, any beyond that count (a range plan's last: the shapes it holds would
        otherwise be planned again); by default, one planned apart beyond DEFAULT_LIMIT of
        them, or one of a range's shapes while what they hold exceeds WITHIN_BYTES."""
        within = [k for k, b in self._others.items() if b.within is not None]
        if not self.by_default:
            if len(self._others) <= self.limit:
                return None
            return within[0] if within else next(iter(self._others))
        if sum(_held_bytes(self._others[k]) for k in within) > WITHIN_BYTES:
            return within[0]
        apart = [k for k in self._others if k not in set(within)]
        return apart[0] if len(apart) > self.limit else None

    def _ranges(self) -> list[ShapeKey]:
        return [b.key for b in (self.primary, *self._others.values())
                if b.choices is not None and b.within is None]

    def _keep(self, key: ShapeKey, built: Built) -> Built:
        if self.limit == 0 or key == self.primary.key:
            return built
        self._others[key] = built
        while (old := self._to_drop()) is not None:
            del self._others[old]
            self._arrays.pop(old, None)
            if not self.drop_told:  # once: shapes that keep changing would say it each step
                self.drop_told = True
                kept = (f"{self.limit} shapes planned apart, and a range's shapes within "
                        f"{WITHIN_BYTES >> 20} MiB," if self.by_default
                        else f"shape_cache={self.limit}")
                print(f"trainer: dropping the executor of shapes {spell(old)} ({kept} kept "
                      f"besides the first; later ones are dropped without a word)",
                      file=self._progress, flush=True)
        return built

    def _in_range(self, key: ShapeKey, arrays: Sequence[np.ndarray]) -> Built | None:
        """`arrays`' shapes run on the smallest kept range plan that covers them, or None."""
        from planner.pipeline.ranges import covers

        ranges = sorted((b for b in (self.primary, *self._others.values())
                         if b.choices is not None and b.within is None
                         and covers(b.key, key)), key=lambda b: sum(map(math.prod, b.key)))
        if not ranges or self._within is None:
            return None
        built = self._within(ranges[0], arrays)
        if built is not None:
            print(f"trainer: new input shapes {spell(key)}: run on the plan for "
                  f"{spell(ranges[0].key)} (in its range: nothing planned or built)",
                  file=self._progress, flush=True)
        return built

    def _tell_churn(self) -> None:
        """Once, when shapes keep changing beyond any range: the range to declare."""
        if self.churn_told or self.planned < CHURN:
            return
        self.churn_told = True
        largest = tuple(tuple(max(k[i][d] for k in self.distinct if len(k[i]) == len(s))
                              for d in range(len(s))) for i, s in enumerate(self.primary.key))
        print(f"trainer: {len(self.distinct)} distinct input shapes so far, {self.planned} "
              f"planned apart; give the largest up front (trainer(..., shapes=[{spell(largest)}"
              f"] as example arrays, or the largest batch size) and every smaller one runs on "
              f"its plan", file=self._progress, flush=True)

    def add(self, arrays: Sequence[np.ndarray]) -> Built:
        """Plan and build the shapes of `arrays` now (declared up front): a range of exactly
        these shapes where no kept range holds them (not rounded up as a shape met in the
        run is: a declared length is the data's longest, and a power of two past it may be a
        graph of its own, a positional table's whole slice)."""
        key = key_of(arrays)
        if key == self.primary.key or key in self._others:
            return self.get(arrays)
        self._check_ranks(arrays)
        self.distinct.add(key)
        built = self._in_range(key, arrays)
        if built is None:
            print(f"trainer: shapes {spell(key)} declared: planning and building them once, "
                  f"every smaller shape running in their range", file=self._progress,
                  flush=True)
            self._arrays[key] = tuple(arrays)
            built = self._build(arrays)
            self.planned += 1
        return self._keep(key, built)

    def _check_ranks(self, arrays: Sequence[np.ndarray]) -> None:
        for t, a in zip(self.primary.feeds, arrays, strict=True):
            if a.ndim != len(t.shape):
                raise ValueError(f"feed {t.name!r} has shape {list(a.shape)}, rank {a.ndim}; "
                                 f"the trainer's is rank {len(t.shape)} ({list(t.shape)}): a "
                                 f"new batch size or length keeps the rank")

    def run(self, built: Built, call: Callable[[Any], Any]) -> Any:
        """`call(executor)` on `built`'s executor with the run's state, which the primary
        holds again afterwards: handed over where `built` runs on another arena than the
        primary's; on the primary's (a shape in its range), nothing moves but `built`'s own
        constants, loaded before and the range's loaded back after."""
        self.last = built
        if built is self.primary:
            return call(built.executor)
        apart = arena_of(built) != arena_of(self.primary)
        if apart:
            hand_over(self.primary, built, keep=built.own)
        _load(built, built.own)
        try:
            return call(built.executor)
        finally:
            if apart:
                hand_over(built, self.primary, keep=built.own)
            _load(built, built.restore)


def arena_of(built: Built) -> ShapeKey:
    """The shapes of the executor whose arena `built`'s runs on: the range plan's for a shape
    run in its range (they share it), else its own."""
    return built.within if built.within is not None else built.key


def _load(built: Built, values: Mapping[str, np.ndarray]) -> None:
    if values:
        built.executor.load_params(dict(values), partial=True)


def _held_bytes(built: Built) -> int:
    """The bytes an executor holds of its own: its plan's arena, or for a shape run on a range
    plan's arena (shared), what its executor said it held besides (Built.held_bytes)."""
    if built.held_bytes is not None:
        return built.held_bytes
    memory = built.plan.summary.memory
    return memory.arena_bytes if memory is not None else 0
