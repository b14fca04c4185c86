"""Built libraries are checked by size and sha256 before they are used (codegen/artifacts.py):
a truncated or bit-flipped schedule library is rebuilt by `build` and refused by the package's
import in one line; a cached runtime whose record does not hold is never taken as built; a
cache this process may only read is used when it holds an intact runtime; a full disk says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from codegen.artifacts import file_record
from codegen.build import _run, build, build_runtime, kept_runtime
from codegen.errors import BuildError
from codegen.render import render
from tests.codegen.helpers import host_plan

ROOT = Path(__file__).resolve().parents[2]


def flip(path: Path, at: int = 4096) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def import_in_child(package: Path) -> subprocess.CompletedProcess:
    # A fresh process: the test's own has the runtime loaded (and would not load it again).
    code = (f"import sys; sys.path.insert(0, {str(package.parent)!r}); "
            f"import {package.name}")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.fixture()
def built(mlp_graph, tmp_path):
    tree = render(host_plan(mlp_graph), tmp_path / "integrity")
    return tree, build(tree)


def test_a_bit_flipped_schedule_library_is_rebuilt_by_the_same_plan(built):
    tree, first = built
    flip(first.schedule)
    again = build(tree)
    assert not again.cached  # the stamp alone no longer makes it up to date
    info = json.loads((tree.dir / "build" / "executor.json").read_text())
    assert file_record(again.schedule) == info["schedule_file"]
    assert build(tree).cached


def test_a_truncated_schedule_library_is_refused_at_import_in_one_line(built):
    tree, first = built
    data = first.schedule.read_bytes()
    first.schedule.write_bytes(data[:len(data) // 2])
    out = import_in_child(tree.dir)
    assert out.returncode != 0 and out.returncode > 0  # an exception, not a signal
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: integrity: ") and "rebuild with `planner build`" in last
    assert first.schedule.name in last


def test_a_changed_runtime_is_refused_at_import(built, tmp_path):
    tree, first = built
    copy = tmp_path / "rt" / first.runtime.name
    copy.parent.mkdir()
    shutil.copy2(first.runtime, copy)
    flip(copy)
    info_path = tree.dir / "build" / "executor.json"
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps({**info, "runtime": str(copy)}))
    out = import_in_child(tree.dir)
    assert out.returncode > 0, out.stderr[-2000:]
    assert "is not the library its build made" in out.stderr and str(copy) in out.stderr


def kept_copy(runtime: Path, cache: Path) -> Path:
    """A runtime folder in `cache` holding a copy of `runtime` and its record, as a build
    leaves it (the folder of this host's key, so build_runtime looks there)."""
    real = runtime.parent.parent
    root = cache / real.name
    (root / "build").mkdir(parents=True)
    shutil.copy2(runtime, root / "build" / runtime.name)
    (root / "module.json").write_text(json.dumps({"module": runtime.name,
                                                  **file_record(runtime)}))
    return root


def test_a_runtime_is_kept_only_while_its_record_holds(built, tmp_path):
    _, first = built
    root = kept_copy(first.runtime, tmp_path)
    module = first.runtime.name.split(".")[0]
    assert kept_runtime(root, module) == root / "build" / first.runtime.name
    flip(root / "build" / first.runtime.name)
    assert kept_runtime(root, module) is None
    # A record naming a file elsewhere (another module, outside the folder) is no record.
    for name in ("../../elsewhere.so", "os.py", first.runtime.name + ".txt"):
        (root / "module.json").write_text(json.dumps({"module": name, "bytes": 1,
                                                      "sha256": "0"}))
        assert kept_runtime(root, module) is None


def test_a_cache_that_cannot_be_written_is_used_when_it_holds_the_runtime(
        built, tmp_path, monkeypatch):
    _, first = built
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    root = kept_copy(first.runtime, tmp_path)
    # Its lock cannot be opened for writing (as in a read-only cache; a folder in its place
    # works for root too).
    (tmp_path / f"{root.name}.lock").mkdir()
    assert build_runtime() == root / "build" / first.runtime.name
    flip(root / "build" / first.runtime.name)
    with pytest.raises(BuildError, match="cannot be written .* holds no intact runtime"):
        build_runtime()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to run a child as another user")
def test_a_read_only_shared_cache_holding_the_runtime_is_used(built):
    _, first = built
    base = Path(tempfile.mkdtemp())  # pytest's tmp_path lies in a folder only root may read
    try:
        read_only_cache_gives_the_runtime(first, base)
    finally:
        shutil.rmtree(base)


def read_only_cache_gives_the_runtime(first, base: Path) -> None:
    cache = base / "shared"
    root = kept_copy(first.runtime, cache)
    (cache / f"{root.name}.lock").touch()
    for p in (base, cache, root, root / "build"):
        p.chmod(0o755)
    # The runtime is what the cache is read for (the plan's own build is in its own folder).
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          sys.executable, "-c",
                          "from codegen.build import build_runtime; print(build_runtime())"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600,
                         env={**os.environ, "PLANNER_CACHE": str(cache), "HOME": str(base)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(root / "build" / first.runtime.name)


def test_a_full_disk_says_the_disk_is_full(tmp_path):
    source = tmp_path / "t.cpp"
    source.write_text("int x;\n")
    with pytest.raises(BuildError) as info:
        _run([os.environ.get("CXX", "c++"), "-c", str(source), "-o", "/dev/full"], "compile",
             lambda s: None, tmp_path)
    assert "the disk is full" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow
def test_a_corrupt_cached_runtime_is_linked_again(tmp_path, monkeypatch):
    # A cache of its own: the runtime is built once here (minutes), then corrupted.
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    said: list[str] = []
    first = build_runtime(progress=said.append)
    record = file_record(first)
    flip(first)
    said.clear()
    again = build_runtime(progress=said.append)
    assert any(s.startswith("building the planner's kernel library (CPU runtime)") for s in said)
    assert any(s.startswith("built the planner's kernel library (CPU runtime) in") for s in said)
    assert again == first and file_record(again) == record  # linked again from its objects
    said.clear()
    assert build_runtime(progress=said.append) == first and not said  # intact: reused
