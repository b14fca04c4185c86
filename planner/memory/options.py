"""The one record of memory-planning switches, each with its default.

Example:
    >>> MemoryOptions(budget_bytes=parse_bytes("11GiB")).budget_bytes
    11811160064
    >>> parse_bytes("1.5 MB"), format_bytes(3 << 30)
    (1500000, '3.00 GiB')
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_serializer

from planner.errors import UserError
from planner.ir.graph import Record
from planner.memory.arena import HEURISTICS

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


Decision = Literal["keep", "recompute", "offload"]


class Pin(Record):
    """A user's decision for the tensor `name`, or the tensors under module path `name/`
    (the longest matching pin decides a tensor: keep one tensor of a recomputed block)."""

    decision: Decision
    name: str = Field(min_length=1)


class RegionBudget(Record):
    """At most `bytes` of live activations under module path `prefix/` at any time."""

    prefix: str = Field(min_length=1)
    bytes: int = Field(gt=0)


class MemoryOptions(Record):
    """Every switch of memory planning. Pure data: equal options, equal plans."""

    # Device bytes the plan may use (None: no limit, liveness and offsets only).
    budget_bytes: int | None = Field(default=None, gt=0)
    # Offsets and sizes are multiples of this (64: a cache line, an AVX-512 vector).
    alignment: int = Field(default=64, ge=1)
    # Allocation heuristics to run (planner.memory.arena); the smallest arena wins.
    heuristics: tuple[str, ...] = tuple(HEURISTICS)

    # ---- under a budget (GPU plans) -------------------------------------------------------
    # Offload checkpoints to pinned host memory (and prefetch them back) where it helps.
    offload: bool = True
    # How dropped segments are recomputed (planner.memory.stash); "off": never recompute.
    recompute: Literal["cost-aware", "speed-centric", "memory-centric", "off"] = "cost-aware"
    # Recompute the outputs of matrix products and convolutions too (OpDef.recompute
    # "expensive"; by default they are checkpoints, Seed 001's rule), where cheap ops alone
    # cannot meet the budget: the search still takes the cheapest seconds per byte first. For
    # a step much faster than the one it is weighed against (ZeRO-3 against FSDP2,
    # bench/bench_fsdp.py's zero3r). Recorded in a plan's provenance only when set.
    recompute_products: bool = False
    # Give each convolution the fastest algorithm whose workspace fits the memory free at its
    # step; False: always the one with the least workspace.
    workspaces: bool = True
    # An infeasible budget's error names the smallest feasible budget by laying out up to this
    # many earlier states of the search (those of least LOAD); 0 names a lower bound on it
    # instead, at no cost (`planner fit`, which only needs "does not fit").
    infeasible_probes: int = Field(default=8, ge=0)
    # The user's decisions (planner.memory.pins), kept or refused in one line; recorded in a
    # plan's provenance only when given (plans made without them read as they did).
    pins: tuple[Pin, ...] = ()
    region_budgets: tuple[RegionBudget, ...] = ()

    @model_serializer(mode="wrap")
    def _without_empty_pins(self, handler):
        data = handler(self)
        for key in ("pins", "region_budgets", "recompute_products"):
            if isinstance(data, dict) and not data.get(key):
                data.pop(key, None)
        return data

    @property
    def forces(self) -> bool:
        """Whether the user's decisions add ops (a recompute, an offload) or bound a region:
        memory planning then runs the budget search's steps even without a budget."""
        return bool(self.region_budgets) or any(p.decision != "keep" for p in self.pins)

    @field_validator("region_budgets")
    @classmethod
    def _one_budget_per_region(cls, v: tuple[RegionBudget, ...]) -> tuple[RegionBudget, ...]:
        prefixes = [r.prefix for r in v]
        twice = sorted({p for p in prefixes if prefixes.count(p) > 1})
        if twice:
            raise ValueError(f"region budget for {twice[0]!r} given twice; give one per "
                             f"module path")
        return v

    @field_validator("heuristics")
    @classmethod
    def _known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [h for h in v if h not in HEURISTICS]
        if unknown or not v:
            raise ValueError(f"unknown allocation heuristic(s) {unknown}; known: "
                             f"{sorted(HEURISTICS)}")
        return v


def parse_budget(text: str, flag: str = "--budget") -> int:
    """parse_bytes for a command-line flag: UserError naming the flag.

    Example:
        >>> parse_budget("4KiB")
        4096
    """
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise UserError(f"{flag}: {e}") from None


def parse_bytes(text: str) -> int:
    """`11GiB`, `12 GB`, `512MiB`, `1e9` -> bytes. ValueError naming the text otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read {text!r} as a byte count (examples: 11GiB, 12GB, "
                         f"512MiB, 1e9)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise ValueError(f"byte count {text!r} must be positive")
    if not value < 2**62:  # inf too: '1e400'
        raise ValueError(f"byte count {text!r} is too large (at most 2^62 bytes)")
    return int(round(value))


def format_bytes(n: float) -> str:
    """Bytes in binary units with two decimals: `3.00 GiB`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError
