"""Preset targets: machines from the seed papers and common GPUs, as data.

Peaks are datasheet numbers (FP32, and the GPUs' dense tensor-core bfloat16/float16 rates;
GPU boost clocks; CPU at the AVX-512 base clock where one is
published), so they are upper bounds that the analytical cost model scales down by per-op
efficiency. Linux numbers the hardware threads of these CPUs thread-major: logical CPU
`t * cores + c` is hardware thread t of core c.

Example:
    >>> t = preset("knl-7250")
    >>> len(t.logical_cpus), t.cores, len(t.cache_groups), t.smt_width
    (272, 68, 34, 4)
    >>> sorted(PRESETS)[:4]
    ['a100-80gb', 'h100-80gb', 'h200-141gb', 'k40c-12gb']
    >>> preset("l4-24gb").gpus[0].compute_capability
    '8.9'
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from planner.errors import UserError
from planner.target.records import CPU, GPU, LogicalCPU, Target

GiB = 1 << 30
MiB = 1 << 20
GB = 1e9  # bandwidths are quoted in decimal units


def thread_major_cpus(cores: int, smt: int, cores_per_group: int) -> tuple[LogicalCPU, ...]:
    """Logical CPUs numbered t * cores + c, cache groups of consecutive cores, one NUMA node."""
    cpus = []
    for t in range(smt):
        for c in range(cores):
            siblings = tuple(s * cores + c for s in range(smt) if s != t)
            cpus.append(LogicalCPU(id=t * cores + c, core=c, smt_siblings=siblings,
                                   cache_group=c // cores_per_group))
    return tuple(sorted(cpus, key=lambda x: x.id))


def knl_7250() -> Target:
    # Xeon Phi 7250 in cache mode, as in seed 002 (Cori): 68 cores at 1.4 GHz, 2 AVX-512 units
    # (64 FP32 FLOP/cycle), 34 tiles of 2 cores sharing a 1 MB L2, MCDRAM as a cache in front of
    # 96 GiB DDR4, quadrant mode (one NUMA node).
    return Target(
        name="knl-7250",
        description="Intel Xeon Phi 7250 (Knights Landing), cache mode, quadrant",
        host_memory_bytes=96 * GiB,
        cpu=CPU(model="Intel Xeon Phi 7250", peak_flops=68 * 1.4e9 * 64,
                memory_bandwidth=400 * GB, core_bandwidth=9 * GB,
                cache_group_level=2, cache_group_bytes=1 * MiB),
        logical_cpus=thread_major_cpus(cores=68, smt=4, cores_per_group=2),
        notes=("memory_bandwidth: MCDRAM in cache mode, STREAM-class",
               "core_bandwidth: one KNL core streams far less than its share"),
    )


def xeon_8180() -> Target:
    # One Xeon Platinum 8180: 28 cores x 2 hardware threads, AVX-512 base 1.7 GHz, 2 FMA units;
    # private 1 MB L2 per core (each core its own cache group; the L3 is shared by all),
    # 6 channels of DDR4-2666.
    return Target(
        name="xeon-8180",
        description="Intel Xeon Platinum 8180 (Skylake-SP), one socket",
        host_memory_bytes=192 * GiB,
        cpu=CPU(model="Intel Xeon Platinum 8180", peak_flops=28 * 1.7e9 * 64,
                memory_bandwidth=6 * 21.33 * GB, core_bandwidth=12 * GB,
                cache_group_level=2, cache_group_bytes=1 * MiB),
        logical_cpus=thread_major_cpus(cores=28, smt=2, cores_per_group=1),
        notes=("host_memory_bytes: 12 x 16 GiB DIMMs assumed",),
    )


def _gpu_target(name: str, description: str, gpu: GPU) -> Target:
    # GPU presets describe the device only; the host they sit in is not modelled (cpu=None),
    # and host memory is taken as 4x the device's so that offload has room to plan with.
    return Target(name=name, description=description, host_memory_bytes=4 * gpu.memory_bytes,
                  gpus=(gpu,),
                  notes=("host: not modelled; host_memory_bytes = 4 x device memory",
                         "pinned_host_limit_bytes: half of host memory",
                         "host_link_bandwidth: about 80% of the PCIe link's raw rate"))


def _gpu(name: str, capability: str, memory: int, sms: int, flops: float, bandwidth: float,
         link: float, tensor: dict[str, float] | None = None) -> GPU:
    return GPU(name=name, memory_bytes=memory, sm_count=sms, peak_flops=flops,
               memory_bandwidth=bandwidth, host_link_bandwidth=link,
               pinned_host_limit_bytes=2 * memory, compute_capability=capability,
               math_peak_flops=tensor)


# Dense tensor-core rates (FP32 accumulation) from NVIDIA's datasheets, which quote "with
# sparsity" figures for Ampere and later: those are halved here. V100: 125 TFLOPS float16
# (NVIDIA, "Programming Tensor Cores in CUDA 9": up to 125 Tensor TFLOPS; no bfloat16 before
# sm_80).
# A100 SXM4: 312 bfloat16/float16. L4: 242 with sparsity. H100 SXM5 and H200 SXM: 1,979 with
# sparsity.
# TF32 (float32 operands rounded to TF32 on the tensor cores; the tf32 precision policy), half
# the bfloat16 rate on each: A100 datasheet 156 (312 with sparsity); L4 datasheet 120 with
# sparsity; H100 SXM datasheet 989 with sparsity, 494.7 dense in NVIDIA's Hopper architecture
# whitepaper (H200 SXM: the same GH100 compute). V100 (sm_70) has none: its float32
# convolutions and GEMMs stay on the FMA units, as the CUDA executor runs them.
V100_TENSOR = {"float16": 125e12}
A100_TENSOR = {"bfloat16": 312e12, "float16": 312e12, "tf32": 156e12}
L4_TENSOR = {"bfloat16": 121e12, "float16": 121e12, "tf32": 60e12}
HOPPER_SXM_TENSOR = {"bfloat16": 989e12, "float16": 989e12, "tf32": 494.7e12}


PCIE3 = 12.6 * GB  # 16 lanes x 985 MB/s x 0.8
PCIE4 = 25.2 * GB  # 16 lanes x 1.97 GB/s x 0.8
PCIE5 = 50.4 * GB  # 16 lanes x 3.94 GB/s x 0.8

PRESETS: dict[str, Callable[[], Target]] = {
    "knl-7250": knl_7250,
    "xeon-8180": xeon_8180,
    # Names as nvidia-smi prints them; memory as the datasheet gives it (GiB where the part
    # has a power-of-two size, decimal GB where the sheet quotes one: the L4's 24 GB and the
    # H200's 141 GB), so a preset never promises more than the device reports.
    "k40c-12gb": lambda: _gpu_target(
        "k40c-12gb", "NVIDIA Tesla K40c (Kepler), PCIe 3",
        _gpu("Tesla K40c", "3.5", 12 * GiB, 15, 2880 * 2 * 0.875e9, 288 * GB, PCIE3)),
    "titan-xp-12gb": lambda: _gpu_target(
        "titan-xp-12gb", "NVIDIA TITAN Xp (Pascal), PCIe 3",
        _gpu("TITAN Xp", "6.1", 12 * GiB, 30, 3840 * 2 * 1.582e9, 547.7 * GB, PCIE3)),
    "p100-16gb": lambda: _gpu_target(
        "p100-16gb", "NVIDIA Tesla P100 PCIe 16 GB (Pascal), as in seed 002 Section VII",
        _gpu("Tesla P100-PCIE-16GB", "6.0", 16 * GiB, 56, 3584 * 2 * 1.303e9, 732 * GB, PCIE3)),
    "v100-16gb": lambda: _gpu_target(
        "v100-16gb", "NVIDIA Tesla V100 SXM2 16 GB (Volta), PCIe 3 host link",
        _gpu("Tesla V100-SXM2-16GB", "7.0", 16 * GiB, 80, 5120 * 2 * 1.53e9, 900 * GB, PCIE3,
             V100_TENSOR)),
    "a100-80gb": lambda: _gpu_target(
        "a100-80gb", "NVIDIA A100 SXM4 80 GB (Ampere), PCIe 4 host link",
        _gpu("NVIDIA A100-SXM4-80GB", "8.0", 80 * GiB, 108, 6912 * 2 * 1.41e9, 2039 * GB,
             PCIE4, A100_TENSOR)),
    "l4-24gb": lambda: _gpu_target(
        "l4-24gb", "NVIDIA L4 24 GB (Ada Lovelace), PCIe 4",
        _gpu("NVIDIA L4", "8.9", 24 * 10**9, 58, 7424 * 2 * 2.04e9, 300 * GB, PCIE4,
             L4_TENSOR)),
    "h100-80gb": lambda: _gpu_target(
        "h100-80gb", "NVIDIA H100 SXM5 80 GB (Hopper), PCIe 5 host link",
        _gpu("NVIDIA H100 80GB HBM3", "9.0", 80 * GiB, 132, 16896 * 2 * 1.98e9, 3350 * GB,
             PCIE5, HOPPER_SXM_TENSOR)),
    "h200-141gb": lambda: _gpu_target(
        "h200-141gb", "NVIDIA H200 SXM 141 GB (Hopper), PCIe 5 host link",
        _gpu("NVIDIA H200", "9.0", 141 * 10**9, 132, 16896 * 2 * 1.98e9, 4800 * GB, PCIE5,
             HOPPER_SXM_TENSOR)),
}


def gpu_target(host: Target) -> Target:
    """`host`'s first GPU as a target of its own, named "gpu" (its backend: the CUDA executor):
    SMs, memory, bandwidths and host link as detection read them, the host's memory for
    offload. UserError when detection found no GPU, with its notes saying why.

    >>> from planner.target.detect import parse_nvidia_smi
    >>> gpus, _ = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, 81559, 1980, 5, 16", 1 << 36)
    >>> t = gpu_target(preset("xeon-8180").model_copy(update={"gpus": tuple(gpus)}))
    >>> t.name, t.backend, t.gpus[0].sm_count
    ('gpu', 'cuda', 132)
    """
    if not host.gpus:
        why = "; ".join(n for n in host.notes if "GPU" in n or "nvidia-smi" in n) or "none listed"
        raise UserError(f"--target gpu: no NVIDIA GPU detected on this machine ({why})")
    gpu = host.gpus[0]
    return Target(name="gpu", description=f"detected: {gpu.name}",
                  host_memory_bytes=host.host_memory_bytes, gpus=(gpu,),
                  notes=tuple(n for n in host.notes if "GPU" in n), provenance=host.provenance)


def preset(name: str) -> Target:
    """The preset target called `name`; UserError listing the known names otherwise."""
    try:
        make = PRESETS[name]
    except KeyError:
        raise UserError(f"unknown target {name!r}; known presets: "
                        f"{', '.join(sorted(PRESETS))}") from None
    return make()


def load_target(spec: str) -> Target:
    """A preset name, `host` (this machine, detected, its peaks as measured once and kept:
    planner.target.host_cache), `gpu` (this machine's first GPU: plans for the CUDA
    executor), or the path of a target JSON file (as `planner target detect --json` writes).

    Raises UserError naming the file and field, or listing the presets for an unknown name.
    """
    if spec == "host":
        from planner.target.detect import detect

        return detect()
    if spec == "gpu":
        from planner.target.detect import detect

        return gpu_target(detect(measure=False))
    if spec in PRESETS:
        return preset(spec)
    path = Path(spec)
    if not path.is_file():
        raise UserError(f"unknown target {spec!r}: neither a file, 'host', 'gpu' nor a preset; "
                        f"known presets: {', '.join(sorted(PRESETS))}")
    from planner.io.read import read_json

    data = read_json(path, "target")
    try:
        target = Target.model_validate(data)
    except ValidationError as e:
        from planner.io.read import describe_validation_error

        raise UserError(f"{spec}: not a valid target: {describe_validation_error(e)}") from None
    problem = implausible(target)
    if problem:
        raise UserError(f"{spec}: not a valid target: {problem}")
    return target


# What a target file's rates may be (FLOP/s, bytes/s): wider than any machine, narrow enough
# that every time derived from them is a finite number of seconds (a bandwidth of 1e-300 made
# every step infinite and the planner's own check fail).
RATES = (1e6, 1e18)


def implausible(target: Target) -> str | None:
    """'FIELD VALUE is ...' for the first rate of `target` outside RATES; None when all hold.

    >>> t = preset("xeon-8180")
    >>> implausible(t) is None
    True
    >>> slow = t.cpu.model_copy(update={"core_bandwidth": 1e-300})
    >>> implausible(t.model_copy(update={"cpu": slow}))
    'cpu.core_bandwidth 1e-300 is not a plausible rate (between 1e+06 and 1e+18 per second)'
    """
    low, high = RATES
    rates = []
    if target.cpu is not None:
        rates += [(f"cpu.{f}", getattr(target.cpu, f))
                  for f in ("peak_flops", "memory_bandwidth", "core_bandwidth")]
        rates += [(f"cpu.math_peak_flops.{k}", v)
                  for k, v in (target.cpu.math_peak_flops or {}).items()]
    for i, g in enumerate(target.gpus):
        rates += [(f"gpus.{i}.{f}", getattr(g, f))
                  for f in ("peak_flops", "memory_bandwidth", "host_link_bandwidth")]
        rates += [(f"gpus.{i}.math_peak_flops.{k}", v)
                  for k, v in (g.math_peak_flops or {}).items()]
    for field, value in rates:
        if not low <= value <= high:
            return (f"{field} {value!r} is not a plausible rate (between {low:g} and {high:g} "
                    f"per second)")
    return None
