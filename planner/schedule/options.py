"""The one record of scheduling switches: which strategy, and every heuristic's knob.

Strategies (`planner plan --strategy`):

    uniform    every op on all physical cores, one at a time (TensorFlow's recommended setting:
               intra-op = cores, inter-op = 1), or `intra` threads on `inter` lanes, or the best
               of a grid over both (`grid=True`, the seed's "manual optimization")
    paper      seed 002, Section III-D, Strategies 1-4 as written
    optimized  list scheduling of moldable ops by bottom level with allotments from the lower
               bound's relaxation (CPA-style), allotment refinement, moves of the heaviest ops'
               thread counts, a bounded local search, and one group node per batch of small
               independent same-type ops

Example:
    >>> ScheduleOptions(strategy="paper").candidates
    3
    >>> ScheduleOptions(strategy="uniform", intra=34, inter=2).lanes(68)
    (34, 2)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from planner.ir.graph import Record

Strategy = Literal["uniform", "paper", "optimized"]
STRATEGIES: tuple[Strategy, ...] = ("uniform", "paper", "optimized")

# Two ops sharing a core through its hyper-threads each run this many times slower than alone
# on it. Seed 002, Table III: Conv2DBackpropFilter and Conv2DBackpropInput at 68 threads take
# 41.1 s one after the other and 39.9 s co-run on sibling hyper-threads; the longer of the two
# takes about 20.9 s alone (Table II's 20.3 : 19.6 split of the serial time), so sharing slows
# each by 39.9 / 20.9 = 1.91. A core's two hyper-threads then do 2 / 1.9 = 1.05x the work of one.
# The simulator applies it per thread, while the sibling is busy (planner.schedule.simulate).
SMT_SLOWDOWN = 1.9


class ScheduleOptions(Record):
    """Every switch of every strategy, with its default. Pure data: equal options, equal plans."""

    strategy: Strategy = "optimized"

    # ---- uniform ------------------------------------------------------------------------
    # Threads per op and concurrent lanes; None means all cores and one lane.
    intra: int | None = Field(default=None, ge=1)
    inter: int | None = Field(default=None, ge=1)
    # Try every (intra, inter) with intra * inter <= cores on a coarse grid; keep the fastest.
    grid: bool = False
    # An op the cost model gives less than this on one thread, or (this set) no less on the
    # team than on one thread, runs on one thread (0: every op on the team).
    min_team_seconds: float = Field(default=0.0, ge=0.0)

    # ---- paper (seed 002) ---------------------------------------------------------------
    # Strategy 2: one thread count per op type, from its most expensive instance.
    per_type_threads: bool = True
    # Strategy 3: co-run ready ops in idle cores, from their `candidates` fastest thread counts,
    # kept within `max_thread_change` of Strategy 2's count.
    corun: bool = True
    candidates: int = Field(default=3, ge=1)
    max_thread_change: int = Field(default=2, ge=0)
    # Strategy 4: small ready ops on the hyper-thread siblings of an op that takes all cores.
    hyperthreads: bool = True

    # ---- optimized ----------------------------------------------------------------------
    # Allotment: an op's thread count may be cut until its time is `stretch` x its fastest,
    # which frees cores for co-running ops off the critical path (one candidate of the search,
    # beside `stretches` and the relaxation's allotments).
    stretch: float = Field(default=2.5, ge=1.0)
    # Further stretches to try (none: the relaxation's allotments beat them on the bench's
    # graphs; `stretch` stays as a fallback candidate).
    stretches: tuple[float, ...] = ()
    # Scales of the allotment relaxation's durations to try: below 1, more threads than the
    # relaxation asks for, which packing losses can call for; above 1, fewer, which widening
    # into idle cores makes up for.
    relaxed_scales: tuple[float, ...] = (0.85, 0.95, 1.0, 1.1)
    # Priorities to try on the final allotment besides bottom levels at the allotted times:
    # bottom levels at this blend of those and the relaxation's durations.
    priority_blends: tuple[float, ...] = (0.5,)
    # Rounds of allotment refinement (re-run with the critical path's ops widened).
    refine_rounds: int = Field(default=2, ge=0)
    # Allotment moves: at most this many list schedules, each with the thread count of one op
    # holding >= `move_share` of the work halved, made fastest or raised by half; a move is
    # kept where the step gets shorter. 5% picks LSTM's softmax MatMuls and DCGAN's largest
    # convolutions, none of ResNet's, so the search stays a few list schedules on graphs of
    # many small ops.
    allot_moves: int = Field(default=8, ge=0)
    move_share: float = Field(default=0.05, gt=0.0, le=1.0)
    # Local search: list-schedule again under this many perturbed priority orders; keep the best.
    search_rounds: int = Field(default=1, ge=0)
    # Group at least this many independent ready ops of one signature into one parallel loop.
    group_min: int = Field(default=4, ge=2)
    grouping: bool = True
    # Co-run groups: ready ops that gain little from more threads run side by side as one
    # parallel loop, one op per thread (planner.schedule.optimized); the search runs again
    # with them where its first allotments simulate faster so, and keeps the faster of both.
    corun_groups: bool = True
    # SMT co-running of small ops beside a wide op, as Strategy 4 but only when it shortens.
    smt: bool = True
    # The search's own schedule replaces the best baseline (whole-machine uniform lanes, paper)
    # only when predicted faster by at least this fraction: a measured cost table is as noisy
    # as the runs it came from (repeated in-step profiles of one model differ by a few per
    # cent), and a co-running plan's predicted win below that is a coin toss against the
    # simple plan (DCGAN on two cores: 2.8% predicted, 4% slower measured).
    min_gain: float = Field(default=0.05, ge=0.0, lt=1.0)

    # ---- cost model ---------------------------------------------------------------------
    smt_slowdown: float = Field(default=SMT_SLOWDOWN, ge=1.0)

    @model_validator(mode="after")
    def _uniform_knobs(self) -> ScheduleOptions:
        if self.strategy != "uniform" and (self.intra or self.inter or self.grid
                                           or self.min_team_seconds):
            raise ValueError(f"intra, inter, grid and min_team_seconds are options of strategy "
                             f"'uniform', not of {self.strategy!r}")
        if self.grid and (self.intra or self.inter):
            raise ValueError("grid searches intra and inter itself; give neither with it")
        return self

    def lanes(self, cores: int) -> tuple[int, int]:
        """(threads per op, concurrent lanes) of the uniform strategy on `cores` cores."""
        intra = min(self.intra or cores, cores)
        inter = self.inter or 1
        if intra * inter > cores:
            raise ValueError(f"intra {intra} x inter {inter} threads exceed the {cores} cores")
        return intra, inter
