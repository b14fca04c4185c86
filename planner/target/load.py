"""How busy the machine is: the other processes' share of it, while this one measures.

A measurement taken while other processes run is slower than the machine is: the cost store
(planner.costs.host_costs) and host detection (planner.target.host_cache) record each
measurement's load and never keep a busy one as truth. The load is the other processes'
runnable threads per logical CPU over the measurement's own stretch (CpuClock, from
/proc/stat's counters), not the lagging 1-minute load average (`load_now`, the fallback and the
quick check before measuring again).
"""

from __future__ import annotations

import os
import time

from planner.ir.record import Record

# Above this load (the other processes' runnable threads per logical CPU) a measurement is
# taken on a busy machine: kept until the machine is quiet, then measured again.
BUSY = 0.25


def load_now() -> float:
    """The other processes' runnable threads per logical CPU, from the 1-minute load average
    less this process's one runnable thread: whether the machine is quiet enough to measure
    again (module docstring); a lagging figure, so a measurement records its own (CpuClock)."""
    cpus = os.cpu_count() or 1
    return round(max(0.0, os.getloadavg()[0] - 1.0) / cpus, 3)


class CpuTimes(Record):
    """Seconds of CPU time since boot: every CPU's busy time (`machine`, steal included) and
    this process's own (`own`: its threads' and its finished children's, the builds')."""

    machine: float
    own: float


def cpu_times(stat: str | None = None) -> CpuTimes | None:
    """The counters now, from /proc/stat's first line (`stat`: its text, for a test); None
    where there is none (not Linux).

    Example (user nice system idle iowait irq softirq steal, in clock ticks):
        >>> t = cpu_times("cpu  300 0 100 5000 7 0 0 100 0 0\\n")
        >>> t.machine == 500 / os.sysconf("SC_CLK_TCK")
        True
    """
    if stat is None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                stat = f.readline()
        except OSError:
            return None
    fields = stat.split()
    if len(fields) < 9 or not stat.startswith("cpu "):  # the all-CPU line, not "cpu0"
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    t = os.times()
    return CpuTimes(machine=(user + nice + system + irq + softirq + steal)
                    / os.sysconf("SC_CLK_TCK"),
                    own=t.user + t.system + t.children_user + t.children_system)


def others_share(before: CpuTimes, after: CpuTimes, seconds: float, cpus: int) -> float:
    """The other processes' share of the machine between two readings `seconds` apart: their
    CPU time (the machine's busy time less ours) per logical CPU and second, as a load.

    Example (a neighbour held one of two CPUs for the 2 s, we used 1.5 CPU-seconds):
        >>> a, b = CpuTimes(machine=10.0, own=1.0), CpuTimes(machine=13.5, own=2.5)
        >>> others_share(a, b, 2.0, 2)
        0.5
    """
    if seconds <= 0:
        return 0.0
    others = (after.machine - before.machine) - (after.own - before.own)
    return round(max(0.0, others) / (seconds * max(1, cpus)), 3)


# Below this fraction of its threads' wall time on a CPU, a measurement waited for one: the
# scheduler gave the rest to other processes (runnable beside it, above the CPUs' count). At
# 0.8, `waited_load` says BUSY for threads on every CPU: the thresholds agree.
RAN = 0.8


def waited_load(ran: float, threads: int, cpus: int) -> float:
    """The other processes' runnable threads per logical CPU, from the fraction `ran` of its
    `threads` threads' wall time this process spent on a CPU: the scheduler shares the CPUs
    evenly, so each of R runnable threads runs cpus / R of the time, and R - threads of them
    are the others'. 0.0 where it ran (RAN): the others then fit beside it (`others_share`).

    Unlike the others' CPU share (at most the CPUs there are: "load 0.90" at a load average of
    12 on two CPUs), this grows with the queue: a measurement that ran a fifth of its time
    beside 8 others' threads on 2 CPUs says so.

    Example (two threads on two CPUs ran a fifth of the time: ten runnable, eight others'):
        >>> waited_load(0.2, 2, 2), waited_load(0.85, 2, 2)
        (4.0, 0.0)
    """
    if ran >= RAN:
        return 0.0
    return round(max(0.0, 1.0 / max(ran, 1e-3) - threads / max(1, cpus)), 3)


class CpuClock:
    """The other processes' share of the machine over a stretch of this one's work:

        clock = CpuClock()
        ...  # measure
        load = clock.share()   # None where the counters are missing
        load = clock.load(2)   # and what the wait for a CPU of its 2 threads says
    """

    def __init__(self) -> None:
        self._start, self._t0 = cpu_times(), time.monotonic()
        self._own0 = time.process_time()  # this process's threads, to the nanosecond

    def share(self) -> float | None:
        end = cpu_times()
        if self._start is None or end is None:
            return None
        return others_share(self._start, end, time.monotonic() - self._t0,
                            os.cpu_count() or 1)

    def load(self, threads: int, ran: float | None = None) -> float | None:
        """The load over the stretch, for work running `threads` threads: the larger of the
        others' share of the CPUs and what this process's own CPU time says it waited
        (`waited_load`; `ran`: the fraction of its threads' time on a CPU where the work
        counted it, else over the whole stretch); None where the counters are missing."""
        end, seconds = cpu_times(), time.monotonic() - self._t0
        if self._start is None or end is None or seconds <= 0:
            return None
        cpus = os.cpu_count() or 1
        if ran is None:
            ran = (time.process_time() - self._own0) / (seconds * max(1, threads))
        return max(others_share(self._start, end, seconds, cpus),
                   waited_load(ran, threads, cpus))
