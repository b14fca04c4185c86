"""Budgeted decisions on a GPU stream: which checkpoints go to host memory and back, which
segments are recomputed, chosen one at a time where memory peaks.

The state holds every stashed tensor's mode (kept, offloaded, dropped) and, for offloaded ones,
the step whose start frees the device copy (`release`: the copy to the host must be done by
then) and the step before which the copy comes back (`fetch`: the prefetch starts when the
previous step ends). From it follows the exact live-bytes profile over the stream's keys (see
planner.memory.stash), kept up to date as decisions change:

    live
     |        ____                       keep everything (liveness only)
     |    ___/    \\___
     |   /  ..........\\..                 + offload: conv outputs leave between their last
     |  / .'           '.\\                  forward read and their prefetch
     | /.'  ___________  '.\\              + recompute: cheap segments dropped after forward
     |/___.'           '.__\\
     +------ forward ----|---- backward -----> keys

Greedy (`decisions`): take the key where live bytes peak; among the moves that lower it, take
the one of least cost per byte saved there:

    offload T      seconds the copies cannot hide (release before the copy can finish, or a
                   prefetch with too little compute ahead of its reader), plus 1% of the copy
                   time (fewer, larger copies are better); where nothing runs beside a copy
                   (`overlapped=False`: on a CPU a copy takes a core like any op) the full
                   time of both copies
    recompute G    seconds of the segment's recompute ops

The order of moves does not depend on the budget, only where it stops does: at the first state
where the state itself, or one more move from it, fits; then at the cheapest of those
(`cheapest_stop`; the last greedy move may free far more than needed, a cheaper one may do).
So a smaller budget never gets a higher peak: it stops no earlier in the same sequence; if
later, every state it passed over (and each one-move successor) fits no budget below its own
arena, so the larger budget's choice peaks above the smaller budget; if at the same state, the
larger budget chooses the cheapest among more candidates, which either is the smaller budget's
choice or did not fit the smaller budget.

Example:
    >>> from planner.costs import CostModel
    >>> from planner.target import preset
    >>> from planner.schedule.streams import compute_steps
    >>> from planner.memory.stash import analyze
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("alexnet", batch=8, image=63, classes=4),
    ...                         Optimizer(kind="sgd"))
    >>> s = State(analyze(compute_steps(g, CostModel(preset("k40c-12gb")))), 12.6e9)
    >>> before = s.load()
    >>> s.apply(s.best_move())
    >>> s.load() < before
    True
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.memory.stash import Segment, Stash

# Weight of an overlapped copy's time in its cost: offloads are nearly free when hidden.
OFFLOAD_WEIGHT = 0.01
# Fixed time of one host transfer (a DMA setup and its event), seconds.
COPY_LATENCY = 10e-6


@dataclass(frozen=True)
class Move:
    """One decision: offload `tensor` (release before step `release`, prefetch before
    step `fetch`), or recompute segment `segment`."""

    kind: str  # "offload" | "recompute"
    tensor: str = ""
    segment: int = -1
    release: int = -1
    fetch: int = -1
    cost: float = 0.0
    saving: int = 0
    # No key can drop by more than this (the bytes the move frees at most).
    bound: int = 0
    # Why, when the search did not choose it: the user's pin or region budget that forced it.
    reason: str = ""


def source_reads(stash: Stash, segment: Segment) -> dict[str, list[int]]:
    """Per source of `segment` (a tensor its ops read that is not one of its members), the
    keys at which recomputing the segment reads it, in op order: what keeps the source live
    (State.kept_longer)."""
    out: dict[str, list[int]] = {}
    for op in segment.ops:
        for i in op.inputs:
            if i in stash.uses and i not in segment.members:
                out.setdefault(i, []).append(op.key)
    return out


class State:
    """Modes, offload steps and the live-bytes profile over keys (module docstring)."""

    def __init__(self, stash: Stash, link_bandwidth: float, offload: bool = True,
                 recompute: bool = True, host_limit: int | None = None,
                 overlapped: bool = True) -> None:
        self.stash = stash
        st = stash
        self.bandwidth = link_bandwidth
        # Whether copies run beside the compute (a GPU's copy engines) or take its place.
        self.overlapped = overlapped
        # Pinned host bytes offloads may use (counted without reuse: a safe bound).
        self.host_limit = host_limit
        self.host_bytes = 0
        self.allow_offload, self.allow_recompute = offload, recompute
        n = len(st.steps.nodes)
        self.start = np.concatenate(([0.0], np.cumsum(st.steps.seconds)))  # per step (+ end)
        # Graph step of every key (a slot belongs to the step it precedes).
        self.step_of_key = np.zeros(st.keys, dtype=np.int64)
        for s in range(n):
            self.step_of_key[st.group_start[s]: st.key_of_step[s] + 1] = s
        self.profile = np.zeros(st.keys, dtype=np.int64)
        self.mode: dict[str, str] = {}
        self.release: dict[str, int] = {}
        self.fetch: dict[str, int] = {}
        self.extra: dict[str, list[int]] = {}
        self.active: set[int] = set()
        self.spans: dict[str, list[tuple[int, int]]] = {}
        self.log: list[Move] = []
        for t in st.uses:
            self._refresh(t)
        self._offload_table()
        self._segment_windows()

    # ---- lifetimes ------------------------------------------------------------------------
    def key(self, step: int) -> int:
        return self.stash.key(step)

    def writer_key(self, t: str) -> int:
        u = self.stash.uses[t]
        return self.key(u.writer) if u.writer >= 0 else 0

    def backward_keys(self, t: str) -> list[int]:
        u = self.stash.uses[t]
        return [self.key(r) for r in u.backward_reads] + self.extra.get(t, [])

    def forward_last(self, t: str) -> int:
        u = self.stash.uses[t]
        return max([self.writer_key(t)] + [self.key(r) for r in u.forward_reads])

    def lifetime(self, t: str) -> list[tuple[int, int]]:
        """Key intervals [a, z] during which t's device bytes are live."""
        st = self.stash
        u = st.uses[t]
        w, lf = self.writer_key(t), self.forward_last(t)
        bwd = self.backward_keys(t)
        mode = self.mode.get(t, "keep")
        if mode == "drop":
            return [(w, lf)]
        if mode == "offload":
            return [(w, int(st.group_start[self.release[t]]) - 1),
                    (int(st.group_start[self.fetch[t]]), max(bwd))]
        last = max([lf, *bwd, st.keys - 1 if u.output else lf])
        return [(w, last)]

    def kept_longer(self, t: str, read_key: int) -> tuple[int, int] | None:
        """The segment-lifetime rule: a recompute that reads source t at `read_key` keeps t's
        bytes live past its lifetime in this state, over keys [a, z] (None: within it). The
        greedy's windows, `apply` and the MILP that cross-checks them all use this."""
        last = self.lifetime(t)[-1][1]
        return (last + 1, read_key) if read_key > last else None

    def _refresh(self, t: str) -> None:
        for a, z in self.spans.get(t, []):
            self.profile[a:z + 1] -= self.stash.uses[t].bytes
        spans = self.lifetime(t)
        for a, z in spans:
            self.profile[a:z + 1] += self.stash.uses[t].bytes
        self.spans[t] = spans

    def load(self) -> int:
        """LOAD of the current state: the live-bytes peak plus the persistent state."""
        return int(self.profile.max(initial=0)) + self.stash.persistent_bytes

    # ---- offload --------------------------------------------------------------------------
    def copy_seconds(self, t: str) -> float:
        return self.stash.uses[t].bytes / self.bandwidth + COPY_LATENCY

    def _offload_table(self) -> None:
        """Per offloadable checkpoint: the earliest release and latest fetch step, and the
        steps that hide the copies (from the stream's times, recompute ignored)."""
        st = self.stash
        names = sorted((t for t in st.checkpoints if st.uses[t].forward_reads
                        or st.uses[t].writer < 0), key=lambda t: (self.writer_key(t), t))
        self.off_names = names
        self.off_index = {t: i for i, t in enumerate(names)}
        m = len(names)
        self.off_bytes = np.array([st.uses[t].bytes for t in names], dtype=np.int64)
        self.off_copy = np.array([self.copy_seconds(t) for t in names])
        self.off_min_release = np.zeros(m, dtype=np.int64)
        self.off_max_fetch = np.zeros(m, dtype=np.int64)
        self.off_hide_release = np.zeros(m, dtype=np.int64)
        self.off_hide_fetch = np.zeros(m, dtype=np.int64)
        self.off_ready = np.zeros(m)  # when the copy to the host can be done
        self.off_need = np.zeros(m)   # when the first backward reader starts
        self.off_release = np.full(m, -1, dtype=np.int64)  # -1: not offloaded
        self.off_fetch = np.full(m, -1, dtype=np.int64)
        self.off_name_rank = np.argsort(np.argsort(np.array(names, dtype=object)))
        # Pinned to stay on the device by the user (planner.memory.pins): never a move.
        self.off_frozen = np.zeros(m, dtype=bool)
        for t in names:
            self._offload_row(t)

    def _offload_row(self, t: str) -> None:
        i = self.off_index[t]
        u = self.stash.uses[t]
        last_fwd_step = int(self.step_of_key[self.forward_last(t)]) if u.forward_reads else -1
        first_bwd_step = int(self.step_of_key[min(self.backward_keys(t))])
        written = self.start[u.writer + 1] if u.writer >= 0 else 0.0
        ready = written + self.off_copy[i]
        need = self.start[first_bwd_step]
        lo = last_fwd_step + 1
        hide_release = max(lo, int(np.searchsorted(self.start[:-1], ready, side="left")))
        latest = int(np.searchsorted(self.start[:-1], need - self.off_copy[i], side="right")) - 1
        self.off_min_release[i] = lo
        self.off_max_fetch[i] = first_bwd_step
        self.off_hide_release[i] = min(hide_release, first_bwd_step)
        self.off_hide_fetch[i] = max(min(latest, first_bwd_step), lo)
        self.off_ready[i], self.off_need[i] = ready, need

    def _stall(self, i: np.ndarray, release: np.ndarray, fetch: np.ndarray) -> np.ndarray:
        """Seconds the copies of offloadable tensors `i` cannot hide with these steps."""
        return (np.maximum(0.0, self.off_ready[i] - self.start[release])
                + np.maximum(0.0, self.off_copy[i] - (self.off_need[i] - self.start[fetch])))

    def _offload_candidates(self, s: int):
        """(indices, release, fetch, cost) of the offload moves that lower key s."""
        gs = self.stash.group_start
        step = int(self.step_of_key[s])
        cur_r, cur_f = self.off_release, self.off_fetch
        offloaded = cur_r >= 0
        # Offloaded ones not covering s are moves too (release earlier / fetch later).
        covered = offloaded & (gs[np.maximum(cur_r, 0)] <= s) & (s < gs[np.maximum(cur_f, 0)])
        ok = (gs[self.off_min_release] <= s) & (s < gs[self.off_max_fetch]) & ~covered \
            & ~self.off_frozen
        if self.host_limit is not None:
            ok &= offloaded | (self.host_bytes + self.off_bytes <= self.host_limit)
        i = np.nonzero(ok)[0]
        was = offloaded[i]
        release = np.minimum(np.where(was, cur_r[i], self.off_hide_release[i]), step)
        fetch = np.maximum(np.where(was, cur_f[i], self.off_hide_fetch[i]), step + 1)
        if not self.overlapped:
            # Nothing hides a copy: a new offload costs both copies, moving one costs nothing.
            return i, release, fetch, np.where(was, 0.0, 2 * self.off_copy[i])
        old = np.where(was, self._stall(i, np.maximum(cur_r[i], 0), np.maximum(cur_f[i], 0)),
                       -OFFLOAD_WEIGHT * self.off_copy[i])
        cost = np.maximum(0.0, self._stall(i, release, fetch) - old)
        return i, release, fetch, cost

    def _offload_move(self, s: int) -> Move | None:
        if not self.allow_offload or not self.off_names:
            return None
        i, release, fetch, cost = self._offload_candidates(s)
        if not len(i):
            return None
        saving = self.off_bytes[i]
        # Least cost per byte, then the larger saving, then the name (as _better orders).
        k = np.lexsort((self.off_name_rank[i], -saving, cost / saving))[0]
        return Move("offload", tensor=self.off_names[int(i[k])], release=int(release[k]),
                    fetch=int(fetch[k]), cost=float(cost[k]), saving=int(saving[k]),
                    bound=int(saving[k]))

    # ---- recompute ------------------------------------------------------------------------
    def _segment_windows(self) -> None:
        """Static windows (lo, hi, bytes) of each segment's effect on the profile, measured
        against the state where everything is kept: dropped members save after their last
        forward read, copies cost while they live, sources cost where they must now last."""
        st = self.stash
        lo, hi, size, seg = [], [], [], []
        for g in st.segments:
            for t in g.stashed:
                a, z = self.forward_last(t) + 1, max(self.backward_keys(t))
                lo.append(a), hi.append(z), size.append(st.uses[t].bytes), seg.append(g.id)
            for c in g.copies:
                lo.append(c.first), hi.append(c.last), size.append(-c.bytes), seg.append(g.id)
            for i, keys in source_reads(st, g).items():
                span = self.kept_longer(i, max(keys))
                if span is not None:
                    lo.append(span[0]), hi.append(span[1]), size.append(-st.uses[i].bytes)
                    seg.append(g.id)
        self.win_lo, self.win_hi = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
        self.win_bytes, self.win_seg = np.array(size, dtype=np.int64), np.array(seg,
                                                                                dtype=np.int64)
        self.seg_seconds = np.array([g.seconds for g in st.segments])
        # The most a segment can lower any key: the bytes of the members it drops.
        self.seg_bound = np.array([sum(st.uses[t].bytes for t in g.stashed)
                                   for g in st.segments], dtype=np.int64)
        self.seg_active = np.zeros(len(st.segments), dtype=bool)
        # Segments holding a tensor the user pinned to be kept: never recomputed.
        self.seg_frozen = np.zeros(len(st.segments), dtype=bool)

    def _recompute_saving(self, s: int) -> np.ndarray:
        """Per segment, the bytes recomputing it saves at key s (0 for active ones)."""
        inside = (self.win_lo <= s) & (s <= self.win_hi)
        saving = np.bincount(self.win_seg[inside], weights=self.win_bytes[inside],
                             minlength=len(self.stash.segments))
        saving[self.seg_active | self.seg_frozen] = 0
        return saving

    def _recompute_move(self, s: int) -> Move | None:
        st = self.stash
        if not self.allow_recompute or not st.segments:
            return None
        saving = self._recompute_saving(s)
        ids = np.nonzero(saving > 0)[0]
        if not len(ids):
            return None
        cost = self.seg_seconds[ids]
        # Least cost per byte, then the larger saving, then the segment id (as _better).
        k = np.lexsort((ids, -saving[ids], cost / saving[ids]))[0]
        sid = int(ids[k])
        return Move("recompute", segment=sid, cost=float(cost[k]), saving=int(saving[sid]),
                    bound=int(self.seg_bound[sid]))

    def most_at(self, s: int) -> int:
        """The most bytes any single move can free at key s (a bound, cheap to compute)."""
        most = 0
        if self.allow_offload and self.off_names:
            i = self._offload_candidates(s)[0]
            most = int(self.off_bytes[i].max(initial=0))
        if self.allow_recompute and self.stash.segments:
            ids = np.nonzero(self._recompute_saving(s) > 0)[0]
            most = max(most, int(self.seg_bound[ids].max(initial=0)))
        return most

    def moves_at(self, s: int) -> list[Move]:
        """Every move that lowers key s, cheapest first (then by kind, tensor, segment)."""
        out = []
        if self.allow_offload and self.off_names:
            i, release, fetch, cost = self._offload_candidates(s)
            out += [Move("offload", tensor=self.off_names[int(k)], release=int(r),
                         fetch=int(f), cost=float(c), saving=int(self.off_bytes[k]),
                         bound=int(self.off_bytes[k]))
                    for k, r, f, c in zip(i, release, fetch, cost, strict=True)]
        if self.allow_recompute and self.stash.segments:
            saving = self._recompute_saving(s)
            out += [Move("recompute", segment=int(g), cost=float(self.seg_seconds[g]),
                         saving=int(saving[g]), bound=int(self.seg_bound[g]))
                    for g in np.nonzero(saving > 0)[0]]
        return sorted(out, key=lambda m: (m.cost, m.kind, m.tensor, m.segment))

    # ---- the greedy -----------------------------------------------------------------------
    def peak_key(self) -> int:
        return int(np.argmax(self.profile)) if len(self.profile) else 0

    def best_move(self) -> Move | None:
        """The cheapest move per byte saved at the peak key (None: nothing lowers it)."""
        s = self.peak_key()
        moves = [m for m in (self._offload_move(s), self._recompute_move(s)) if m is not None]
        if not moves:
            return None
        best = moves[0]
        for m in moves[1:]:
            if _better(m, best):
                best = m
        return best

    def apply(self, move: Move) -> None:
        st = self.stash
        self.log.append(move)
        if move.kind == "offload":
            t = move.tensor
            if self.mode.get(t) != "offload":
                self.host_bytes += self.stash.uses[t].bytes
            self.mode[t] = "offload"
            self.release[t], self.fetch[t] = move.release, move.fetch
            self._sync_offload(t)
            self._refresh(t)
            return
        g = st.segments[move.segment]
        self.active.add(g.id)
        self.seg_active[g.id] = True
        for t in g.stashed:
            self.mode[t] = "drop"
        touched = set(g.stashed)
        for i, keys in source_reads(st, g).items():
            self.extra.setdefault(i, []).extend(keys)
            touched.add(i)
        for t in sorted(touched):
            if self.mode.get(t) == "offload":
                # The prefetch must now land before the first recompute that reads it.
                first = int(self.step_of_key[min(self.backward_keys(t))])
                self.fetch[t] = min(self.fetch[t], first)
                self.release[t] = min(self.release[t], self.fetch[t])
            if t in self.off_index:
                self._offload_row(t)
                self._sync_offload(t)
            self._refresh(t)
        for c in g.copies:
            self.profile[c.first:c.last + 1] += c.bytes

    def _sync_offload(self, t: str) -> None:
        if t in self.off_index and self.mode.get(t) == "offload":
            i = self.off_index[t]
            self.off_release[i], self.off_fetch[i] = self.release[t], self.fetch[t]

    def clone(self) -> State:
        """An independent copy (far cheaper than building the state again)."""
        other = copy.copy(self)
        for name in ("profile", "off_min_release", "off_max_fetch", "off_hide_release",
                     "off_hide_fetch", "off_ready", "off_need", "off_release", "off_fetch",
                     "seg_active", "off_frozen", "seg_frozen"):
            setattr(other, name, getattr(self, name).copy())
        other.mode, other.release, other.fetch = dict(self.mode), dict(self.release), \
            dict(self.fetch)
        other.extra = {k: list(v) for k, v in self.extra.items()}
        other.spans, other.active, other.log = dict(self.spans), set(self.active), \
            list(self.log)
        return other

    def replay(self, moves: list[Move]) -> None:
        for m in moves:
            self.apply(m)


def cheapest_stop(state: State, budget: int, fits: Callable[[State], bool]) -> State | None:
    """Where a walk along the moves stops for `budget`: the state itself if it fits, else
    the cheapest of its one-move successors at the peak that fits (None: keep walking).

    `fits` is checked only where LOAD <= budget already; successors that cannot reach the
    budget (their move frees too little) are not built. Stopping here keeps the walk
    monotone in the budget: a larger budget stops no later, and every state it passes over
    fits no smaller budget (see the module docstring)."""
    load = state.load()
    if load <= budget and fits(state):
        return state
    need = load - budget
    peak = state.peak_key()
    if state.most_at(peak) < need:
        return None
    for move in state.moves_at(peak):
        if move.bound < need:
            continue
        trial = state.clone()
        trial.apply(move)
        if trial.load() <= budget and fits(trial):
            return trial
    return None


def _better(a: Move, b: Move) -> bool:
    """Least cost per byte saved; then the larger saving; then a fixed order."""
    ka = (a.cost / a.saving, -a.saving, a.kind, a.tensor, a.segment)
    kb = (b.cost / b.saving, -b.saving, b.kind, b.tensor, b.segment)
    return ka < kb
