"""Host detection: read this machine's topology and GPUs, measure its peaks, return a Target.

Sources, each with a fallback so detection works in a container where some are missing (every
fallback taken is said in `Target.notes`):

    logical CPUs     /sys/devices/system/cpu/online  -> /proc/cpuinfo -> os.cpu_count()
                     (restricted to the CPUs this process may run on)
    core, package    /sys/.../cpuN/topology          -> /proc/cpuinfo -> one core per CPU
    cache groups     /sys/.../cpuN/cache/index*      -> one group per core
    NUMA node        /sys/devices/system/node        -> node 0
    host memory      /proc/meminfo                   -> os.sysconf
    GPUs             nvidia-smi (+ libcuda for SMs and memory bus) -> none
    peaks            measured (planner.target.measure) once per machine and kept, rounded
                     (planner.target.host_cache; refresh=True measures again), or, with
                     measure=False, estimated; FLOP/s: the better of an all-core GEMM and
                     cores x a one-core GEMM

The cache-sharing group is the smallest cache level shared by more than one core but not by all
of them (a KNL tile's L2, one socket's L3 on a two-socket Xeon); where no level is (every core
private, last level shared by all), each core is its own group.

The parsing functions take file contents or a root folder, so they are tested on fake trees.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planner import __version__
from planner.target.cgroup import cpu_quota
from planner.target.granted import granted as granted_cpus
from planner.target.host_cache import RATES, HostMeasurement, kept_measurement, machine_key
from planner.target.load import BUSY, CpuClock, load_now
from planner.target.measure import (
    Rounds,
    can_limit_blas_threads,
    stream_bandwidth,
    tuned_gemm,
    tuned_gemm_flops,
)
from planner.target.records import (
    CPU,
    GPU,
    LogicalCPU,
    Target,
    TargetProvenance,
    cublas_workspace,
)

MiB = 1 << 20


def parse_cpu_list(text: str) -> list[int]:
    """Linux CPU list syntax: "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(out))


def parse_size(text: str) -> int:
    """Cache sizes as sysfs writes them: "32K", "1024K", "36608K", "2M" -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot read cache size {text!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def parse_cpuinfo(text: str) -> dict[int, dict[str, str]]:
    """/proc/cpuinfo -> {processor number: {field: value}}."""
    out: dict[int, dict[str, str]] = {}
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "processor" in fields and fields["processor"].isdigit():
            out[int(fields["processor"])] = fields
    return out


@dataclass(frozen=True)
class Topology:
    """What detection learned about the CPUs, before peaks are attached."""

    logical_cpus: tuple[LogicalCPU, ...]
    cache_group_level: int
    cache_group_bytes: int
    model: str
    mhz: float
    flags: frozenset[str]
    notes: tuple[str, ...]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_topology(sys_root: Path, cpuinfo_text: str | None,
                  allowed: set[int] | None = None) -> Topology:
    """Logical CPUs with core, siblings, cache group and NUMA node, from sysfs under `sys_root`.

    `allowed`: the CPUs this process may use (os.sched_getaffinity); others are left out.
    """
    cpuinfo = parse_cpuinfo(cpuinfo_text or "")
    base = sys_root / "devices/system/cpu"
    ids, notes = _online_cpus(base, cpuinfo, allowed)
    place, place_notes = _places(base, ids, cpuinfo)
    notes += place_notes

    core_keys = sorted(set(place.values()), key=lambda k: min(i for i in ids if place[i] == k))
    core_index = {k: n for n, k in enumerate(core_keys)}
    core_of = {i: core_index[place[i]] for i in ids}

    group_of_core, level, size, note = _cache_groups(base, ids, core_of)
    if note:
        notes.append(note)
    numa = _numa_nodes(sys_root, ids)
    if numa is None:
        notes.append("no /sys/devices/system/node: every CPU on NUMA node 0")
        numa = {i: 0 for i in ids}

    cpus = tuple(LogicalCPU(
        id=i, core=core_of[i], package=place[i][0],
        smt_siblings=tuple(j for j in ids if j != i and core_of[j] == core_of[i]),
        cache_group=group_of_core[core_of[i]], numa_node=numa.get(i, 0)) for i in ids)
    first = cpuinfo.get(ids[0]) or next(iter(cpuinfo.values()), {})
    mhz = float(first.get("cpu MHz", 0) or 0)
    return Topology(logical_cpus=cpus, cache_group_level=level, cache_group_bytes=size,
                    model=first.get("model name", "unknown CPU"), mhz=mhz,
                    flags=frozenset(first.get("flags", "").split()), notes=tuple(notes))


def _online_cpus(base: Path, cpuinfo: dict, allowed: set[int] | None
                 ) -> tuple[list[int], list[str]]:
    """The logical CPUs online (sysfs, else /proc/cpuinfo, else os.cpu_count) that this
    process may use, and notes of where they came from."""
    notes: list[str] = []
    online = _read(base / "online")
    if online is not None:
        ids = parse_cpu_list(online)
    elif cpuinfo:
        ids = sorted(cpuinfo)
        notes.append("no /sys/devices/system/cpu/online: CPUs from /proc/cpuinfo")
    else:
        ids = list(range(os.cpu_count() or 1))
        notes.append("no CPU list in /sys or /proc/cpuinfo: CPUs 0..os.cpu_count()-1")
    if allowed is not None and set(ids) - allowed:
        kept = [i for i in ids if i in allowed]
        notes.append(f"process restricted to CPUs {kept} of {len(ids)} online")
        ids = kept or ids
    return ids, notes


def _places(base: Path, ids: list[int], cpuinfo: dict
            ) -> tuple[dict[int, tuple[int, int]], list[str]]:
    """(package, core id) per logical CPU (sysfs, else /proc/cpuinfo, else a core of its
    own), and notes of the CPUs whose ids came from elsewhere than sysfs."""
    notes: list[str] = []
    place: dict[int, tuple[int, int]] = {}
    missing_sys, missing_all = [], []
    for i in ids:
        topo = base / f"cpu{i}/topology"
        pkg, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
        if pkg is not None and core is not None:
            place[i] = (int(pkg), int(core))
            continue
        missing_sys.append(i)
        info = cpuinfo.get(i, {})
        if "core id" in info:
            place[i] = (int(info.get("physical id", 0)), int(info["core id"]))
        else:
            missing_all.append(i)
            place[i] = (0, 1_000_000 + i)  # its own core
    if missing_sys:
        notes.append(f"no sysfs topology for CPUs {missing_sys}: core ids from /proc/cpuinfo")
    if missing_all:
        notes.append(f"no core ids for CPUs {missing_all}: each counted as its own core")
    return place, notes


def _cache_groups(base: Path, ids: list[int],
                  core_of: dict[int, int]) -> tuple[dict[int, int], int, int, str]:
    """Group index per core, the cache level and size defining groups, and a note if guessed."""
    cores = sorted(set(core_of.values()))
    # level -> (size, set of frozensets of cores sharing one instance)
    levels: dict[int, tuple[int, set[frozenset[int]]]] = {}
    for i in ids:
        for index in sorted((base / f"cpu{i}/cache").glob("index*")):
            kind = _read(index / "type")
            lvl, size, shared = (_read(index / n) for n in ("level", "size", "shared_cpu_list"))
            if None in (kind, lvl, size, shared) or kind.strip() == "Instruction":
                continue
            sharing = frozenset(core_of[j] for j in parse_cpu_list(shared) if j in core_of)
            entry = levels.setdefault(int(lvl), (parse_size(size), set()))
            entry[1].add(sharing | {core_of[i]})
    if not levels:
        return ({c: n for n, c in enumerate(cores)}, 0, 0,
                "no cache sharing in /sys: each core its own cache group")
    for lvl in sorted(levels):
        size, groups = levels[lvl]
        if any(1 < len(g) < len(cores) for g in groups):
            # Cores no instance lists (sysfs gaps) become groups of their own.
            seen = set().union(*groups)
            ordered = sorted([*groups, *({c} for c in cores if c not in seen)], key=min)
            return ({c: n for n, g in enumerate(ordered) for c in sorted(g)}, lvl, size, "")
    private = [lvl for lvl in sorted(levels) if all(len(g) == 1 for g in levels[lvl][1])]
    lvl = private[-1] if private else min(levels)
    return {c: n for n, c in enumerate(cores)}, lvl, levels[lvl][0], ""


def _numa_nodes(sys_root: Path, ids: list[int]) -> dict[int, int] | None:
    nodes = sorted((sys_root / "devices/system/node").glob("node[0-9]*"))
    if not nodes:
        return None
    out: dict[int, int] = {}
    for node in nodes:
        cpulist = _read(node / "cpulist")
        if cpulist is not None:
            for i in parse_cpu_list(cpulist):
                out[i] = int(node.name[4:])
    return out or None


def host_memory_bytes(proc_root: Path) -> tuple[int, str]:
    """MemTotal from /proc/meminfo, else os.sysconf; a note when falling back."""
    meminfo = _read(proc_root / "meminfo") or ""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, re.MULTILINE)
    if m:
        return int(m.group(1)) * 1024, ""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), \
            "no /proc/meminfo: host memory from sysconf"
    except (ValueError, OSError):
        return 1 << 30, "host memory unknown: 1 GiB assumed"


# ---- GPUs ------------------------------------------------------------------------------------

SMI_FIELDS = "index,name,memory.total,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max"
# FP32 lanes per SM by compute capability major(.minor).
FP32_PER_SM = {"3": 192, "5": 128, "6.0": 64, "6": 128, "7": 64, "8.0": 64, "8": 128, "9": 128,
               "10": 128, "12": 128}
# Dense tensor-core FLOP/clock per SM (float32 accumulation) by compute capability, and the
# types they run: V100 80 SMs x 1024 x 1.53 GHz = 125 TFLOPS, A100 108 x 2048 x 1.41 = 312,
# L4 58 x 1024 x 2.04 = 121, H100 SXM 132 x 4096 x 1.83 = 989 (Hopper's datasheet rate is at
# 1.83 GHz, below its FP32 boost clock: the max SM clock nvidia-smi reports overstates it ~8%).
# sm_86 parts: A10's 125 TFLOPS (GeForce cards halve float32 accumulation; not modelled).
# TF32 runs at half the 16-bit rate from sm_80 on (A100 156, H100 SXM 494.7 TFLOPS dense).
TENSOR_PER_SM: dict[str, tuple[int, tuple[str, ...]]] = {
    "7.0": (1024, ("float16",)), "7.5": (1024, ("float16",)),
    "8.0": (2048, ("bfloat16", "float16", "tf32")),
    "8.6": (1024, ("bfloat16", "float16", "tf32")),
    "8.9": (1024, ("bfloat16", "float16", "tf32")),
    "9.0": (4096, ("bfloat16", "float16", "tf32")),
}
# Tensor-core FLOP per clock of a math type, as a fraction of the 16-bit types'.
TENSOR_RATE = {"bfloat16": 1.0, "float16": 1.0, "tf32": 0.5}


def tensor_peaks(capability: str, sms: int, clock_mhz: float) -> dict[str, float] | None:
    """Dense tensor-core FLOP/s per math type for a GPU of this compute capability (None for
    one the table does not know: its kernels are priced at the FP32 peak).

    >>> round(tensor_peaks("8.0", 108, 1410)["bfloat16"] / 1e12, 1)
    311.9
    >>> round(tensor_peaks("9.0", 132, 1830)["tf32"] / 1e12, 1)
    494.7
    >>> tensor_peaks("6.1", 30, 1582) is None
    True
    """
    if capability not in TENSOR_PER_SM:
        return None
    per_clock, types = TENSOR_PER_SM[capability]
    return {m: sms * per_clock * TENSOR_RATE[m] * clock_mhz * 1e6 for m in types}


# Raw bytes/s per lane of each PCIe generation.
PCIE_LANE = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
# Fallback when libcuda cannot say: (name fragment, SMs, memory bandwidth bytes/s), most
# specific first.
KNOWN_GPUS = (
    ("H200", 132, 4.8e12), ("H100 PCIe", 114, 2.0e12), ("H100", 132, 3.35e12),
    ("A100-SXM4-80GB", 108, 2.039e12), ("A100 80GB PCIe", 108, 1.935e12), ("A100", 108, 1.555e12),
    ("V100", 80, 900e9), ("P100", 56, 732e9), ("TITAN Xp", 30, 547.7e9), ("K40", 15, 288e9),
    ("L40S", 142, 864e9), ("L4", 58, 300e9), ("A10", 72, 600e9), ("T4", 40, 320e9),
)


@dataclass(frozen=True)
class CudaProps:
    """What libcuda says about one device."""

    sm_count: int
    memory_bandwidth: float
    compute_capability: str


def parse_nvidia_smi(text: str, host_memory: int, cuda: dict[str, CudaProps] | None = None,
                     compute_caps: dict[int, str] | None = None) -> tuple[list[GPU], list[str]]:
    """GPU records from `nvidia-smi --query-gpu=SMI_FIELDS --format=csv,noheader,nounits`.

    SM count and bandwidth come from `cuda` (libcuda attributes by device name: CUDA and
    nvidia-smi may number devices differently) or else the KNOWN_GPUS table; the compute
    capability from `cuda`, else nvidia-smi's compute_cap column (`compute_caps`, by index);
    peak FP32 = SMs x FP32 lanes per SM x 2 x max SM clock.

    >>> gpus, _ = parse_nvidia_smi("0, NVIDIA L4, 23034, 2040, 4, 16", 1 << 36,
    ...                            compute_caps={0: "8.9"})
    >>> gpus[0].compute_capability, gpus[0].sm_count
    ('8.9', 58)
    """
    gpus, notes = [], []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6:
            notes.append(f"nvidia-smi: cannot read line {line!r}")
            continue
        index, name = int(cells[0]), cells[1]
        memory = int(float(cells[2])) * MiB
        props = (cuda or {}).get(name)
        cap = props.compute_capability if props else (compute_caps or {}).get(index, "")
        if props:
            sms, bandwidth = props.sm_count, props.memory_bandwidth
        else:
            known = next((k for k in KNOWN_GPUS if k[0].lower() in name.lower()), None)
            if known is None:
                notes.append(f"GPU {index} ({name}): SM count and bandwidth unknown; "
                             "1 SM and 100 GB/s assumed, describe it by hand")
                sms, bandwidth = 1, 100e9
            else:
                sms, bandwidth = known[1], known[2]
                notes.append(f"GPU {index} ({name}): SMs and bandwidth from the known-GPU table")
        lanes = FP32_PER_SM.get(cap) or FP32_PER_SM.get(cap.split(".")[0]) or 64
        if not cap:
            notes.append(f"GPU {index} ({name}): compute capability unknown, 64 FP32 lanes/SM")
        clock = _number(cells[3]) or 1000.0
        gen, width = int(_number(cells[4]) or 3), int(_number(cells[5]) or 16)
        link = PCIE_LANE.get(gen, PCIE_LANE[3]) * width * 0.8
        if cap and not re.fullmatch(r"\d{1,2}\.\d", cap):
            notes.append(f"GPU {index} ({name}): cannot read compute capability {cap!r}")
            cap = ""
        gpus.append(GPU(name=name, memory_bytes=memory, sm_count=sms,
                        peak_flops=sms * lanes * 2 * clock * 1e6, memory_bandwidth=bandwidth,
                        math_peak_flops=tensor_peaks(cap, sms, clock),
                        host_link_bandwidth=link, compute_capability=cap,
                        cublas_workspace_bytes=cublas_workspace(cap),
                        pinned_host_limit_bytes=host_memory // 2 // max(len(lines), 1)))
    if gpus:
        notes.append("GPU host_link_bandwidth: 80% of the PCIe link's raw rate; "
                     "pinned_host_limit_bytes: half of host memory, shared among GPUs")
    return gpus, notes


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _cuda_props() -> dict[str, CudaProps]:
    """Per device name: SMs, memory bandwidth (2 x memory clock x bus width) and compute
    capability, through the driver API; empty when libcuda is missing or fails."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return {}
        out: dict[str, CudaProps] = {}
        for ordinal in range(count.value):
            dev, name = ctypes.c_int(), ctypes.create_string_buffer(256)
            if (cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0
                    or cuda.cuDeviceGetName(name, 256, dev) != 0):
                continue

            def attr(code: int, dev: ctypes.c_int = dev) -> int:
                value = ctypes.c_int()
                cuda.cuDeviceGetAttribute(ctypes.byref(value), code, dev)
                return value.value

            # CU_DEVICE_ATTRIBUTE_: MULTIPROCESSOR_COUNT 16, MEMORY_CLOCK_RATE 36 (kHz),
            # GLOBAL_MEMORY_BUS_WIDTH 37 (bits), COMPUTE_CAPABILITY_MAJOR 75, _MINOR 76.
            out.setdefault(name.value.decode(errors="replace"), CudaProps(
                sm_count=attr(16), memory_bandwidth=2.0 * attr(36) * 1e3 * attr(37) / 8,
                compute_capability=f"{attr(75)}.{attr(76)}"))
        return out
    except (OSError, AttributeError):
        return {}


def detect_gpus(host_memory: int, nvidia_smi: str = "nvidia-smi") -> tuple[list[GPU], list[str]]:
    """GPUs through nvidia-smi; none (and a note) without it."""
    try:
        run = subprocess.run([nvidia_smi, f"--query-gpu={SMI_FIELDS},compute_cap",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        caps: dict[int, str] = {}
        if run.returncode == 0:
            rows = [r.rsplit(",", 1) for r in run.stdout.splitlines() if r.strip()]
            caps = {int(r[0].split(",")[0]): r[1].strip() for r in rows if len(r) == 2}
            text = "\n".join(r[0] for r in rows)
        else:  # older drivers lack compute_cap
            run = subprocess.run([nvidia_smi, f"--query-gpu={SMI_FIELDS}",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20)
            if run.returncode != 0:
                return [], [f"nvidia-smi failed ({run.stderr.strip()[:200]}): no GPUs listed"]
            text = run.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], [f"no usable nvidia-smi ({type(e).__name__}): no GPUs listed"]
    return parse_nvidia_smi(text, host_memory, _cuda_props(), caps)


# ---- the whole target ------------------------------------------------------------------------

def estimated_peak_flops(cores: int, mhz: float, flags: frozenset[str]) -> float:
    """Datasheet-style FP32 peak: cores x clock x SIMD lanes x 2 (FMA) x 2 FMA units."""
    lanes = 16 if "avx512f" in flags else 8 if "avx" in flags else 4
    fma = 2 if "fma" in flags or "avx512f" in flags else 1
    return cores * (mhz or 2000.0) * 1e6 * lanes * fma * 2


def vector_floats(flags: frozenset[str], max_isa: str | None = None) -> int | None:
    """float32 lanes of the widest vectors oneDNN runs on a CPU of `flags`, under its
    ONEDNN_MAX_CPU_ISA cap `max_isa`: 16 with AVX-512, 8 with AVX2, None below (the channel
    block of its blocked layouts, planner.step.blocked).

    >>> avx512 = frozenset({"avx2", "fma", "avx512f"})
    >>> vector_floats(avx512), vector_floats(avx512, "AVX2"), vector_floats(frozenset({"sse4_1"}))
    (16, 8, None)
    """
    cap = (max_isa or "ALL").upper()
    wide = cap in ("ALL", "DEFAULT") or cap.startswith(("AVX512", "AVX10"))
    if "avx512f" in flags and wide:
        return 16
    if "avx2" in flags and (wide or cap.startswith("AVX2")):
        return 8
    return None


# bfloat16 FLOP/cycle per core of an AMX tile unit (TDPBF16PS: 16 x 16 x 32 products in 16
# cycles; Intel quotes 1024 BF16 operations per cycle for 4th Gen Xeon).
AMX_BF16_PER_CYCLE = 1024


def cpu_math_peaks(cores: int, mhz: float, flags: frozenset[str],
                   fp32: float) -> dict[str, float] | None:
    """The CPU's bfloat16 peak from its ISA flags, at the efficiency `fp32` (the peak taken,
    measured or estimated) reaches of estimated_peak_flops: AMX tiles (amx_bf16) at
    AMX_BF16_PER_CYCLE per core per cycle; AVX512_BF16's dot products (two bfloat16 products
    per float32 lane) at twice float32's rate. None without either: oneDNN runs bfloat16
    convolutions and GEMMs by converting to float32, at float32's rate.

    >>> f = frozenset({"avx512f", "fma", "avx512_bf16", "amx_bf16"})
    >>> cpu_math_peaks(2, 2000, f, 256e9)["bfloat16"] / 256e9
    16.0
    >>> cpu_math_peaks(2, 2000, f - {"amx_bf16"}, 1e9)
    {'bfloat16': 2000000000.0}
    >>> cpu_math_peaks(2, 2000, frozenset({"avx2", "fma"}), 1e9) is None
    True
    """
    estimate = estimated_peak_flops(cores, mhz, flags)
    if "amx_bf16" in flags:
        ratio = cores * (mhz or 2000.0) * 1e6 * AMX_BF16_PER_CYCLE / estimate
    elif "avx512_bf16" in flags:
        ratio = 2.0
    else:
        return None
    return {"bfloat16": fp32 * ratio}


def detect(measure: bool = True, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
           nvidia_smi: str = "nvidia-smi", budget_s: float = 0.5, refresh: bool = False,
           cgroup_root: Path = Path("/sys/fs/cgroup")) -> Target:
    """This host as a Target named "host". With measure=False, peaks are estimated (no timing).

    Measured peaks are this machine's kept measurement (planner.target.host_cache): measured
    when there is none or with `refresh`, `budget_s` bounding each of its measurements
    (one-core and all-core bandwidth, GEMM).

    The target holds the CPUs granted to this process (its affinity mask) only; the cgroup CPU
    quota is said in the notes and keys the kept measurement, and is not applied to the
    topology (a quota is time, not a set of cores; docs/front-end.md).
    """
    # The mask the launcher granted, not one a data-parallel rank of this process narrowed.
    allowed = granted_cpus()
    topo = read_topology(sys_root, _read(proc_root / "cpuinfo"), allowed)
    quota, quota_note = cpu_quota(proc_root, cgroup_root)
    notes = list(topo.notes)
    granted = len(topo.logical_cpus)
    notes.append(f"granted: {granted} logical CPUs by the affinity mask; {quota_note}")
    if quota is not None and quota < granted:
        notes.append(f"the quota ({quota:g} cores) is below the {granted} granted CPUs: "
                     f"threads beyond {max(1, int(quota))} are throttled, not faster")
    memory, note = host_memory_bytes(proc_root)
    if note:
        notes.append(note)
    cores = len({c.core for c in topo.logical_cpus})
    mhz = topo.mhz
    # What the machine is: its measurement is kept under it, and it stays the target's
    # identity (CPU.machine) however often the figures are measured again.
    key = machine_key(topo.model, topo.flags, topo.logical_cpus, topo.cache_group_level,
                      topo.cache_group_bytes, quota)
    if measure:
        m = kept_measurement(key, lambda: _measure(cores, topo.mhz, budget_s, topo.flags),
                             refresh, quiet=lambda: load_now() <= BUSY)
        mhz, core_bw = m.mhz, m.core_bandwidth
        all_bw = m.memory_bandwidth
        flops = max(m.gemm_flops_all_cores, cores * m.gemm_flops_one_core)
        estimate = estimated_peak_flops(cores, mhz, topo.flags)
        notes.append(f"peaks measured: {m.gemm} float32 GEMM "
                     f"{m.gemm_flops_all_cores / 1e9:.1f} GFLOP/s on all cores, "
                     f"{m.gemm_flops_one_core / 1e9:.1f} on one (datasheet-style estimate "
                     f"{estimate / 1e9:.1f}); streaming c = a + b on 1 and {cores} threads; "
                     f"{_load_note(m)}; kept, rounded to 2 significant figures (planner "
                     f"target detect measures again)")
        notes.extend(_figure_notes(m))
    else:
        estimate = estimated_peak_flops(cores, mhz, topo.flags)
        core_bw, all_bw, flops = 10e9, 10e9 * min(cores, 4), estimate
        notes.append("peaks estimated, not measured: 10 GB/s per core up to 4 cores, "
                     "FLOP/s from clock and SIMD flags")
    gpus, gpu_notes = detect_gpus(memory, nvidia_smi)
    notes.extend(gpu_notes)
    math_peaks = cpu_math_peaks(cores, mhz, topo.flags, flops)
    if math_peaks and measure and m.gemm_bf16_flops:
        math_peaks = {"bfloat16": m.gemm_bf16_flops}
        notes.append(f"bfloat16 peak {m.gemm_bf16_flops / 1e9:.1f} GFLOP/s measured "
                     f"({m.gemm} GEMM on all cores)")
    elif math_peaks:
        notes.append(f"bfloat16 peak {math_peaks['bfloat16'] / 1e9:.1f} GFLOP/s from the ISA "
                     f"flags ({'amx_bf16' if 'amx_bf16' in topo.flags else 'avx512_bf16'}), "
                     "at the float32 peak's fraction of its estimate")
    cpu = CPU(model=topo.model, peak_flops=flops, math_peak_flops=math_peaks,
              memory_bandwidth=all_bw, core_bandwidth=core_bw,
              cache_group_level=topo.cache_group_level, cache_group_bytes=topo.cache_group_bytes,
              vector_floats=vector_floats(topo.flags, os.environ.get("ONEDNN_MAX_CPU_ISA")),
              machine=key)
    return Target(name="host", description=f"detected: {topo.model}", host_memory_bytes=memory,
                  cpu=cpu, logical_cpus=topo.logical_cpus, gpus=tuple(gpus), notes=tuple(notes),
                  provenance=TargetProvenance(tool=f"planner {__version__}",
                                              date=m.date if measure else _now(),
                                              method="measured" if measure else "estimated"))


def _measure(cores: int, mhz: float, budget_s: float,
             flags: frozenset[str] = frozenset()) -> HostMeasurement:
    """This machine's bandwidths and GEMM FLOP/s, now (planner.target.measure), each with the
    load while it was measured (planner.target.load.CpuClock.load) and when."""
    per_thread = max(8 * MiB, min(64 * MiB, (512 * MiB) // cores))
    gemm = tuned_gemm()
    figures: dict[str, tuple[float, float, str]] = {}

    def figure(name: str, threads: int, run: Callable[[Rounds], float]) -> None:
        clock, rounds = CpuClock(), Rounds()
        value = run(rounds)
        load = clock.load(threads, rounds.ran(threads))
        figures[name] = (value, load_now() if load is None else load, _now())

    # One thread first: an all-core GEMM's team would spin on beside it, and a one-thread
    # round counts the process's CPU time, not the others' (planner.target.measure).
    figure("core_bandwidth", 1, lambda r: stream_bandwidth(1, per_thread, budget_s, r))
    if gemm == "torch" or can_limit_blas_threads():
        figure("gemm_flops_one_core", 1,
               lambda r: tuned_gemm_flops(1024, budget_s, threads=1, rounds=r))
    figure("memory_bandwidth", cores, lambda r: stream_bandwidth(cores, per_thread, budget_s, r))
    # Other processes only ever slow a measurement down, and they hurt the all-core run
    # most: take the better of all cores together and one core.
    figures["memory_bandwidth"] = max(figures["memory_bandwidth"], figures["core_bandwidth"])
    figure("gemm_flops_all_cores", cores,
           lambda r: tuned_gemm_flops(1024, budget_s, threads=cores, rounds=r))
    # bfloat16 only where the ISA computes it (without, oneDNN converts: slower than float32).
    if gemm == "torch" and bool({"avx512_bf16", "amx_bf16"} & flags):
        figure("gemm_bf16_flops", cores,
               lambda r: tuned_gemm_flops(1024, budget_s, threads=cores, dtype="bfloat16",
                                          rounds=r))
    loads = {f: load for f, (_, load, _) in figures.items()}
    return HostMeasurement(**{f: v for f, (v, _, _) in figures.items()},
                           **{f: 0.0 for f in RATES if f not in figures},
                           mhz=mhz, date=_now(), load=max(loads.values()), gemm=gemm,
                           loads=loads, dates={f: d for f, (_, _, d) in figures.items()})


# How `describe` and the notes name each figure.
FIGURES = {"core_bandwidth": ("streaming, one core", 1e9, "GB/s"),
           "memory_bandwidth": ("streaming, all cores", 1e9, "GB/s"),
           "gemm_flops_one_core": ("float32 GEMM, one core", 1e9, "GFLOP/s"),
           "gemm_flops_all_cores": ("float32 GEMM, all cores", 1e9, "GFLOP/s"),
           "gemm_bf16_flops": ("bfloat16 GEMM, all cores", 1e9, "GFLOP/s")}


def _figure_notes(m: HostMeasurement) -> list[str]:
    """One note per measured figure: its value, when and at what load (`planner target
    show host` adds its age)."""
    out = []
    for f, (what, unit, units) in FIGURES.items():
        if getattr(m, f):
            out.append(f"figure {what}: {getattr(m, f) / unit:,.1f} {units} measured "
                       f"{m.date_of(f)} {_load_words(m.load_of(f), m.busy_figure(f))}")
    return out


AGAIN = "busy: measured again when the machine is quiet"


def _load_words(load: float | None, busy: bool) -> str:
    if load is None:
        return f"at an unrecorded load ({AGAIN})"
    return f"at load {load:.2f} ({AGAIN if busy else 'quiet'})"


def _load_note(m: HostMeasurement) -> str:
    busy = [FIGURES[f][0] for f in RATES if m.busy_figure(f)]
    if not busy:
        return "every figure measured quiet"
    return f"measured busy: {', '.join(busy)} (kept until a quiet machine measures again)"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
