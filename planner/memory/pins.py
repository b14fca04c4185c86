"""The user's memory decisions, applied to the budget search's state before it searches:

    keep T        T is never offloaded nor dropped (its offload and the recompute segment
                  that holds it are taken out of the search's moves)
    recompute P   every droppable tensor named P or under module path P/ is recomputed (its
                  segment's move applied first); checkpoints under P stay, as the inputs of
                  torch.utils.checkpoint's blocks do; an exact tensor name that is a
                  checkpoint is refused
    offload P     every offloadable checkpoint named P or under P/ goes to the host store
    region P: B   the live bytes of the tensors under P (and their recomputed copies) stay
                  at most B: the cheapest moves on the region's own tensors where its bytes
                  peak, until they fit

The longest matching pin decides a tensor (`--recompute layer1 --keep-tensor layer1/relu`
keeps that one); two pins of one name that disagree are refused, as is a decision the state
cannot take, in one line naming the pin and the tensor. The forced moves enter the search's
log like its own, so `planner explain` prices them the same way.

Example:
    >>> pin_of({"a/b/c": 0, "a/x": 0}, (Pin(decision="recompute", name="a"),
    ...                                  Pin(decision="keep", name="a/b/c")))
    {'a/b/c': Pin(decision='keep', name='a/b/c'), 'a/x': Pin(decision='recompute', name='a')}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from planner.errors import UserError
from planner.memory.budget.search import Move, State
from planner.memory.options import Pin, RegionBudget


def under(prefix: str, tensor: str) -> bool:
    """Whether `tensor` is `prefix` or lies under module path `prefix/`.

    >>> under("layer1", "layer1/relu"), under("layer1", "layer10/relu")
    (True, False)
    """
    return tensor == prefix or tensor.startswith(prefix + "/")


def pin_of(tensors: Iterable[str], pins: tuple[Pin, ...]) -> dict[str, Pin]:
    """The pin deciding each tensor (the longest matching name); UserError for two pins of one
    name that disagree."""
    by_name: dict[str, Pin] = {}
    for p in pins:
        other = by_name.get(p.name)
        if other is not None and other.decision != p.decision:
            raise UserError(f"conflicting decisions for {p.name!r}: {other.decision} and "
                            f"{p.decision}")
        by_name[p.name] = p
    out = {}
    for t in tensors:
        matching = [p for name, p in by_name.items() if under(name, t)]
        if matching:
            out[t] = max(matching, key=lambda p: len(p.name))
    return out


def apply_pins(state: State, pins: tuple[Pin, ...]) -> None:
    """Freeze the kept, apply the recomputes and offloads (module docstring)."""
    if not pins:
        return
    st = state.stash
    decided = pin_of(sorted(st.uses), pins)
    for p in pins:
        if not any(q is p or q == p for q in decided.values()):
            raise UserError(f"--{_flag(p)} {p.name}: no activation of the graph is named so or "
                            f"lies under it (or a longer pin decides each one)")
    segment_of = {t: g for g in st.segments for t in g.members}
    for t, p in sorted(decided.items()):
        if p.decision == "keep":
            if t in state.off_index:
                state.off_frozen[state.off_index[t]] = True
            if t in segment_of:
                state.seg_frozen[segment_of[t].id] = True
    for p in pins:
        mine = sorted(t for t, q in decided.items() if q == p)
        if p.decision == "recompute":
            droppable = [t for t in mine if t in segment_of and t in st.stashed]
            if not droppable or (p.name in st.uses and p.name not in segment_of):
                name = p.name if p.name in st.uses else f"anything under {p.name!r}"
                raise UserError(f"--recompute {p.name}: cannot recompute {name}: a checkpoint "
                                f"(made by a convolution or matrix product, read by several "
                                f"ops, or updated in place) or not read by backward; keep or "
                                f"offload it")
            for g in sorted({segment_of[t].id for t in droppable}):
                if state.seg_frozen[g]:
                    kept = sorted(t for t in st.segments[g].members
                                  if decided.get(t, p).decision == "keep")
                    raise UserError(f"--recompute {p.name} conflicts with --keep-tensor "
                                    f"{kept[0]}: they are recomputed together (one segment)")
                if not state.seg_active[g]:
                    state.apply(Move("recompute", segment=g, cost=float(state.seg_seconds[g]),
                                     saving=0, bound=int(state.seg_bound[g]),
                                     reason=f"--recompute {p.name}"))
        elif p.decision == "offload":
            movable = [t for t in mine if t in state.off_index]
            if not movable or (p.name in st.uses and p.name not in state.off_index):
                name = p.name if p.name in st.uses else f"anything under {p.name!r}"
                raise UserError(f"--offload {p.name}: cannot offload {name}: not a checkpoint "
                                f"that backward reads (recompute it instead)")
            for t in movable:
                if state.mode.get(t) == "drop":
                    raise UserError(f"--offload {p.name}: {t} is recomputed by another pin")
                i = state.off_index[t]
                release = int(state.off_hide_release[i])
                fetch = max(int(state.off_hide_fetch[i]), release)
                state.apply(Move("offload", tensor=t, release=release, fetch=fetch,
                                 cost=float(2 * state.off_copy[i]), saving=0,
                                 bound=int(state.off_bytes[i]), reason=f"--offload {p.name}"))


def region_profile(state: State, names: set[str]) -> np.ndarray:
    """Live bytes over keys of the tensors `names` and their recomputed copies."""
    st = state.stash
    out = np.zeros(st.keys, dtype=np.int64)
    for t in names:
        for a, z in state.spans.get(t, []):
            out[a:z + 1] += st.uses[t].bytes
    for g in st.segments:
        if state.seg_active[g.id]:
            for c in g.copies:
                if c.tensor in names:
                    out[c.first:c.last + 1] += c.bytes
    return out


def meet_regions(state: State, regions: tuple[RegionBudget, ...]) -> None:
    """Apply the cheapest moves on each region's tensors until its live bytes fit its budget;
    UserError naming the region when no move lowers its peak."""
    st = state.stash
    for r in regions:
        names = {t for t in st.uses if under(r.prefix, t)}
        if not names:
            raise UserError(f"--region-budget {r.prefix}: no activation of the graph lies "
                            f"under it")
        while True:
            profile = region_profile(state, names)
            peak = int(profile.max(initial=0))
            if peak <= r.bytes:
                break
            key = int(np.argmax(profile))
            moves = [m for m in state.moves_at(key) if _touches(state, m, names)]
            if not moves:
                raise UserError(f"--region-budget {r.prefix}: its activations stay at {peak} "
                                f"bytes, above {r.bytes}, with every recompute and offload "
                                f"the pins allow")
            best = min(moves, key=lambda m: (m.cost / max(m.saving, 1), -m.saving, m.kind,
                                             m.tensor, m.segment))
            state.apply(replace(best, reason=f"--region-budget {r.prefix}"))


def _touches(state: State, m: Move, names: set[str]) -> bool:
    if m.kind == "offload":
        return m.tensor in names
    return any(t in names for t in state.stash.segments[m.segment].stashed)


def check_pins_name_tensors(tensors: Iterable[str], pins: tuple[Pin, ...]) -> None:
    """UserError for a pin naming no tensor of the graph (nor a module path one lies under):
    checked for every plan, so a kept name the graph lacks is refused as a recomputed or
    offloaded one is, also where no budget search runs to apply it.

    >>> check_pins_name_tensors(["fc1/relu"], (Pin(decision="keep", name="fc1"),))
    >>> check_pins_name_tensors(["fc1/relu"], (Pin(decision="keep", name="fc2"),))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    planner.errors.UserError: --keep-tensor fc2: no activation nor other tensor of the graph is ...
    """
    names = list(tensors)
    for p in pins:
        if not any(under(p.name, t) for t in names):
            raise UserError(f"--{_flag(p)} {p.name}: no activation nor other tensor of the "
                            f"graph is named so or lies under it")


def _flag(p: Pin) -> str:
    return "keep-tensor" if p.decision == "keep" else p.decision
