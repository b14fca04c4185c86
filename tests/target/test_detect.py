"""Host detection: parsing on fake /sys and /proc trees, nvidia-smi output, and this host."""

import os
import stat
import sys

import pytest

from planner.target.detect import (
    CudaProps,
    detect,
    detect_gpus,
    parse_cpu_list,
    parse_cpuinfo,
    parse_nvidia_smi,
    parse_size,
    read_topology,
)


def test_cpu_lists_and_cache_sizes_parse():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("5") == [5]
    assert parse_size("32K") == 32 << 10 and parse_size("36608K\n") == 36608 << 10
    assert parse_size("2M") == 2 << 20
    with pytest.raises(ValueError, match="cache size"):
        parse_size("lots")


def test_cpuinfo_blocks_parse_by_processor():
    info = parse_cpuinfo("processor\t: 0\nmodel name\t: X\ncore id\t: 0\n\n"
                         "processor\t: 1\nmodel name\t: X\ncore id\t: 1\n")
    assert sorted(info) == [0, 1] and info[1]["core id"] == "1"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_sys(root, cpus, caches, nodes=None):
    """cpus: {id: (package, core_id)}; caches: {id: [(level, type, size, shared_list)]}."""
    base = root / "devices/system/cpu"
    write(base / "online", f"{min(cpus)}-{max(cpus)}\n")
    for i, (pkg, core) in cpus.items():
        write(base / f"cpu{i}/topology/physical_package_id", f"{pkg}\n")
        write(base / f"cpu{i}/topology/core_id", f"{core}\n")
        for n, (level, kind, size, shared) in enumerate(caches.get(i, [])):
            d = base / f"cpu{i}/cache/index{n}"
            for name, value in (("level", level), ("type", kind), ("size", size),
                                ("shared_cpu_list", shared)):
                write(d / name, f"{value}\n")
    for node, cpulist in (nodes or {}).items():
        write(root / f"devices/system/node/node{node}/cpulist", cpulist + "\n")
    return root


def knl_like(tmp_path):
    # 4 cores x 2 threads (thread-major numbering), tiles of 2 cores sharing L2.
    cpus = {t * 4 + c: (0, c) for t in range(2) for c in range(4)}
    caches = {}
    for i, (_, c) in cpus.items():
        core_cpus = f"{c},{c + 4}"
        tile = c // 2 * 2
        caches[i] = [(1, "Data", "32K", core_cpus), (1, "Instruction", "32K", core_cpus),
                     (2, "Unified", "1024K", f"{tile}-{tile + 1},{tile + 4}-{tile + 5}")]
    return fake_sys(tmp_path, cpus, caches, {0: "0-7"})


def test_tiles_sharing_l2_become_cache_groups(tmp_path):
    topo = read_topology(knl_like(tmp_path), None)
    cpus = {c.id: c for c in topo.logical_cpus}
    assert len(cpus) == 8
    assert [cpus[i].core for i in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [cpus[i].cache_group for i in range(4)] == [0, 0, 1, 1]
    assert cpus[1].smt_siblings == (5,) and cpus[5].smt_siblings == (1,)
    assert (topo.cache_group_level, topo.cache_group_bytes) == (2, 1 << 20)
    assert topo.notes == ()


def test_socket_l3_groups_cores_when_l2_is_private(tmp_path):
    cpus = {i: (i // 2, i % 2) for i in range(4)}  # 2 sockets x 2 cores
    caches = {i: [(2, "Unified", "1024K", str(i)),
                  (3, "Unified", "32M", "0-1" if i < 2 else "2-3")] for i in cpus}
    topo = read_topology(fake_sys(tmp_path, cpus, caches, {0: "0-1", 1: "2-3"}), None)
    assert [c.cache_group for c in topo.logical_cpus] == [0, 0, 1, 1]
    assert [c.numa_node for c in topo.logical_cpus] == [0, 0, 1, 1]
    assert [c.package for c in topo.logical_cpus] == [0, 0, 1, 1]
    assert topo.cache_group_level == 3


def test_private_caches_under_a_shared_last_level_give_one_group_per_core(tmp_path):
    # This build machine's shape: private L2 per core, one L3 shared by all.
    cpus = {0: (0, 0), 1: (0, 1)}
    caches = {i: [(2, "Unified", "1024K", str(i)), (3, "Unified", "36608K", "0-1")]
              for i in cpus}
    topo = read_topology(fake_sys(tmp_path, cpus, caches), None)
    assert [c.cache_group for c in topo.logical_cpus] == [0, 1]
    assert topo.cache_group_level == 2


def test_container_without_sysfs_falls_back_to_cpuinfo_and_says_so(tmp_path):
    cpuinfo = "".join(f"processor\t: {i}\nmodel name\t: Fake CPU\ncpu MHz\t\t: 2000.0\n"
                      f"physical id\t: 0\ncore id\t: {i // 2}\nflags\t\t: fma avx\n\n"
                      for i in range(4))
    topo = read_topology(tmp_path, cpuinfo)
    assert [c.core for c in topo.logical_cpus] == [0, 0, 1, 1]
    assert [c.cache_group for c in topo.logical_cpus] == [0, 0, 1, 1]
    assert topo.model == "Fake CPU" and topo.mhz == 2000.0 and "avx" in topo.flags
    notes = " ".join(topo.notes)
    assert "/proc/cpuinfo" in notes and "cache" in notes and "NUMA" in notes


def test_nothing_readable_still_gives_a_valid_topology(tmp_path):
    topo = read_topology(tmp_path, None)
    assert len(topo.logical_cpus) == (os.cpu_count() or 1)
    assert len({c.core for c in topo.logical_cpus}) == len(topo.logical_cpus)
    assert any("own core" in n for n in topo.notes)


def test_cpus_outside_the_affinity_mask_are_left_out(tmp_path):
    topo = read_topology(knl_like(tmp_path), None, allowed={0, 1, 4, 5})
    assert [c.id for c in topo.logical_cpus] == [0, 1, 4, 5]
    assert any("restricted" in n for n in topo.notes)


H100_SMI = "0, NVIDIA H100 80GB HBM3, 81559, 1980, 5, 16\n"


def test_nvidia_smi_with_libcuda_properties():
    cuda = {"NVIDIA H100 80GB HBM3": CudaProps(sm_count=132, memory_bandwidth=3.35e12,
                                               compute_capability="9.0")}
    (gpu,), notes = parse_nvidia_smi(H100_SMI, host_memory=256 << 30, cuda=cuda)
    assert gpu.memory_bytes == 81559 << 20 and gpu.sm_count == 132
    assert gpu.compute_capability == "9.0" and gpu.sm_arch == "90"
    assert gpu.peak_flops == pytest.approx(132 * 128 * 2 * 1.98e9)
    assert gpu.host_link_bandwidth == pytest.approx(16 * 3.938e9 * 0.8)
    assert gpu.pinned_host_limit_bytes == 128 << 30
    assert gpu.cublas_workspace_bytes == 32 << 20  # cuBLAS's recommendation for Hopper


def test_nvidia_smi_without_libcuda_uses_the_known_table_and_says_so():
    (gpu,), notes = parse_nvidia_smi(H100_SMI, 1 << 30, compute_caps={0: "9.0"})
    assert gpu.sm_count == 132 and "known-GPU table" in " ".join(notes)
    (odd,), notes = parse_nvidia_smi("0, Mystery GPU, 1024, [N/A], 3, 16\n", 1 << 30)
    assert odd.sm_count == 1 and "describe it by hand" in " ".join(notes)
    assert gpu.compute_capability == "9.0" and odd.compute_capability == ""
    (bad,), notes = parse_nvidia_smi(H100_SMI, 1 << 30, compute_caps={0: "[N/A]"})
    assert bad.compute_capability == "" and "cannot read compute capability" in " ".join(notes)


@pytest.mark.skipif(sys.platform != "linux", reason="fake nvidia-smi is a shell script")
def test_gpus_are_read_through_an_nvidia_smi_program(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, Tesla V100-SXM2-16GB, 16160, 1530, 3, 16, 7.0'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    gpus, _ = detect_gpus(64 << 30, str(smi))
    assert [g.name for g in gpus] == ["Tesla V100-SXM2-16GB"]
    assert gpus[0].peak_flops > 1e13
    assert gpus[0].compute_capability == "7.0"  # nvidia-smi's compute_cap column
    none, notes = detect_gpus(64 << 30, str(tmp_path / "absent"))
    assert none == [] and "no GPUs" in notes[0]


def test_detect_on_this_host_matches_sysfs_without_measuring():
    t = detect(measure=False)
    allowed = os.sched_getaffinity(0)
    assert {c.id for c in t.logical_cpus} <= set(range(os.cpu_count()))
    assert len(t.logical_cpus) == len(allowed & set(range(os.cpu_count())))
    for c in t.logical_cpus:
        core_id = f"/sys/devices/system/cpu/cpu{c.id}/topology/core_id"
        if os.path.exists(core_id):
            same = [d.id for d in t.logical_cpus if d.core == c.core]
            with open(core_id) as f:
                mine = f.read()
            for other in same:
                with open(f"/sys/devices/system/cpu/cpu{other}/topology/core_id") as f:
                    assert f.read() == mine
    assert t.provenance.method == "estimated"


def test_detect_measures_plausible_peaks_quickly():
    t = detect(measure=True, budget_s=0.05)
    assert 1e8 < t.cpu.core_bandwidth <= t.cpu.memory_bandwidth < 1e13
    assert 1e8 < t.cpu.peak_flops < 1e15
    assert t.provenance.method == "measured"


@pytest.mark.skipif(sys.platform != "linux", reason="fake nvidia-smi is a shell script")
def test_the_gpu_target_is_the_detected_device_and_plans_for_cuda(tmp_path):
    from planner.errors import UserError
    from planner.pipeline import plan
    from planner.target.presets import gpu_target
    from planner.zoo import build

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 81559, 1980, 5, 16, 9.0'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    host = detect(measure=False, nvidia_smi=str(smi))
    t = gpu_target(host)
    assert (t.name, t.backend, t.cpu) == ("gpu", "cuda", None)
    assert t.gpus[0].sm_count == 132 and t.gpus[0].memory_bytes == 81559 << 20
    assert t.host_memory_bytes == host.host_memory_bytes
    p = plan(build("mlp", batch=2, hidden=[4], in_features=3, classes=2), t)
    assert p.backend == "cuda" and p.target.name == "gpu"
    with pytest.raises(UserError, match="no NVIDIA GPU detected.*no GPUs listed"):
        gpu_target(detect(measure=False, nvidia_smi=str(tmp_path / "absent")))
