"""Figures the host can trust (issue 89): each bandwidth and GEMM rate detection keeps carries
its own load and date; a busy, slower figure never replaces a quiet one, a busy-only figure is
marked busy and measured again when the machine is quiet, and a busy machine does not pass for
a slow one: beside neighbours the one-thread rounds count this process's CPU time, so the
float32 peak stays within 25% of the quiet one. Measuring again moves the figures, never the
host's identity: the kernel times kept under its key stay. A busy machine is faked by
stretching each round's wall time (what the scheduler gives other processes) and by the load
the clock reports; the GEMMs and streams themselves run."""

from __future__ import annotations

import datetime

import pytest

from planner.cli.main import main
from planner.cli.target import describe
from planner.costs.host_costs import host_key, host_table, store_path
from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.target import detect as detect_module
from planner.target import load as load_module
from planner.target import measure as measure_module
from planner.target.detect import detect
from planner.target.host_cache import RATES, HostMeasurement, keep, kept_measurement
from planner.target.load import BUSY, CpuClock
from planner.zoo import build

EARLY, LATE = "2026-11-28T10:00:00Z", "2026-11-28T12:00:00Z"
KEPT = HostMeasurement(core_bandwidth=6e9, memory_bandwidth=8e9, gemm_flops_one_core=1.4e11,
                       gemm_flops_all_cores=2.6e11, mhz=2400.0, date=EARLY, load=4.0,
                       gemm="torch", dates={f: EARLY for f in RATES[:4]},
                       loads={"core_bandwidth": 0.1, "memory_bandwidth": 0.1,
                              "gemm_flops_one_core": 0.1, "gemm_flops_all_cores": 4.0})


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    return tmp_path


def test_each_figure_is_kept_by_its_own_load():
    # The next run: bandwidth busy and slower, the all-core GEMM quiet and slower.
    new = KEPT.model_copy(update={
        "memory_bandwidth": 3.2e9, "gemm_flops_all_cores": 2.2e11, "date": LATE,
        "loads": {**KEPT.loads, "memory_bandwidth": 6.0, "gemm_flops_all_cores": 0.05},
        "dates": {f: LATE for f in KEPT.dates}})
    both = keep(KEPT, new)
    assert both.memory_bandwidth == 8e9 and both.load_of("memory_bandwidth") == 0.1
    assert both.date_of("memory_bandwidth") == EARLY
    assert both.gemm_flops_all_cores == 2.2e11 and both.load_of("gemm_flops_all_cores") == 0.05
    assert both.date_of("gemm_flops_all_cores") == LATE
    assert not both.busy and KEPT.busy and both.load == 0.1 and both.date == LATE
    # Two busy figures: the faster stays, with its own load and date.
    slower = KEPT.model_copy(update={"gemm_flops_all_cores": 1.1e11, "date": LATE,
                                     "loads": {**KEPT.loads, "gemm_flops_all_cores": 9.0}})
    assert keep(KEPT, slower) is KEPT
    faster = slower.model_copy(update={"gemm_flops_all_cores": 2.9e11,
                                       "dates": {f: LATE for f in KEPT.dates}})
    kept = keep(KEPT, faster)
    assert (kept.gemm_flops_all_cores, kept.load_of("gemm_flops_all_cores")) == (2.9e11, 9.0)
    assert kept.date_of("gemm_flops_all_cores") == LATE and kept.busy
    assert kept.date_of("core_bandwidth") == LATE  # quiet figures: the newer replaces


def test_a_busy_only_figure_is_measured_again_when_quiet(cache):
    kept_measurement("m", lambda: KEPT)
    assert kept_measurement("m", lambda: pytest.fail("measured"), quiet=lambda: False) == KEPT
    quiet = KEPT.model_copy(update={"gemm_flops_all_cores": 2.7e11, "date": LATE,
                                    "loads": {f: 0.0 for f in KEPT.loads},
                                    "dates": {f: LATE for f in KEPT.dates}})
    again = kept_measurement("m", lambda: quiet, quiet=lambda: True)
    assert not again.busy and again.checked is not None
    assert (again.gemm_flops_all_cores, again.date_of("gemm_flops_all_cores")) == (2.7e11, LATE)
    # The figures kept quiet stay as they were: a quiet measurement's noise does not move them
    # (nor the host's plans) from one process to the next; only `planner target detect`
    # (refresh) measures them again on purpose.
    for figure in ("core_bandwidth", "memory_bandwidth", "gemm_flops_one_core"):
        assert (getattr(again, figure), again.date_of(figure)) == (getattr(KEPT, figure), EARLY)
    assert kept_measurement("m", lambda: pytest.fail("measured"), quiet=lambda: True) == again
    assert kept_measurement("m", lambda: quiet, refresh=True).date_of("core_bandwidth") == LATE


def test_a_figure_that_reads_busy_on_a_quiet_machine_is_not_measured_at_every_start(cache):
    # A bfloat16 GEMM whose own threads make it read busy however quiet the machine is: one
    # try when quiet, then left as it is for REMEASURE_SECONDS.
    busy_bf16 = KEPT.model_copy(update={
        "gemm_bf16_flops": 1e12, "loads": {**{f: 0.0 for f in KEPT.loads},
                                           "gemm_bf16_flops": 1.0},
        "dates": {**KEPT.dates, "gemm_bf16_flops": EARLY}})
    kept_measurement("m", lambda: busy_bf16)
    tried = kept_measurement("m", lambda: busy_bf16.model_copy(update={"date": LATE}),
                             quiet=lambda: True)
    assert tried.busy and tried.checked is not None
    assert kept_measurement("m", lambda: pytest.fail("measured"), quiet=lambda: True) == tried


def fake_machine(monkeypatch, load: float, stretch: float) -> None:
    """Every round's wall time `stretch` times what it took (the others ran meanwhile: this
    process's CPU time is what it was), and the clock's load over each figure `load`."""
    real = measure_module.timed

    def timed(run):
        wall, cpu = real(run)
        return wall * stretch, cpu

    monkeypatch.setattr(measure_module, "timed", timed)
    monkeypatch.setattr(CpuClock, "load", lambda self, threads, ran=None: load)


def test_a_busy_machine_does_not_pass_for_a_slow_one(tmp_path, monkeypatch):
    pytest.importorskip("torch")  # one thread's GEMM through torch.matmul
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path / "quiet"))
    fake_machine(monkeypatch, load=0.0, stretch=1.0)
    # A budget of ~20 GEMM rounds a figure: the best of them is the machine's rate even where
    # a neighbour of the test's own (a shared runner) cuts some rounds short.
    quiet = detect(budget_s=0.3)
    # At load 8: the scheduler gave the others four fifths of every round.
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path / "busy"))
    fake_machine(monkeypatch, load=8.0, stretch=5.0)
    busy = detect(budget_s=0.3)
    assert abs(busy.cpu.peak_flops / quiet.cpu.peak_flops - 1) < 0.25
    marked = [n for n in busy.notes if n.startswith("figure ")]
    assert marked and all("at load 8.00 (busy: measured again when the machine is quiet)" in n
                          for n in marked)
    # The busy-only entry is measured again by the first detection on a quiet machine.
    fake_machine(monkeypatch, load=0.0, stretch=1.0)
    monkeypatch.setattr(detect_module, "load_now", lambda: 0.0)
    again = detect(budget_s=0.1)
    assert all("at load 0.00 (quiet)" in n for n in again.notes if n.startswith("figure "))
    assert not any("busy" in n for n in again.notes if n.startswith("figure "))


def test_the_figures_shown_carry_their_load_and_age(cache, monkeypatch, capsys):
    monkeypatch.setattr(detect_module, "_measure", lambda *a, **k: KEPT)
    text = describe(detect(), now=datetime.datetime(2026, 11, 28, 13, 30, tzinfo=datetime.UTC))
    assert ("note: figure float32 GEMM, all cores: 260.0 GFLOP/s measured 2026-11-28T10:00:00Z "
            "(3.5 h ago) at load 4.00 (busy: measured again when the machine is quiet)") in text
    assert ("note: figure streaming, one core: 6.0 GB/s measured 2026-11-28T10:00:00Z (3.5 h ago)"
            " at load 0.10 (quiet)") in text
    assert "measured busy: float32 GEMM, all cores" in text and KEPT.load_of(
        "gemm_flops_all_cores") > BUSY
    # The command prints them with their age at the time shown.
    assert main(["target", "show", "host"]) == 0
    shown = capsys.readouterr().out
    assert "measured 2026-11-28T10:00:00Z (" in shown and " ago) at load 4.00 (busy" in shown
    assert f"  machine       {detect().cpu.machine[:16]} (the identity" in shown


def test_the_wait_for_a_cpu_marks_a_figure_busy_where_the_others_share_does_not(monkeypatch):
    # The others' CPU share says quiet (it cannot pass the CPUs there are: "load 0.90" at a
    # load average of 12); the rounds' own CPU time, a fifth of their wall time, says busy.
    pytest.importorskip("torch")
    real = measure_module.timed
    monkeypatch.setattr(measure_module, "timed", lambda run: (lambda w, c: (5 * w, c))(*real(run)))
    monkeypatch.setattr(load_module, "others_share", lambda *a: 0.0)
    m = detect_module._measure(2, 2400.0, 0.05)
    for f in ("gemm_flops_one_core", "gemm_flops_all_cores"):
        assert m.load_of(f) > 3.5 and m.busy_figure(f), (f, m.load_of(f))
    assert m.busy and m.load >= m.load_of("gemm_flops_all_cores")


def test_measuring_again_keeps_the_host_key_and_its_store(cache, monkeypatch):
    """The host is what the machine is, not what it measured: its figures measured busy, then
    again on a quiet machine, move its peaks, and the kernels' times kept under its key (the
    cost store) are the ones the quiet target reads: nothing is measured again."""
    graph = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=4, classes=2),
                                Optimizer(kind="sgd", lr=0.1))
    asked: list[list[str]] = []

    def measure(signatures, target, progress=None):  # the kernels' times as a run reports
        asked.append([s.key for s in signatures])
        return CostTable(target="host", entries=tuple(CostEntry(signature=s, cpu=(
            CpuSample(threads=1, affinity="compact", seconds=1e-5),)) for s in signatures))

    # Busy: the others slowed this process's own CPU time too (sharing its cores' caches and
    # the memory), so even the one-thread GEMM's rate is a tenth of the machine's.
    real = measure_module.timed
    monkeypatch.setattr(measure_module, "timed", lambda run: (lambda w, c: (10 * w, 10 * c))(
        *real(run)))
    monkeypatch.setattr(CpuClock, "load", lambda self, threads, ran=None: 8.0)
    busy = detect(budget_s=0.05)
    assert host_table([graph], busy, measure, load=0.0).measured and len(asked) == 1
    monkeypatch.setattr(measure_module, "timed", real)
    monkeypatch.setattr(CpuClock, "load", lambda self, threads, ran=None: 0.0)
    monkeypatch.setattr(detect_module, "load_now", lambda: 0.0)
    quiet = detect(budget_s=0.05)
    assert quiet.cpu.peak_flops > 1.5 * busy.cpu.peak_flops  # measured again, quiet
    assert host_key(quiet) == host_key(busy) and store_path(quiet) == store_path(busy)
    again = host_table([graph], quiet, measure, load=0.0)
    assert again.measured == () and again.kept and len(asked) == 1
    # The kept figures give the same target, byte for byte, until measured again.
    assert detect(budget_s=0.05).to_json() == quiet.to_json()
    # Another machine (another CPU set, ISA, quota: CPU.machine) keeps its own store.
    other = quiet.model_copy(update={"cpu": quiet.cpu.model_copy(update={"machine": "other"})})
    assert host_key(other) != host_key(quiet)
