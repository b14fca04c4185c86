"""The executor's schedule choice (templates/cpu/runtime/choice.h) driven step by step with
step times of a scripted machine: quiet, then contended (the main schedule's pinned teams
slowed tenfold, the one-core variant 2.7x), then quiet again. Early in a run it measures every
schedule once and keeps the fastest measured (the plan's prediction may misprice the machine);
it moves to the variant within a few steps of the contention, and back to the main schedule
within a few steps of the quiet (not at the next periodic probe, 64 steps on); it never runs a
schedule that needs more cores than granted; steady conditions cause no switching. The header
is compiled on its own into a small driver (it has no oneDNN and no threads), so the rule is
tested as the executor runs it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HEADER = Path(__file__).resolve().parents[2] / "templates" / "cpu" / "runtime"
DRIVER = r"""
#include <cstdio>
#include "choice.h"
int main() {
  // main: two pinned cores, predicted 10 ms; cores-1: one unpinned core, predicted 15 ms
  planner::ScheduleChoice c({{"main", 2, 0.010}, {"cores-1", 1, 0.015}});
  int granted;
  double main_s, variant_s;
  while (std::scanf("%d %lf %lf", &granted, &main_s, &variant_s) == 3) {
    int i = c.before_step(granted);
    c.after_step(i == 0 ? main_s : variant_s);
    std::printf("%d\t%s\n", i, c.reason().c_str());
  }
}
"""


@pytest.fixture(scope="module")
def choose(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    folder = tmp_path_factory.mktemp("choice")
    (folder / "driver.cpp").write_text(DRIVER)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{HEADER}", "driver.cpp", "-o", "driver"],
                   cwd=folder, check=True)

    def run(steps: list[tuple[int, float, float]]) -> list[tuple[int, str]]:
        script = "".join(f"{g} {a} {b}\n" for g, a, b in steps)
        out = subprocess.run([str(folder / "driver")], input=script, capture_output=True,
                             text=True, check=True).stdout
        return [(int(i), why) for i, _, why in (line.partition("\t")
                                                for line in out.splitlines())]

    return run


QUIET, BUSY = (2, 0.010, 0.015), (2, 0.100, 0.040)


def test_contention_moves_to_the_variant_and_quiet_moves_back(choose):
    # (100 busy steps: the periodic probe of the main schedule, at step 64, loses and backs
    # off to 128 steps, so only the quiet rule brings it back in time)
    ran = choose([QUIET] * 20 + [BUSY] * 100 + [QUIET] * 30)
    chosen = [i for i, _ in ran]
    # Quiet: the main schedule; eight steps in, the trial: the main schedule measured afresh
    # (three steps), the variant once (a cold step and three measured), slower: back to the
    # main schedule.
    assert chosen[:20] == [0] * 11 + [1] * 4 + [0] * 5, chosen[:20]
    assert "measuring every schedule once" in ran[7][1]
    assert "measured every schedule once: main" in ran[14][1]
    # Busy: the variant within a few steps, for good within ten (the main schedule's moving
    # average lags the contention's first steps, so one comparison may still favour it).
    assert chosen.index(1, 20) - 20 <= 8
    assert chosen[30:120].count(0) <= 4  # the one probe of the main schedule
    back = next(k for k in range(120, 151) if chosen[k:] == [0] * (150 - k)) - 120
    assert back <= 10, ran[120:]
    assert "faster than when it was chosen" in " ".join(why for _, why in ran[120:])


def test_a_schedule_needing_more_cores_than_granted_never_runs(choose):
    ran = choose([QUIET] * 5 + [(1, 0.010, 0.015)] * 20 + [QUIET] * 5)
    assert all(i == 1 for i, _ in ran[5:25])
    assert "granted 1 core(s): main needs 2" in ran[5][1]


def test_steady_conditions_do_not_switch(choose):
    ran = choose([BUSY] * 10 + [BUSY] * 200)
    chosen = [i for i, _ in ran]
    settled = chosen[10:]
    # On the variant, with the trial's measurement of the main schedule and a probe of it now
    # and then (64 steps, then 128: backing off while probes lose), each 4 steps long.
    assert settled.count(0) <= 3 * 4 and settled[-1] == 1


MISPRICED = (2, 0.0125, 0.011)  # main predicted 10 ms, runs 12.5; the variant 15, runs 11


def test_a_schedule_mispriced_by_the_plan_gives_way_to_the_measured_fastest(choose):
    ran = choose([MISPRICED] * 300)
    chosen = [i for i, _ in ran]
    assert chosen[:11] == [0] * 11 and chosen[11:15] == [1] * 4
    # On the variant from then on, but for the periodic probes of the main schedule (at 64
    # steps, then 128: each loses, four steps long).
    settled = chosen[15:]
    assert settled.count(0) <= 3 * 4 and settled[-1] == 1, chosen


def test_the_trial_measures_the_running_schedule_afresh_and_keeps_it_within_the_margin(choose):
    # The run's first steps are slow (pages, teams): measured then, the main schedule (30 ms)
    # would lose to the variant measured after it (12 ms) although it runs 10 ms from then on.
    warming = choose([(2, 0.030, 0.012)] * 8 + [(2, 0.010, 0.012)] * 50)
    assert [i for i, _ in warming] == [0] * 11 + [1] * 4 + [0] * 43
    # A variant faster by less than the margin (10.0 ms against 10.5) leaves the fastest
    # predicted schedule running.
    close = choose([(2, 0.0105, 0.0100)] * 50)
    assert [i for i, _ in close] == [0] * 11 + [1] * 4 + [0] * 35
    assert "within the margin of cores-1" in close[14][1]


def test_a_sub_millisecond_step_tries_nothing(choose):
    # Its jitter is as large as any difference between schedules.
    ran = choose([(2, 0.0002, 0.0001)] * 40)
    assert [i for i, _ in ran] == [0] * 40
