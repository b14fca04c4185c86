"""A kept host measurement is read as data (planner/target/host_cache.py): implausible values,
values of the wrong type and special files in place of the entry or its lock are refused in one
line naming the file, the field and `planner target detect`, without blocking; a plan is never
made from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli.main import main
from planner.target.detect import detect

ROOT = Path(__file__).resolve().parents[2]
PLAN = ["plan", "zoo:lenet?batch=4&image=16", "--train", "sgd", "--target", "host"]


@pytest.fixture()
def entry(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    detect(budget_s=0.01)
    [path] = sorted((tmp_path / "hosts").glob("*.json"))
    return path


def set_field(path: Path, field: str, value) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, field: value}))


@pytest.mark.parametrize("field, value, says", [
    ("core_bandwidth", 1e-300, "core_bandwidth 1e-300 is not a plausible measurement"),
    ("memory_bandwidth", 1e-300, "memory_bandwidth 1e-300 is not a plausible measurement"),
    ("memory_bandwidth", -5.0, "memory_bandwidth -5.0 is not a plausible measurement"),
    ("gemm_flops_all_cores", 1e300, "gemm_flops_all_cores 1e+300 is not a plausible"),
    ("memory_bandwidth", "12", 'memory_bandwidth: input should be a valid number (got "12")'),
    ("memory_bandwidth", True, "memory_bandwidth: input should be a valid number (got true)"),
    ("loads", {"gemm_flops_all_cores": -1.0}, "loads.gemm_flops_all_cores -1.0 is not a load"),
    ("loads", {"memory_bandwidth": float("nan")}, "loads.memory_bandwidth: input should be a"),
    ("loads", {"x\n": 1.0}, "loads.'x\\n' is not a measured figure (one of core_bandwidth"),
    ("dates", {"memory_bandwidth": 5}, "dates.memory_bandwidth: input should be a valid string"),
])
def test_an_implausible_kept_value_is_refused_naming_the_file_and_field(
        entry, field, value, says, capsys):
    set_field(entry, field, value)
    assert main([*PLAN, "-o", str(entry.parent.parent / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err, err
    assert str(entry) in err and "planner target detect" in err
    assert not (entry.parent.parent / "p.json").exists()


def test_unmeasured_zeros_are_read(entry):
    set_field(entry, "gemm_flops_one_core", 0.0)
    set_field(entry, "mhz", 0.0)
    assert detect(budget_s=0.01).cpu.peak_flops > 0


def run_plan(env_cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli", *PLAN,
                           "-o", str(env_cache / "p.json")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120,
                          env={**os.environ, "PLANNER_CACHE": str(env_cache)})


def test_a_fifo_in_place_of_the_entry_is_refused_without_blocking(entry):
    entry.unlink()
    os.mkfifo(entry)
    out = run_plan(entry.parent.parent)
    assert out.returncode == 2, out.stderr
    assert f"host measurement {entry}: is not a regular file" in out.stderr
    # detect measures again and replaces it with a file
    detect(budget_s=0.01, refresh=True)
    assert entry.is_file()


def test_a_fifo_in_place_of_the_entrys_lock_is_refused_without_blocking(entry):
    lock = entry.parent / f".{entry.name}.lock"
    lock.unlink(missing_ok=True)
    os.mkfifo(lock)
    out = run_plan(entry.parent.parent)
    assert out.returncode == 2, out.stderr
    assert f"{lock}: lock file is not a regular file" in out.stderr
