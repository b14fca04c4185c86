"""Build generated executors with CMake + Ninja, cached by content hash.

Two stages, each keyed by a sha256 of a canonical encoding of its sources, flags and the
compiler's identity (the tvm-ffi recipe: a folder per key, a file lock, build output kept):

  runtime   the kernel library + executor + bindings (templates/cpu/runtime), one Python
            extension module per target and compiler, shared by every plan; built once under
            the cache folder (PLANNER_CACHE, default ~/.cache/planner) and reused.
  schedule  a plan's schedule.cpp as build/libschedule-<key>.so inside the generated tree; an
            unchanged plan finds its stamp and skips CMake entirely.

Compiler failures raise BuildError with the first compiler error and the file it names.

Example:
    >>> result = build(render(plan, "generated/lenet"))  # doctest: +SKIP
    >>> result.cached, result.dir.name             # doctest: +SKIP
    (True, 'lenet')
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from codegen.artifacts import file_record, intact
from codegen.backends import COMMON, RUNTIMES, TEMPLATES
from codegen.errors import BuildError
from codegen.lapack import lapack
from codegen.render import RenderedTree
from planner.io.write import atomic_write, open_lock

# The oldest GPU architecture nvcc 13 builds for (Turing, compute capability 7.5).
OLDEST_CUDA_ARCH = (7, 5)

Progress = Callable[[str], None]

# pocketfft's C++ header (BSD-3; third_party/pocketfft/README.md): the CPU runtime's FFT kernel
# (templates/cpu/runtime/kernels/fft.cpp) includes it from here, and its hash is in the key.
POCKETFFT = Path(__file__).resolve().parent.parent / "third_party" / "pocketfft"

# -O2 everywhere; the host's vector ISA for the plain loops (oneDNN dispatches at run time).
# GCC's -O2 vectorizes only loops whose trip count needs no epilogue ("very cheap" cost model),
# so an element-wise loop over a tensor ran scalar, a select such as Relu's a branch per
# element: on random signs 3 ns an element, 30-40x the vectorized loop (dcgan's Relu and
# LeakyReluGrad, bench/RESULTS.md). The dynamic model vectorizes them; without -ffast-math
# no floating-point reduction is reordered, so every result keeps its bits. -fno-math-errno
# lets a loop with a square root vectorize (sqrt is exact either way; errno is never read).
# -fno-trapping-math: an ordered comparison may raise the invalid flag on a NaN, so GCC keeps a
# NaN-aware mask's comparisons behind branches unless floating-point traps are off, and the
# loop runs scalar: hardtanh's gradient (x > lo || isnan ...) ran 6 ns an element, 9x its
# vectorized loop, a quarter of mobilenet_v2's step (issue 60). No code here reads or sets the
# floating-point exception flags (no <fenv.h>), and the flag alone changes no value: both arms
# of a select may be computed, one discarded.
CXX_FLAGS = ("-O2", "-fvect-cost-model=dynamic", "-fno-math-errno", "-fno-trapping-math",
             "-march=native", "-Wall", "-Wno-unused-function")
SCHEDULE_FLAGS = ("-O1",)
# A sanitized runtime is compiled at -O1, as the sanitizers' documentation advises: fast enough
# to run a training step, and its ASan+UBSan build takes ~35% less than at -O2 (the longest
# build of the test suite).
SANITIZED_FLAGS = ("-O1",)
# `planner build --sanitize`: compile and link flags per sanitizer (the runtime and the
# schedule both instrumented; oneDNN and Python are not). ASan's runtime must be the first
# library of the process: run Python with LD_PRELOAD=$(c++ -print-file-name=libasan.so).
SANITIZERS = {
    "address": ("-fsanitize=address", "-fno-omit-frame-pointer", "-g"),
    "undefined": ("-fsanitize=undefined", "-fno-sanitize-recover=undefined", "-g"),
    "thread": ("-fsanitize=thread", "-g"),
}


def sanitizer_flags(sanitize: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Compiler and linker flags of the named sanitizers (deduplicated, in a fixed order).

    >>> sanitizer_flags(("undefined", "address"))[:2]
    ('-fsanitize=address', '-fno-omit-frame-pointer')
    """
    unknown = sorted(set(sanitize) - set(SANITIZERS))
    if unknown:
        raise BuildError(f"unknown sanitizer(s) {unknown}; choose from {sorted(SANITIZERS)}")
    if "thread" in sanitize and "address" in sanitize:
        raise BuildError("the thread and address sanitizers cannot be combined")
    flags = [f for name in SANITIZERS if name in sanitize for f in SANITIZERS[name]]
    return tuple(dict.fromkeys(flags))


@dataclass(frozen=True)
class BuildResult:
    """A built executor package: its folder, the runtime module it loads, whether cached."""

    name: str
    dir: Path
    runtime: Path
    schedule: Path
    cached: bool
    seconds: float


def cache_root() -> Path:
    """Where runtimes are built: $PLANNER_CACHE, else ~/.cache/planner (planner.io.write)."""
    from planner.io.write import cache_root as planner_cache

    return planner_cache()


def venv_prefix() -> Path:
    """The environment holding oneDNN's headers, library and CMake config: sys.prefix, or
    $PLANNER_PREFIX where the wheels were installed under another prefix."""
    return Path(os.environ.get("PLANNER_PREFIX") or sys.prefix)


def tool(name: str) -> str:
    """A build tool from this environment's bin folder (the PyPI cmake/ninja), else PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        raise BuildError(f"build tool {name!r} not found; install the 'cmake' and 'ninja' "
                         f"packages from PyPI")
    return found


def compiler_identity() -> str:
    """First line of `c++ --version` (or $CXX's): part of every cache key."""
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"no C++ compiler ({cxx}): {e}") from None
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _versions() -> dict[str, str]:
    out = {"python": sysconfig.get_config_var("EXT_SUFFIX") or sys.version}
    for pkg in ("onednn-devel-cpu-gomp", "nanobind"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "?"
    return out


def digest(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def runtime_key(compiler: str | None = None, sanitize: tuple[str, ...] = (),
                backend: str = "cpu", arch: str = "") -> str:
    """Cache key of a backend's runtime on this host: sources, flags, compiler, package
    versions, the environment it links against (for CUDA the toolkit, the wheels and the GPU
    architecture `arch`, so each architecture has its own runtime)."""
    extra = {"sanitize": SANITIZED_FLAGS + sanitizer_flags(sanitize)} if sanitize else {}
    extra.update(RUNTIME_BUILDS[backend].environment(arch))
    return digest({"sources": _tree_hashes(RUNTIMES[backend].sources),
                   "common": _tree_hashes(COMMON), "flags": CXX_FLAGS, **extra,
                   "compiler": compiler or compiler_identity(), "versions": _versions(),
                   "machine": _host_cpu()})


def cuda_arch(capability: str, target: str) -> str:
    """The nvcc architecture ("90") a plan for a GPU of compute capability `capability`
    ("9.0") is built for; BuildError in one line when nvcc 13 cannot build for it (such a
    target still plans and fits) or the plan does not say.

    >>> cuda_arch("8.9", "l4-24gb")
    '89'
    >>> cuda_arch("3.5", "k40c-12gb")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    codegen.errors.BuildError: target k40c-12gb is compute capability 3.5: nvcc 13 builds ...
    """
    m = re.fullmatch(r"(\d{1,2})\.(\d)", capability)
    if not m:
        raise BuildError(f"target {target}: the plan names no GPU compute capability (a plan "
                         f"from before targets carried one, or detection could not read it); "
                         f"re-plan it for a preset or a detected GPU")
    if (int(m[1]), int(m[2])) < OLDEST_CUDA_ARCH:
        oldest = ".".join(map(str, OLDEST_CUDA_ARCH))
        raise BuildError(f"target {target} is compute capability {capability}: nvcc 13 builds "
                         f"for {oldest} and newer, so its plans can be made and fitted "
                         f"(planner plan, planner fit) but not built")
    return m[1] + m[2]


def cuda_toolchain(arch: str = "90") -> dict[str, str]:
    """What a CUDA runtime build for architecture `arch` uses: nvcc (and its version), the
    architecture, and the cuDNN, cuBLAS, cuFFT and cuSOLVER wheels' folders and libraries
    (the `cuda` extra; CUDA 13's cuBLAS, cuFFT and cuSOLVER wheels share the folder
    nvidia/cu13, CUDA 12's have one each). BuildError naming what is missing."""
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc")
    if not nvcc and Path("/usr/local/cuda/bin/nvcc").exists():
        nvcc = "/usr/local/cuda/bin/nvcc"
    if not nvcc:
        raise BuildError("no CUDA compiler: put nvcc on PATH (or set CUDACXX) to build a CUDA "
                         "executor")
    try:
        version = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[-1]
    except (OSError, subprocess.CalledProcessError, IndexError) as e:
        raise BuildError(f"nvcc ({nvcc}) does not run: {e}") from None
    out = {"nvcc": nvcc, "nvcc_version": version, "arch": arch}
    for lib, packages in _CUDA_WHEELS:
        root = next((r for package, names in packages
                     if (r := _wheel_root(package, names)) is not None), None)
        if root is None:
            raise BuildError(f"{lib} not found: install the cuda extra "
                             f"(pip install -e '.[cuda]') to build a CUDA executor")
        out[f"{lib}_root"] = str(root[0])
        out[f"{lib}_lib"] = str(root[1])
    return out


# Per library the CUDA runtime links: the (package, library files) its wheels may be, first
# found wins: CUDA 13's, then CUDA 12's.
_CUDA_WHEELS = (
    ("cudnn", (("nvidia.cudnn", ("libcudnn.so.9",)),)),
    ("cublas", (("nvidia.cu13", ("libcublas.so.13",)),
                ("nvidia.cublas", ("libcublas.so.13", "libcublas.so.12")))),
    # cuFFT 12 is CUDA 13's (its wheel nvidia-cufft), cuFFT 11 CUDA 12's (nvidia-cufft-cu12)
    ("cufft", (("nvidia.cu13", ("libcufft.so.12",)),
               ("nvidia.cufft", ("libcufft.so.12", "libcufft.so.11")))),
    # cuSOLVER 12 is CUDA 13's (nvidia-cusolver), 11 CUDA 12's (nvidia-cusolver-cu12)
    ("cusolver", (("nvidia.cu13", ("libcusolver.so.12",)),
                  ("nvidia.cusolver", ("libcusolver.so.12", "libcusolver.so.11")))),
)


def _wheel_root(package: str, names: tuple[str, ...]) -> tuple[Path, Path] | None:
    """(folder, library) of an NVIDIA wheel's package, e.g. nvidia.cudnn, if installed."""
    import importlib

    try:
        paths = list(importlib.import_module(package).__path__)
    except ImportError:
        return None
    for p in map(Path, paths):
        for name in names:
            if (p / "lib" / name).exists() and (p / "include").is_dir():
                return p, p / "lib" / name
    return None


def _host_cpu() -> str:
    # -march=native ties a runtime to the CPU model it was built on.
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return os.uname().machine


@contextmanager
def _locked(path: Path, waiting: Callable[[], None] = lambda: None):
    """Hold `path`'s exclusive lock for the block; `waiting()` is called first when another
    process holds it (a build that may last minutes: the wait is said)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_lock(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build_runtime(progress: Progress | None = None, sanitize: tuple[str, ...] = (),
                  backend: str = "cpu", arch: str = "90") -> Path:
    """A backend's runtime module for this host, built once into the cache; returns its path.
    `arch`: the GPU architecture a CUDA runtime is built for (cuda_arch of the plan's target);
    each has its own folder, `cuda-sm90-runtime-KEY`. A build, or a wait for another
    process's, says so on `progress` (default: stderr), since it takes minutes; a kept
    runtime is used silently and its use recorded (planner.io.disk_cache.mark_used)."""
    from planner.io.disk_cache import mark_used

    say = progress or _stderr
    ahead = _AHEAD.get(backend)
    if ahead is not None and ahead.is_alive() and ahead is not threading.current_thread():
        say(f"waiting for the planner's kernel library ({backend.upper()} runtime) this "
            f"process started building ahead ...")
        ahead.join()  # then kept below, or built again if that build failed (and said why)
    compiler = compiler_identity()
    how = RUNTIME_BUILDS[backend]
    if sanitize and not how.sanitizes:
        raise BuildError("sanitizers instrument the CPU runtime; use compute-sanitizer for "
                         "the CUDA one")
    root = runtime_folder(backend, arch, sanitize, compiler)
    module = RUNTIMES[backend].module
    if root.is_dir():
        # An intact build needs no lock (its record is written last): held, a build's lock
        # made every plan wait on the holder, a background measurement at nice 19 starved by
        # the very process waiting (codegen/measure_later.py). Marked used first, so no prune
        # removes it between the check and the use.
        mark_used(root)
        kept = kept_runtime(root, module)
        if kept is not None:
            return kept
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(_locked(
                root.with_name(root.name + ".lock"),
                lambda: say(f"waiting for another process building the planner's kernel "
                            f"library ({backend.upper()} runtime) in {root} ...")))
        except OSError as e:
            # A shared cache this process may only read: an intact runtime there needs no lock.
            kept = kept_runtime(root, module)
            if kept is None:
                raise BuildError(f"{root}: the runtime cache cannot be written "
                                 f"({e.strerror or e}) and holds no intact runtime to use; "
                                 f"set PLANNER_CACHE to a writable folder") from None
            return kept
        kept = kept_runtime(root, module)
        if kept is None:
            kept = _build_runtime(root, module, backend, sanitize, arch, say,
                                  progress or (lambda s: None))
        mark_used(root)
        return kept


# The builds build_runtime_ahead started, by backend (one each per process).
_AHEAD: dict[str, threading.Thread] = {}


def build_runtime_ahead(backend: str = "cpu", first: Callable[[], Any] | None = None) -> bool:
    """Start building `backend`'s runtime (its default architecture) in a thread of this
    process where this host has none yet, and return whether one was started: the doors call
    it first thing, so that a cold kernel library's minutes of compiler (a subprocess: the
    thread holds no GIL meanwhile) overlap their trace and planning, the 15-20 s before the
    first package's build asked for it (issue 83: a cold first step). `first` runs before a
    build starts (not where none does): what must not share the CPUs with the compiler, the
    host's peaks measured on a new host (planner.target.detect); where it fails, no build is
    started (its error is the caller's to meet again). build_runtime waits for it;
    the thread's own failure is not raised there but built again and raised by the build
    that needs the runtime."""
    held = _AHEAD.get(backend)
    if held is not None or kept_runtime(runtime_folder(backend), RUNTIMES[backend].module):
        return False
    if first is not None:
        try:
            first()
        except Exception:  # noqa: BLE001 - the caller's own path meets it again, where it would
            return False

    def build() -> None:
        try:
            build_runtime(backend=backend)
        except Exception:  # noqa: BLE001 - raised again by the build that needs it
            pass

    _AHEAD[backend] = thread = threading.Thread(target=build, name="planner-runtime-build",
                                               daemon=True)
    thread.start()
    return True


def runtime_folder(backend: str = "cpu", arch: str = "90", sanitize: tuple[str, ...] = (),
                   compiler: str | None = None) -> Path:
    """The cache folder this environment's runtime of `backend` is (or would be) built in:
    `<cache>/KIND-runtime-KEY` (runtime_key's first 16 digits); nothing is built."""
    key = runtime_key(compiler, sanitize, backend, arch)
    return cache_root() / f"{RUNTIME_BUILDS[backend].folder(arch)}-runtime-{key[:16]}"


def kept_runtime(root: Path, module: str) -> Path | None:
    """The runtime module a build left in `root`, if its record (module.json: the file's name
    in root/build, its size and sha256) holds and the file is intact; else None."""
    try:
        record = json.loads((root / "module.json").read_text())
    except (OSError, ValueError):
        return None
    name = record.get("module") if isinstance(record, dict) else None
    if not (isinstance(name, str) and name.startswith(module) and name.endswith(".so")
            and "/" not in name):
        return None
    path = root / "build" / name
    return path if intact(path, record) else None


def _build_runtime(root: Path, module: str, backend: str, sanitize: tuple[str, ...],
                   arch: str, say: Progress, steps: Progress) -> Path:
    """Build the runtime into `root` (under its lock) and record what was built; the build's
    start and end are said on `say`, its CMake steps on `steps`."""
    how = RUNTIME_BUILDS[backend]
    sources = RUNTIMES[backend].sources
    start = time.perf_counter()
    what = f"the planner's kernel library ({backend.upper()} runtime)"
    say(f"building {what} for this host (once; about 1-3 minutes on 2 cores) in {root} ...")
    src = root / "src"
    if src.exists():
        shutil.rmtree(src)
    # The runtime's CMakeLists finds the shared sources at ../../common.
    shutil.copytree(COMMON, src / "common")
    shutil.copytree(sources, src / sources.relative_to(TEMPLATES))
    import nanobind

    defines = {
        "CMAKE_BUILD_TYPE": "Release",
        "Python_EXECUTABLE": sys.executable,
        "nanobind_DIR": nanobind.cmake_dir(),
        **how.defines(sanitize, arch),
    }
    # A module left without an intact record (corrupt, or a build cut short) is linked
    # again: Ninja alone would take a changed file newer than its objects as up to date.
    for stale in (root / "build").glob(f"{module}*.so"):
        stale.unlink()
    _cmake(src / sources.relative_to(TEMPLATES), root / "build", defines, steps, own=src)
    modules = sorted((root / "build").glob(f"{module}*.so"))
    if not modules:
        raise BuildError(f"the runtime build in {root} produced no {module} module")
    atomic_write(root / "module.json",
                 json.dumps({"module": modules[0].name, **file_record(modules[0])},
                            indent=2, sort_keys=True) + "\n")
    say(f"built {what} in {time.perf_counter() - start:.0f} s")
    return modules[0]


def _lapack_identity() -> list[str]:
    # The CPU module's RUNPATH names the wheel's folder too (a runtime linked against another
    # environment's or another version's LAPACK is not reused).
    found = lapack()
    return [str(found.library.resolve()), found.version]


def _cpu_defines(sanitize: tuple[str, ...], arch: str) -> dict[str, str]:
    found = lapack()
    return {"dnnl_DIR": str(venv_prefix() / "lib" / "cmake" / "dnnl"),
            "PLANNER_POCKETFFT_DIR": str(POCKETFFT),
            "PLANNER_LAPACK_LIB": str(found.library), "PLANNER_LAPACK_PREFIX": found.prefix,
            "PLANNER_CXX_FLAGS": " ".join(CXX_FLAGS + (SANITIZED_FLAGS if sanitize else ())
                                          + sanitizer_flags(sanitize)),
            "PLANNER_LINK_FLAGS": " ".join(sanitizer_flags(sanitize)),
            "PLANNER_KERNEL_GROUPS": str(kernel_groups())}


def kernel_groups(cpus: int | None = None) -> int:
    """How many unity units the CPU runtime's kernel files compile in
    (templates/cpu/runtime/CMakeLists.txt), for `cpus` usable CPUs (default: this process's):
    one per CPU beside the executor's unit, at least 2 and at most 8. Each unit parses the same
    headers again (a few seconds of CPU), so a 2-core host keeps two; a 16-core one builds
    the library in about a quarter of the time. The module's code is the same either way (the
    runtime's cache key does not hold it).

    >>> kernel_groups(2), kernel_groups(4), kernel_groups(64)
    (2, 3, 8)
    """
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 2)
    return max(2, min(8, cpus - 1))


def _cuda_defines(sanitize: tuple[str, ...], arch: str) -> dict[str, str]:
    cuda = cuda_toolchain(arch)
    return {"CMAKE_CUDA_COMPILER": cuda["nvcc"], "PLANNER_CUDA_ARCH": cuda["arch"],
            "PLANNER_CUDNN_ROOT": cuda["cudnn_root"], "PLANNER_CUDNN_LIB": cuda["cudnn_lib"],
            "PLANNER_CUBLAS_ROOT": cuda["cublas_root"], "PLANNER_CUBLAS_LIB": cuda["cublas_lib"],
            "PLANNER_CUFFT_ROOT": cuda["cufft_root"], "PLANNER_CUFFT_LIB": cuda["cufft_lib"],
            "PLANNER_CUSOLVER_ROOT": cuda["cusolver_root"],
            "PLANNER_CUSOLVER_LIB": cuda["cusolver_lib"]}


@dataclass(frozen=True)
class RuntimeBuild:
    """What building a backend's runtime takes that differs between backends (its sources and
    module: codegen.backends.RUNTIMES)."""

    # What the cache key holds of the environment it links against, for GPU architecture
    # `arch`: the CPU module's RUNPATH names this environment's lib folder (a runtime built
    # in another environment, since deleted perhaps, must not be reused here); the CUDA one
    # the toolkit, the wheels and the architecture (each has its own runtime).
    environment: Callable[[str], dict]
    # CMake's definitions (sanitizers, architecture).
    defines: Callable[[tuple[str, ...], str], dict[str, str]]
    # The cache folder's name before its key: `cpu`, `cuda-sm90`.
    folder: Callable[[str], str]
    # The GPU architecture a plan for (compute capability, target name) is built for ("" where
    # there is none); BuildError where nvcc cannot build for it.
    arch: Callable[[str | None, str], str]
    # Whether sanitizers can instrument it (SANITIZERS).
    sanitizes: bool


RUNTIME_BUILDS: dict[str, RuntimeBuild] = {
    "cpu": RuntimeBuild(lambda arch: {"prefix": str(venv_prefix().resolve()),
                                      "lapack": _lapack_identity(),
                                      "pocketfft": _tree_hashes(POCKETFFT)}, _cpu_defines,
                        lambda arch: "cpu", lambda capability, target: "", sanitizes=True),
    "cuda": RuntimeBuild(lambda arch: {"cuda": cuda_toolchain(arch)}, _cuda_defines,
                         lambda arch: f"cuda-sm{arch}",
                         cuda_arch, sanitizes=False),
}


def build(rendered: RenderedTree, progress: Progress | None = None,
          sanitize: tuple[str, ...] = ()) -> BuildResult:
    """Build a rendered tree (see codegen.render) into an importable package, linked against
    the runtime of its plan's backend; cached. `sanitize` names sanitizers (SANITIZERS) to
    instrument the runtime and schedule with."""
    say = progress or (lambda s: None)
    start = time.perf_counter()
    tree = rendered.dir.resolve()
    if not (tree / "schedule.cpp").exists():
        raise BuildError(f"{tree}: no schedule.cpp; render the plan first")
    if (tree / "build").exists() and not (tree / "build").is_dir():  # a damaged cache entry
        raise BuildError(f"{tree / 'build'}: is a file where the package's build folder "
                         "goes; remove it")
    backend = rendered.backend
    arch = RUNTIME_BUILDS[backend].arch(rendered.compute_capability, rendered.target)
    runtime = build_runtime(progress, sanitize, backend, arch)
    flags = SCHEDULE_FLAGS + sanitizer_flags(sanitize)
    key = digest({"schedule": hashlib.sha256((tree / "schedule.cpp").read_bytes()).hexdigest(),
                  "cmake": hashlib.sha256((tree / "CMakeLists.txt").read_bytes()).hexdigest(),
                  "header": hashlib.sha256((COMMON / "schedule.h").read_bytes())
                  .hexdigest(),
                  "flags": flags, "runtime": str(runtime)}
                 # A training plan's evaluation schedule (codegen/evaluation.py).
                 | ({"evaluation": hashlib.sha256((tree / "evaluation.cpp").read_bytes())
                     .hexdigest()} if (tree / "evaluation.cpp").exists() else {}))
    out = tree / "build"
    info_path = out / "executor.json"
    lib = out / f"libschedule-{key[:16]}.so"
    # The package checks both libraries against these records before it loads them.
    info = {"key": key, "runtime": str(runtime), "schedule": lib.name,
            "sanitize": sorted(sanitize), "runtime_file": file_record(runtime)}
    if _up_to_date(info_path, info, lib):
        say(f"{tree.name}: up to date")
        return BuildResult(tree.name, tree, runtime, lib, True, time.perf_counter() - start)
    say(f"{tree.name}: compiling the schedule")
    out.mkdir(parents=True, exist_ok=True)
    built = out / f".libschedule-{os.getpid()}.so"
    # The compiler called as the tree's CMakeLists.txt would have CMake call it (C++17, PIC,
    # hidden visibility, the runtime's headers; kept for whoever builds the tree by hand):
    # one process, where CMake's configure alone took 0.7-0.9 s a package on the 2-core VM.
    sources = [str(tree / f) for f in ("schedule.cpp", "evaluation.cpp") if (tree / f).exists()]
    _run([os.environ.get("CXX", "c++"), "-std=c++17", "-fPIC", "-fvisibility=hidden", *flags,
          f"-I{COMMON}", *sources, "-shared", *sanitizer_flags(sanitize), "-o", str(built)],
         "compile", say, own=tree)
    for old in out.glob("libschedule-*.so"):
        old.unlink()
    # A new name per content: a process that loaded an older build keeps its own copy.
    os.replace(built, lib)
    info["schedule_file"] = file_record(lib)
    atomic_write(info_path, json.dumps(info, indent=2, sort_keys=True) + "\n")
    return BuildResult(tree.name, tree, runtime, lib, False, time.perf_counter() - start)


def _up_to_date(info_path: Path, info: dict, lib: Path) -> bool:
    """Whether the stamp `info_path` is `info` (plus the schedule's record) and the schedule
    library it names is intact."""
    try:
        kept = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(kept, dict):
        return False
    record = kept.pop("schedule_file", None)
    return kept == info and intact(lib, record)


# Characters CMake and Ninja take as syntax inside a path: CMake's list separator, quote and
# escape, Ninja's `$` escape, line breaks. A folder named with one fails to configure with
# "Configuring incomplete": refused first, naming the character.
UNBUILDABLE_IN_PATH = frozenset(';"$\\\n\r\t')


def check_build_path(path: Path) -> None:
    """BuildError naming `path` and the character when it holds one CMake or Ninja cannot
    take (UNBUILDABLE_IN_PATH).

    >>> check_build_path(Path("cache/packages/m"))
    >>> try:
    ...     check_build_path(Path("a;b/packages"))
    ... except BuildError as e:
    ...     print(str(e).split(" (")[0])
    'a;b/packages': a build folder's path cannot hold ';'
    """
    bad = sorted({c for c in str(path) if c in UNBUILDABLE_IN_PATH or not c.isprintable()})
    if bad:
        raise BuildError(f"{str(path)!r}: a build folder's path cannot hold {bad[0]!r} (CMake "
                         f"and Ninja read it as syntax); set PLANNER_CACHE or out_dir to a "
                         f"path without it")


def _cmake(src: Path, build_dir: Path, defines: dict[str, str], say: Progress,
           own: Path) -> None:
    check_build_path(src)
    check_build_path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    if not (build_dir / "build.ninja").exists():
        args = [tool("cmake"), "-S", str(src), "-B", str(build_dir), "-G", "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}"]
        args += [f"-D{k}={v}" for k, v in defines.items()]
        _run(args, "configure", say, own)
    _run([tool("cmake"), "--build", str(build_dir)], "compile", say, own)


def _run(args: list[str], what: str, say: Progress, own: Path) -> None:
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        if "No space left on device" in log:
            raise BuildError(f"{what} failed: the disk is full (No space left on device) while "
                             f"building in {own}; free space there or in the cache folder "
                             f"({cache_root()})", log=log)
        first, path = first_error(log, str(own))
        where = f" in {path}" if path else ""
        raise BuildError(f"{what} failed{where}: {first or log.strip().splitlines()[-1:]}",
                         first_error=first, path=path, log=log)
    say(f"  {what}: {time.perf_counter() - t0:.1f} s")


_ERROR = re.compile(r"^(?P<path>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: .*$",
                    re.MULTILINE)


_LOCATION = re.compile(r"(?P<path>/[^\s:]+):\d+:")


def first_error(log: str, own: str = "") -> tuple[str, str]:
    """(first compiler error line, the source file it is about) of a build log.

    The file is the first one under `own` (the generated tree or the runtime sources) named
    in the error's context, so an error reported inside a system header still points at the
    line of ours that caused it. ('', '') when the log holds no error.

    >>> first_error("x\\n/a/b.cpp:3:5: error: 'y' was not declared\\nmore")
    ("/a/b.cpp:3:5: error: 'y' was not declared", '/a/b.cpp')
    """
    m = _ERROR.search(log)
    if m:
        path = m.group("path")
        if own and not path.startswith(own):
            context = log[:m.end()]
            ours = [p for p in _LOCATION.findall(context) if p.startswith(own)]
            path = ours[-1] if ours else path
        return m.group(0), path
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip(), ""
    return "", ""
