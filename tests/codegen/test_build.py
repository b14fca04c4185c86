"""Building rendered trees: the content-hash cache and compiler errors."""

from __future__ import annotations

import pytest

from codegen.build import build, first_error, runtime_key
from codegen.errors import BuildError
from codegen.render import render
from tests.codegen.helpers import host_plan


def test_unchanged_plan_rebuilds_from_its_stamp_without_compiling(mlp_module, mlp_graph,
                                                                   tmp_path):
    plan = host_plan(mlp_graph)
    tree = render(plan, tmp_path / "again")
    said: list[str] = []
    first = build(tree, progress=said.append)
    assert any("compiling the schedule" in s for s in said)
    built = first.schedule.stat()
    said.clear()
    render(plan, tmp_path / "again")
    second = build(tree, progress=said.append)
    assert second.cached and not first.cached
    # Nothing compiled, nothing configured, the library not written again: the stamp
    # (build/executor.json) matched. (No timing: a loaded machine makes any bound flaky.)
    assert "again: up to date" in said and not any("compil" in s or "configure" in s
                                                    for s in said), said
    assert second.schedule.stat().st_mtime_ns == built.st_mtime_ns
    assert second.schedule == first.schedule and second.runtime == mlp_module_runtime(mlp_module)


def mlp_module_runtime(module):
    import json
    from pathlib import Path

    info = json.loads((Path(module.__file__).parent / "build" / "executor.json").read_text())
    return Path(info["runtime"])


def test_a_runtime_built_in_another_environment_is_not_reused(monkeypatch, tmp_path):
    # The runtime's RUNPATH names the environment's lib folder: one built by another checkout's
    # .venv (deleted since) would fail to import with "libdnnl.so.3: cannot open".
    here = runtime_key(compiler="c++ 1")
    monkeypatch.setenv("PLANNER_PREFIX", str(tmp_path))
    there = runtime_key(compiler="c++ 1")
    assert there != here
    (tmp_path / "lib").mkdir()
    monkeypatch.setenv("PLANNER_PREFIX", str(tmp_path / "lib" / ".."))
    assert runtime_key(compiler="c++ 1") == there  # the same folder, spelled otherwise


def test_compiler_error_names_the_generated_file(mlp_graph, tmp_path):
    tree = render(host_plan(mlp_graph), tmp_path / "broken")
    schedule = tree.dir / "schedule.cpp"
    schedule.write_text(schedule.read_text().replace("const int kArgs[]", "const int kArgs[] ="
                                                     " undeclared_symbol; int x[]"))
    with pytest.raises(BuildError) as info:
        build(tree)
    err = info.value
    assert err.path == str(schedule)
    assert "error" in err.first_error and "undeclared_symbol" in err.first_error
    assert str(schedule) in str(err)


def test_first_error_prefers_our_file_over_a_system_header():
    log = ("In file included from /src/ours.cpp:3:\n"
           "/src/ours.cpp:10:5:   required from here\n"
           "/usr/include/c++/12/x.h:1:1: error: bad conversion\n")
    line, path = first_error(log, own="/src")
    assert line.endswith("error: bad conversion") and path == "/src/ours.cpp"
    assert first_error("all good\n") == ("", "")


def test_the_runtimes_kernel_registry_is_the_list_codegen_reads(mlp_module):
    import sys

    from codegen.backends import RUNTIMES

    runtime = sys.modules["planner_cpu_rt"]
    assert set(runtime.registered_ops()) == RUNTIMES["cpu"].registered


def test_the_executor_refuses_a_schedule_of_another_backend(mlp_graph, tmp_path):
    import sys

    tree = render(host_plan(mlp_graph), tmp_path / "other")
    schedule = tree.dir / "schedule.cpp"
    schedule.write_text(schedule.read_text().replace("planner::CPU,", "planner::CUDA,"))
    result = build(tree)
    with pytest.raises(RuntimeError, match="plan is for the cuda backend, this runtime is the cpu"):
        sys.modules["planner_cpu_rt"].Executor(str(result.schedule))


def test_the_vendored_fft_header_is_in_the_cpu_runtimes_key(monkeypatch, tmp_path):
    """kernels/fft.cpp compiles third_party/pocketfft's header in: a changed header is
    another runtime (codegen/build.py hashes the folder into the key and passes it to CMake)."""
    import shutil

    import codegen.build as build_module

    here = runtime_key(compiler="c++ 1")
    copy = tmp_path / "pocketfft"
    shutil.copytree(build_module.POCKETFFT, copy)
    header = copy / "pocketfft_hdronly.h"
    header.write_text(header.read_text() + "\n// changed\n")
    monkeypatch.setattr(build_module, "POCKETFFT", copy)
    assert runtime_key(compiler="c++ 1") != here
    assert build_module._cpu_defines((), "")["PLANNER_POCKETFFT_DIR"] == str(copy)


def test_no_build_is_started_ahead_where_the_runtime_is_kept(mlp_module, monkeypatch):
    import codegen.build as b

    monkeypatch.setattr(b, "_AHEAD", {})
    ran: list[int] = []
    assert b.build_runtime_ahead(first=lambda: ran.append(1)) is False
    assert b._AHEAD == {} and ran == []  # nothing measured first either


def test_what_runs_before_a_build_ahead_runs_first_and_its_failure_starts_none(
        monkeypatch, tmp_path):
    """A cache with no runtime: `first` (the doors' host measurement) runs before the build
    would start; where it fails, no build starts (the caller meets the error again)."""
    import codegen.build as b

    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    monkeypatch.setattr(b, "_AHEAD", {})
    ran: list[int] = []

    def fails() -> None:
        ran.append(1)
        raise ValueError("no such target")

    assert b.build_runtime_ahead(first=fails) is False
    assert ran == [1] and b._AHEAD == {} and not any(tmp_path.iterdir())


def test_a_build_started_ahead_is_waited_for_and_its_runtime_used(mlp_module, monkeypatch):
    """build_runtime, asked while this process's build started ahead runs, waits for it (saying
    so) and then uses what it left: here the kept runtime, and a thread that takes 0.3 s."""
    import threading
    import time

    import codegen.build as b

    done = threading.Event()
    ahead = threading.Thread(target=lambda: (time.sleep(0.3), done.set()))
    monkeypatch.setattr(b, "_AHEAD", {"cpu": ahead})
    ahead.start()
    said: list[str] = []
    path = b.build_runtime(progress=said.append)
    assert done.is_set() and not ahead.is_alive()
    assert said == ["waiting for the planner's kernel library (CPU runtime) this process "
                    "started building ahead ..."]
    assert path == b.build_runtime()
