"""The hill-climbing profiling driver, against fake time_op callables."""

import io

import pytest

from planner.costs import (
    CostEntry,
    CostTable,
    CpuSample,
    OpSignature,
    ProfileOptions,
    hill_climb,
    profile,
)
from planner.target import affinity_cpus, preset

KNL = preset("knl-7250")
XEON = preset("xeon-8180")


def sig(n):
    return OpSignature(op="Relu", shapes=((n,),), dtypes=("float32",))


def test_hill_climb_steps_by_the_interval_and_stops_after_the_first_rise():
    seen = []

    def measure(k):
        seen.append(k)
        return abs(k - 10) + 1.0

    assert hill_climb(measure, 68, 4) == [(1, 10.0), (5, 6.0), (9, 2.0), (13, 4.0)]
    assert seen == [1, 5, 9, 13]


def test_hill_climb_ends_on_the_last_core_when_time_keeps_falling():
    pts = hill_climb(lambda k: 1.0 / k, 28, 8)
    assert [k for k, _ in pts] == [1, 9, 17, 25, 28]
    assert [k for k, _ in hill_climb(lambda k: 1.0 / k, 1, 4)] == [1]
    with pytest.raises(ValueError, match="interval"):
        hill_climb(lambda k: 1.0, 4, 0)


def test_tolerance_lets_the_climb_cross_noise_but_not_a_real_rise():
    wobbly = {1: 10.0, 5: 5.0, 9: 5.1, 13: 4.0, 17: 6.0}
    assert [k for k, _ in hill_climb(wobbly.__getitem__, 17, 4)] == [1, 5, 9]
    assert [k for k, _ in hill_climb(wobbly.__getitem__, 17, 4, tolerance=0.05)] == [
        1, 5, 9, 13, 17]


def test_profile_measures_each_signature_once_on_the_planned_cpus():
    calls = []

    def time_op(s, threads, cpus):
        calls.append((s.key, threads, cpus))
        return s.shapes[0][0] * (1 / threads + threads / 100)

    run = profile([sig(100), sig(200), sig(100)], KNL, time_op,
                  ProfileOptions(interval=8, repeats=3), progress=None, date="2025-01-01")
    assert run.complete and run.measured == 2 and run.skipped == 0 and not run.failures
    assert {k for k, _, _ in calls} == {sig(100).key, sig(200).key}
    for _, threads, cpus in calls:
        assert cpus in (affinity_cpus(KNL, threads, "compact"),
                        affinity_cpus(KNL, threads, "spread"))
    entry = run.table.entry(sig(100))
    assert [s.threads for s in entry.cpu if s.affinity == "compact"] == [1, 9, 17]
    assert {s.affinity for s in entry.cpu} == {"compact", "spread"}
    assert all(s.repeats == 3 for s in entry.cpu)
    # One thread is the same placement either way: measured once, stored for both affinities.
    ones = [c for key, k, c in calls if key == sig(100).key and k == 1]
    assert len(ones) == 3  # the repeats of a single placement
    assert run.calls == len(calls)
    assert run.table.provenance[0].date == "2025-01-01"
    assert "interval=8" in run.table.provenance[0].source


def test_profile_takes_the_median_of_the_repeats():
    draws = iter([5.0, 1.0, 3.0] * 100)
    run = profile([sig(1)], XEON, lambda s, k, c: next(draws),
                  ProfileOptions(repeats=3, affinities=("compact",), max_threads=1),
                  progress=None)
    (sample,) = run.table.entry(sig(1)).cpu
    assert sample == CpuSample(threads=1, affinity="compact", seconds=3.0, repeats=3)


def test_signatures_already_in_the_table_are_skipped():
    done = CostTable(target="xeon-8180", entries=(CostEntry(signature=sig(1), cpu=(
        CpuSample(threads=1, affinity="compact", seconds=1.0),)),))
    measured = []
    run = profile([sig(1), sig(2)], XEON, lambda s, k, c: measured.append(s.key) or 1.0 / k,
                  table=done, progress=None)
    assert set(measured) == {sig(2).key} and run.skipped == 1 and run.measured == 1
    assert sig(1) in run.table and sig(2) in run.table


def test_interrupt_keeps_the_finished_signatures_and_checkpoints_each():
    saved = []

    def time_op(s, k, cpus):
        if s == sig(3):
            raise KeyboardInterrupt
        return 1.0 / k

    run = profile([sig(1), sig(2), sig(3), sig(4)], XEON, time_op, progress=None,
                  checkpoint=saved.append)
    assert not run.complete and run.measured == 2
    assert sig(1) in run.table and sig(2) in run.table and sig(3) not in run.table
    assert [len(t) for t in saved] == [1, 2]


def test_a_failing_kernel_is_reported_and_the_rest_measured():
    def time_op(s, k, cpus):
        if s == sig(2):
            raise RuntimeError("no kernel for this shape")
        return 1.0 / k

    run = profile([sig(1), sig(2), sig(3)], XEON, time_op, progress=None)
    assert run.complete and run.measured == 2
    assert run.failures == ((sig(2).key, "RuntimeError: no kernel for this shape"),)


def test_progress_is_reported_per_signature():
    stream = io.StringIO()
    profile([sig(1), sig(2)], XEON, lambda s, k, c: 1.0, progress=stream)
    text = stream.getvalue()
    assert "0/2" in text and "1/2" in text and "2 signature(s) measured" in text


def test_profiling_needs_a_cpu_and_a_matching_table():
    with pytest.raises(ValueError, match="no CPU"):
        profile([sig(1)], preset("h100-80gb"), lambda s, k, c: 1.0, progress=None)
    with pytest.raises(ValueError, match="not target"):
        profile([sig(1)], XEON, lambda s, k, c: 1.0, table=CostTable(target="knl-7250"),
                progress=None)


def test_the_command_exits_1_when_a_signature_was_not_measured(tmp_path, capsys):
    """A table missing a signature prices it analytically: a script chaining `profile` and
    `plan --costs` must see the partial result in the exit code (130 stays 'interrupted')."""
    import argparse

    from planner.cli.costs import report_profile

    def time_op(s, k, cpus):
        if s == sig(2):
            raise RuntimeError("no kernel for this shape")
        return 1.0 / k

    args = argparse.Namespace(output=str(tmp_path / "c.json"), json=False)
    failed = profile([sig(1), sig(2)], XEON, time_op, progress=None)
    assert report_profile(args, failed) == 1
    assert "not measured: " + sig(2).key in capsys.readouterr().err
    clean = profile([sig(1)], XEON, lambda s, k, c: 1.0, progress=None)
    assert report_profile(args, clean) == 0
