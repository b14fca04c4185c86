"""cgroup CPU quota on fake trees, and detection under a narrowed affinity mask."""

import os
from pathlib import Path

import pytest

from planner.target.cgroup import cpu_quota
from planner.target.detect import detect


def _tree(tmp_path: Path, self_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self/cgroup").write_text(self_cgroup)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return proc, root


def test_v2_max_is_no_quota(tmp_path):
    proc, root = _tree(tmp_path, "0::/job\n", {"job/cpu.max": "max 100000\n"})
    assert cpu_quota(proc, root)[0] is None


def test_v2_quota_in_cores(tmp_path):
    proc, root = _tree(tmp_path, "0::/job\n", {"job/cpu.max": "150000 100000\n"})
    cores, note = cpu_quota(proc, root)
    assert cores == 1.5 and "1.5 cores" in note


def test_v2_tightest_ancestor_wins(tmp_path):
    proc, root = _tree(tmp_path, "0::/a/b\n",
                       {"a/cpu.max": "50000 100000", "a/b/cpu.max": "max 100000"})
    assert cpu_quota(proc, root)[0] == 0.5


def test_v1_cfs(tmp_path):
    cg = "12:cpu,cpuacct:/docker/x\n3:memory:/docker/x\n"
    proc, root = _tree(tmp_path, cg, {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "300000\n",
                                      "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000\n"})
    assert cpu_quota(proc, root)[0] == 3.0
    (root / "cpu,cpuacct/docker/x/cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_quota(proc, root)[0] is None


@pytest.mark.parametrize("text", ["lots 100000", "150000 0", "1 2 3", "", "-5 100000"])
def test_malformed_is_ignored_with_the_reason(tmp_path, text):
    proc, root = _tree(tmp_path, "0::/job\n", {"job/cpu.max": text})
    cores, note = cpu_quota(proc, root)
    assert cores is None and "ignored" in note and "cpu.max" in note


def test_quota_is_said_in_the_detected_target(tmp_path):
    proc, root = _tree(tmp_path, "0::/job\n", {"job/cpu.max": "50000 100000\n"})
    (proc / "cpuinfo").write_text(Path("/proc/cpuinfo").read_text())
    (proc / "meminfo").write_text(Path("/proc/meminfo").read_text())
    t = detect(measure=False, proc_root=proc, cgroup_root=root, nvidia_smi="/nonexistent")
    assert any("cgroup CPU quota 0.5 cores" in n for n in t.notes)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity API")
def test_narrowed_affinity_detects_one_cpu():
    before = os.sched_getaffinity(0)
    one = min(before)
    try:
        os.sched_setaffinity(0, {one})
        t = detect(measure=False, nvidia_smi="/nonexistent")
    finally:
        os.sched_setaffinity(0, before)
    assert [c.id for c in t.logical_cpus] == [one]
    assert any(n.startswith("granted: 1 logical CPUs") for n in t.notes)
