"""A peak measured under load is never kept as truth (issue 60): `planner target detect` on a busy
machine keeps the quiet measurement's figures; a busy entry is replaced by the first quiet
measurement. The load is injected (the measurement's recorded share of the machine), not made
by loading the machine."""

from __future__ import annotations

import pytest

from planner.target import detect as detect_module
from planner.target.detect import detect
from planner.target.host_cache import HostMeasurement, keep, kept_measurement
from planner.target.load import BUSY

QUIET = HostMeasurement(core_bandwidth=2.0e10, memory_bandwidth=2.2e10, mhz=2400.0,
                        gemm_flops_all_cores=1.5e11, gemm_flops_one_core=7.6e10,
                        date="2026-11-26T06:00:00Z", load=0.05, gemm="torch")
# `planner target detect` at load 8 on the 2-core VM: a third of the quiet GEMM rate.
BUSY_RUN = QUIET.model_copy(update={"gemm_flops_all_cores": 5.4e10, "gemm_flops_one_core": 2.7e10,
                                    "memory_bandwidth": 9.0e9, "load": 3.5,
                                    "date": "2026-11-26T09:19:04Z"})


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    return tmp_path


def test_a_busy_measurement_never_replaces_a_quiet_one(cache):
    kept_measurement("m", lambda: QUIET)
    again = kept_measurement("m", lambda: BUSY_RUN, refresh=True)
    assert again == QUIET
    assert kept_measurement("m", lambda: pytest.fail("read, not measured")) == QUIET


def test_a_quiet_measurement_replaces_a_busy_one_at_the_first_quiet_detection(cache):
    kept_measurement("m", lambda: BUSY_RUN)
    # Still busy: the busy entry is read, not measured again.
    assert kept_measurement("m", lambda: pytest.fail("measured"), quiet=lambda: False) == BUSY_RUN
    quiet_again = QUIET.model_copy(update={"gemm_flops_all_cores": 1.4e11})
    again = kept_measurement("m", lambda: quiet_again, quiet=lambda: True)
    assert again.checked is not None  # when it was tried (host_cache.REMEASURE_SECONDS)
    assert again.model_copy(update={"checked": None}) == quiet_again
    assert kept_measurement("m", lambda: pytest.fail("measured"), quiet=lambda: True) == again


def test_two_busy_measurements_keep_each_rate_at_its_larger():
    other = BUSY_RUN.model_copy(update={"gemm_flops_all_cores": 6.0e10, "memory_bandwidth": 8e9})
    both = keep(BUSY_RUN, other)
    assert both.gemm_flops_all_cores == 6.0e10 and both.memory_bandwidth == 9.0e9
    # An entry from before loads were recorded counts as busy: a quiet run replaces it.
    unknown = BUSY_RUN.model_copy(update={"load": None})
    assert unknown.busy and keep(unknown, QUIET) == QUIET and keep(QUIET, unknown) == QUIET
    assert not QUIET.busy and BUSY_RUN.load > BUSY


def test_detect_at_load_keeps_the_quiet_peak(cache, monkeypatch):
    # The whole command's path: detection measures (here: returns the injected busy run) and
    # the target it gives still holds the quiet peak; its notes say what was kept and why.
    monkeypatch.setattr(detect_module, "_measure", lambda *a, **k: QUIET)
    quiet = detect()
    monkeypatch.setattr(detect_module, "_measure", lambda *a, **k: BUSY_RUN)
    busy = detect(refresh=True)
    assert busy.cpu.peak_flops == quiet.cpu.peak_flops == max(1.5e11, busy.cores * 7.6e10)
    assert busy.cpu.memory_bandwidth == quiet.cpu.memory_bandwidth == 2.2e10
    assert any("torch float32 GEMM 150.0 GFLOP/s" in n and "every figure measured quiet" in n
               for n in busy.notes)
    assert any(n.startswith("figure float32 GEMM, all cores: 150.0 GFLOP/s measured "
                            "2026-11-26T06:00:00Z at load 0.05 (quiet)") for n in busy.notes)


@pytest.mark.parametrize("flags", [frozenset({"avx2", "fma"}),
                                   frozenset({"avx512f", "avx512_bf16"})])
def test_bfloat16_is_measured_only_where_the_isa_computes_it(monkeypatch, flags):
    calls = []

    def fake(n, budget_s, threads=None, dtype="float32", rounds=None):
        calls.append(dtype)
        return 1e11 if dtype == "float32" else 3e11

    monkeypatch.setattr(detect_module, "tuned_gemm", lambda: "torch")
    monkeypatch.setattr(detect_module, "tuned_gemm_flops", fake)
    monkeypatch.setattr(detect_module, "stream_bandwidth", lambda *a, **k: 1e10)
    m = detect_module._measure(2, 2400.0, 0.01, flags)
    native = "avx512_bf16" in flags
    assert calls.count("bfloat16") == int(native)
    assert m.gemm_bf16_flops == (3e11 if native else 0.0)
    assert m.load is not None and m.gemm == "torch"


def test_torch_bfloat16_gemm_runs():
    pytest.importorskip("torch")
    from planner.target.measure import tuned_gemm_flops

    assert tuned_gemm_flops(32, 0.0, threads=1, dtype="bfloat16") > 0
    assert tuned_gemm_flops(32, 0.0, threads=1) > 0
