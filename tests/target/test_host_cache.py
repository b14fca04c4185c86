"""The host measured once: `--target host` reads this machine's kept, rounded measurement, so
the same command gives the same plan; `planner target detect` measures again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.costs.host_costs import host_key
from planner.target.detect import detect
from planner.target.host_cache import HostMeasurement, two_figures
from tests.helpers.host_figures import keep_host_quiet


def kept_files(cache) -> list:
    return sorted((cache / "hosts").glob("*.json"))


def test_detect_measures_once_keeps_rounded_values_and_refresh_measures_again(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    first = detect(budget_s=0.01)
    [entry] = kept_files(tmp_path)
    kept = HostMeasurement.model_validate_json(entry.read_text())
    for v in (kept.core_bandwidth, kept.memory_bandwidth, kept.gemm_flops_all_cores):
        assert v == two_figures(v) > 0
    assert first.cpu.memory_bandwidth == kept.memory_bandwidth
    # A value no machine measures, written into the entry, is what the next detect reads.
    # Written as measured quiet: a busy figure would be measured again on a quiet machine.
    entry.write_text(kept.model_copy(update={"memory_bandwidth": 1.234e9, "load": 0.0,
                                             "loads": dict.fromkeys(kept.loads, 0.0)})
                     .model_dump_json())
    assert detect(budget_s=0.01).cpu.memory_bandwidth == 1.2e9
    fresh = detect(budget_s=0.01, refresh=True)
    assert fresh.cpu.memory_bandwidth > 1e8
    assert HostMeasurement.model_validate_json(entry.read_text()).memory_bandwidth > 1e8


def test_an_unreadable_entry_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    first = detect(budget_s=0.01)
    [entry] = kept_files(tmp_path)
    entry.write_text('{"core_bandwidth": "fast"')
    again = detect(budget_s=0.01)
    assert again.cpu.core_bandwidth > 1e8 and again.name == first.name == "host"
    HostMeasurement.model_validate_json(entry.read_text())  # rewritten whole


def test_another_affinity_is_another_machine(tmp_path, monkeypatch):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no smaller set to pin to")
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    every = detect(budget_s=0.01)
    cpus = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(cpus)})
        one = detect(budget_s=0.01)
    finally:
        os.sched_setaffinity(0, cpus)
    assert len(kept_files(tmp_path)) == 2 and len(one.logical_cpus) == 1
    assert host_key(one) != host_key(every)  # and its kernels' times are kept apart


def test_plan_target_host_twice_gives_byte_identical_plans(tmp_path):
    env = {**os.environ, "PLANNER_CACHE": str(tmp_path / "cache")}
    # Measured here, quickly, and kept as quiet: both commands read what it kept.
    keep_host_quiet(tmp_path / "cache")
    plans = []
    for k in range(2):
        out = tmp_path / f"p{k}.json"
        subprocess.run([sys.executable, "-m", "planner.cli", "plan",
                        "zoo:lenet?batch=4&image=16", "--train", "sgd", "--target", "host",
                        "-o", str(out)], check=True, env=env, capture_output=True)
        plans.append(out.read_bytes())
    assert plans[0] == plans[1]
    assert json.loads(plans[0])["provenance"]["target_sha256"]
    assert len(kept_files(tmp_path / "cache")) == 1

