"""Which way a planned call runs in PyTorch's process: on the plan's lanes or one op at a time
on PyTorch's own OpenMP team (BackendOptions.lanes="measured", the default), whichever this
process measures faster, measured again now and then.

Why measured rather than decided: the lanes are the plan (co-running, each lane's team on its
planned CPUs, the executor's adaptive variants under load), but in PyTorch's process their
OpenMP teams come on top of PyTorch's, and with more OpenMP threads than CPUs libgomp cuts
every team's spinning short: on the quiet 2-core VM mobilenet_v2's forward call took 23-36 ms on
lanes and 14-15 ms on PyTorch's team. Beside busy processes it is the reverse: PyTorch's team
waits at every parallel region for a descheduled thread (a transformer encoder's forward call
150 ms on the team, 12-18 on lanes, load 3). Which wins depends on the model and the machine's
load, both of which the process sees and the planner does not. Both ways run the same kernels
in the same order per lane, so the bits are the same and a switch changes the time only
(tests/test_torch_compile_lanes.py).

The rule (LaneChoice, over samples; StepWay makes a sample of a whole step, one way for all of
a process's measured plans at once):
- the first step on each way is a warm-up (its pages and caches are cold), then MEASURED steps
  on the lanes, then MEASURED on the team (the lanes first: under load the team's first steps
  can take seconds, and only a way measured against another can be dropped early); the faster
  median wins;
- every `probe_every` steps (PROBE_FIRST, doubling to PROBE_LAST while probes lose) the other
  way runs a warm-up and MEASURED steps again; it takes over when its median beats the running
  way's recent median by MARGIN;
- a step of the way being measured that takes ABANDON times what it is measured against ends
  that measurement at once, lost: beside busy processes one forward call on PyTorch's team
  took 2 s where the lanes took 0.05, and a probe must not spend seconds to learn that again.

    >>> c = LaneChoice()
    >>> ways = []
    >>> for seconds in [9.0, 5.0, 5.0, 5.0, 9.0, 2.0, 2.0, 2.0, 2.0]:
    ...     ways.append(c.way()); c.record(ways[-1], seconds)
    >>> ways
    ['lanes', 'lanes', 'lanes', 'lanes', 'team', 'team', 'team', 'team', 'team']
    >>> c.reason
    'team: 2000.0 ms a step against 5000.0 ms on lanes'
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

from planner.runtime.forked import ForkLock

MEASURED = 3
MARGIN = 0.9
ABANDON = 3.0
PROBE_FIRST, PROBE_LAST = 32, 1024
WAYS = ("lanes", "team")


class LaneChoice:
    """The way ("lanes" or "team") the next sample runs, from the samples' measured times
    (module docstring; StepWay's samples are steps). Thread-safe."""

    def __init__(self) -> None:
        self._lock = ForkLock()
        self._current = "lanes"
        self._trying: str | None = "lanes"  # the way being measured (None: settled)
        self._warm = True                    # the next call is a warm-up
        self._times: dict[str, list[float]] = {w: [] for w in WAYS}
        self._recent: deque[float] = deque(maxlen=2 * MEASURED + 1)
        self._since_probe = 0
        self._probe_every = PROBE_FIRST
        self.switches = 0
        self.reason = "lanes: the plan's way, measuring"

    @property
    def running(self) -> str:
        """The way calls run now (the probe's while one is measured); no call counted."""
        return self._trying or self._current

    def way(self) -> str:
        """The way the next call runs."""
        with self._lock:
            if self._trying is None:
                self._since_probe += 1
                if self._since_probe >= self._probe_every:
                    self._since_probe = 0
                    self._trying = _other(self._current)
                    self._times[self._trying] = []
                    self._warm = True
            return self._trying or self._current

    def record(self, way: str, seconds: float) -> None:
        """A call's time on `way` (what way() gave for it)."""
        with self._lock:
            if way != (self._trying or self._current):
                return  # a call that overlapped a switch: counted for neither
            base = self._base()
            if base is not None and seconds > ABANDON * base:
                self._times[way] = [seconds]  # hopeless: no more calls spent on it
                self._settle()
                return
            if self._warm:
                self._warm = False
                return
            if self._trying is None:
                self._recent.append(seconds)
                return
            self._times[way].append(seconds)
            if len(self._times[way]) < MEASURED:
                return
            if way == "lanes" and not self._times["team"]:
                self._trying, self._warm = "team", True  # the first round: now the team
                return
            self._settle()

    def _base(self) -> float | None:
        """What a probe is measured against: the running way's recent calls, or in the first
        round the lanes' measured ones (None while there are none)."""
        if self._trying is None:
            return None
        against = self._recent or self._times[_other(self._trying)]
        return statistics.median(against) if against else None

    def _settle(self) -> None:
        probe = self._trying
        took = statistics.median(self._times[probe])
        first_round = not self._recent
        base = self._base()
        # The first round is a fresh comparison: the faster wins (a tie PyTorch's team: it is
        # what the rest of the process runs on). A later probe must win by the margin.
        won = took < base * (1.0 if first_round else MARGIN)
        self._trying = None
        self._warm = not won  # back to the running way: its first call is cold again
        if won:
            self.switches += probe != self._current
            self._current = probe
            self._probe_every = PROBE_FIRST
            self.reason = f"{probe}: {_ms(took)} a step against {_ms(base)} on {_other(probe)}"
        else:
            self._probe_every = (PROBE_FIRST if first_round
                                 else min(2 * self._probe_every, PROBE_LAST))
            self.reason = f"{self._current}: {_ms(base)} a step against {_ms(took)} on {probe}"
        self._recent.clear()
        self._since_probe = 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _other(way: str) -> str:
    return "team" if way == "lanes" else "lanes"


class StepWay:
    """One way for every measured plan of the process, chosen by LaneChoice from whole steps.

    Why one for all: the ways interact. A plan left on its lanes keeps their OpenMP teams
    alive, and those slow PyTorch's team for every other plan; chosen plan by plan, a forward
    on the team beside a backward on lanes measured both ways as equal (ResNet-18, quiet),
    where all on the team is 1.5x faster than all on lanes. So a sample is a step: the seconds
    of every planned call between two calls of the pacing plan (the first one called; another
    takes over if it is not called for PACE_LOST calls, and the choice starts afresh: its steps
    are not the old ones'), and the way changes only there.

    >>> w = StepWay()
    >>> for _ in range(2 * (MEASURED + 1) + 1):  # forward 1 s, backward 2 s; the team 2x faster
    ...     for plan, seconds in (("fwd", 1.0), ("bwd", 2.0)):
    ...         way = w.way(plan)
    ...         w.record(way, seconds / (2 if way == "team" else 1))
    >>> w.choice.reason
    'team: 1500.0 ms a step against 3000.0 ms on lanes'
    >>> w.steps
    {'lanes': 4, 'team': 5}
    """

    PACE_LOST = 64

    def __init__(self) -> None:
        self._lock = ForkLock()
        self.choice = LaneChoice()
        self._pacing: Any = None
        self._since_pace = 0
        self._way: str | None = None  # the way of the step being summed
        self._seconds = 0.0
        self.steps = {w: 0 for w in WAYS}  # steps begun on each way

    def way(self, plan: Any) -> str:
        """The way a call of `plan` runs now."""
        with self._lock:
            self._since_pace += 1
            if self._pacing is None or self._since_pace > self.PACE_LOST:
                if self._pacing is not None:  # another plan's steps: other times
                    self.choice = LaneChoice()
                self._pacing, self._way = plan, None  # a step half summed is dropped
            if plan == self._pacing:
                self._since_pace = 0
                if self._way is not None:
                    self.choice.record(self._way, self._seconds)
                self._way, self._seconds = self.choice.way(), 0.0
                self.steps[self._way] += 1
            return self._way

    def record(self, way: str, seconds: float) -> None:
        """A call's time on `way` (what way() gave for it)."""
        with self._lock:
            if way == self._way:
                self._seconds += seconds


class ChosenWay:
    """An executor (built concurrent) whose forward calls run the way `ways` gives for `plan`,
    timed for it; everything else is the executor's."""

    def __init__(self, ex: Any, ways: StepWay, plan: Any) -> None:
        self.ex, self.ways, self.plan = ex, ways, plan

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        way = self.ways.way(self.plan)
        if self.ex.concurrent != (way == "lanes"):
            self.ex.set_concurrent(way == "lanes")
        start = time.perf_counter()
        out = self.ex.forward(*args, **kwargs)
        self.ways.record(way, time.perf_counter() - start)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ex, name)
