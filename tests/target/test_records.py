"""Target records: presets load and validate, invariants are enforced, affinities place threads."""

import pytest
from pydantic import ValidationError

from planner.errors import UserError
from planner.target import CPU, GPU, LogicalCPU, Target, affinity_cpus, preset
from planner.target.presets import PRESETS, load_target

CPU_SPEC = CPU(model="m", peak_flops=1e11, memory_bandwidth=2e10, core_bandwidth=1e10,
               cache_group_level=2, cache_group_bytes=1 << 20)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_validates_and_round_trips_byte_identically(name):
    t = preset(name)
    assert t.name == name
    text = t.to_json()
    again = Target.from_json(text)
    assert again == t and again.to_json() == text
    assert t.cpu is not None or t.gpus


def test_knl_has_272_logical_cpus_68_cores_34_tiles():
    t = preset("knl-7250")
    assert (len(t.logical_cpus), t.cores, len(t.cache_groups), t.smt_width) == (272, 68, 34, 4)
    assert all(len(g) == 2 for g in t.cache_groups)
    # Thread-major numbering: CPUs 0, 68, 136, 204 are the four threads of core 0.
    first = t.logical_cpus[0]
    assert first.core == 0 and first.smt_siblings == (68, 136, 204)
    assert t.cpu.cache_group_level == 2 and t.cpu.cache_group_bytes == 1 << 20


def test_xeon_has_56_threads_on_28_private_l2_cores():
    t = preset("xeon-8180")
    assert (len(t.logical_cpus), t.cores, len(t.cache_groups), t.smt_width) == (56, 28, 28, 2)


def test_gpu_presets_describe_their_device():
    # SMs and compute capability from each part's datasheet (NVIDIA's CUDA GPUs table).
    sms = {"k40c-12gb": (15, "3.5"), "titan-xp-12gb": (30, "6.1"), "p100-16gb": (56, "6.0"),
           "v100-16gb": (80, "7.0"), "a100-80gb": (108, "8.0"), "l4-24gb": (58, "8.9"),
           "h100-80gb": (132, "9.0"), "h200-141gb": (132, "9.0")}
    assert sms.keys() == {n for n in PRESETS if preset(n).gpus}
    for name, (count, capability) in sms.items():
        (gpu,) = preset(name).gpus
        assert (gpu.sm_count, gpu.compute_capability) == (count, capability)
        assert gpu.memory_bytes >= 12 << 30
        assert gpu.peak_flops > 1e12 and gpu.memory_bandwidth > 1e11
        assert 0 < gpu.pinned_host_limit_bytes <= preset(name).host_memory_bytes


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(UserError, match="knl-7250") as e:
        preset("knl-7290")
    assert "h100-80gb" in str(e.value)


def test_load_target_reads_a_file_and_names_a_bad_field(tmp_path):
    good = tmp_path / "t.json"
    good.write_text(preset("xeon-8180").to_json())
    assert load_target(str(good)) == preset("xeon-8180")
    bad = tmp_path / "bad.json"
    bad.write_text(preset("xeon-8180").to_json().replace('"host_memory_bytes": ',
                                                         '"host_memory_bytes": -'))
    with pytest.raises(UserError, match="host_memory_bytes"):
        load_target(str(bad))
    with pytest.raises(UserError, match="neither a file, .host., .gpu. nor a preset"):
        load_target(str(tmp_path / "missing.json"))


def two_cores(**changes):
    cpus = [dict(id=0, core=0, cache_group=0), dict(id=1, core=1, cache_group=0)]
    for i, change in changes.items():
        cpus[int(i[1:])].update(change)
    return Target(name="t", host_memory_bytes=1, cpu=CPU_SPEC,
                  logical_cpus=tuple(LogicalCPU(**c) for c in cpus))


def test_a_consistent_target_builds():
    assert two_cores().cores == 2


@pytest.mark.parametrize("changes, message", [
    ({"c1": {"id": 0}}, "unique and ascending"),
    ({"c1": {"core": 2}}, "core indices"),
    ({"c1": {"cache_group": 3}}, "cache_group indices"),
    ({"c1": {"core": 0}}, "smt_siblings"),
    ({"c0": {"smt_siblings": (1,)}, "c1": {"core": 0, "smt_siblings": (0,), "cache_group": 1}},
     "several cache groups"),
])
def test_inconsistent_topology_is_rejected_by_name(changes, message):
    with pytest.raises(ValidationError, match=message):
        two_cores(**changes)


def test_a_target_needs_a_cpu_or_a_gpu():
    with pytest.raises(ValidationError, match="cpu or at least one gpu"):
        Target(name="empty", host_memory_bytes=1)
    with pytest.raises(ValidationError, match="go together"):
        Target(name="half", host_memory_bytes=1, cpu=CPU_SPEC)
    gpu = GPU(name="g", memory_bytes=1, sm_count=1, peak_flops=1, memory_bandwidth=1,
              host_link_bandwidth=1, pinned_host_limit_bytes=0)
    assert Target(name="gpu", host_memory_bytes=1, gpus=(gpu,)).cores == 0


def test_digest_ignores_provenance_only():
    from planner.target import TargetProvenance

    t = preset("xeon-8180")
    stamped = t.model_copy(update={"provenance": TargetProvenance(tool="x", date="2020")})
    assert stamped.digest() == t.digest()
    assert preset("knl-7250").digest() != t.digest()


def test_compact_fills_tiles_and_spread_visits_every_tile_first():
    knl = preset("knl-7250")
    assert affinity_cpus(knl, 4, "compact") == (0, 1, 2, 3)
    assert affinity_cpus(knl, 4, "spread") == (0, 2, 4, 6)
    spread34 = affinity_cpus(knl, 34, "spread")
    assert len({knl.logical_cpus[c].cache_group for c in spread34}) == 34
    # Past one thread per tile, spread starts on the tiles' second cores.
    assert affinity_cpus(knl, 35, "spread") == tuple(sorted((*spread34, 1)))
    assert affinity_cpus(knl, 68, "spread") == affinity_cpus(knl, 68, "compact") == tuple(range(68))
    assert affinity_cpus(knl, 1, "spread") == affinity_cpus(knl, 1, "compact") == (0,)


def test_affinity_uses_one_hardware_thread_per_core():
    xeon = preset("xeon-8180")
    cpus = affinity_cpus(xeon, 28, "compact")
    assert len({xeon.core_of(c) for c in cpus}) == 28


@pytest.mark.parametrize("threads", [0, 69])
def test_affinity_rejects_thread_counts_outside_the_cores(threads):
    with pytest.raises(ValueError, match="1..68"):
        affinity_cpus(preset("knl-7250"), threads, "compact")
