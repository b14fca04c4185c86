"""The disk cache's list and prune (planner.io.disk_cache, `planner cache`): least recently used
first, down to the bound, never what is in use or the runtime kept; a new package prunes the
cache to $PLANNER_CACHE_MAX_BYTES. Every case works in a cache folder of its own."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

import pytest

from planner.cli import main
from planner.io.disk_cache import entries, mark_used, max_bytes, prune
from planner.io.write import open_lock

KIB = 1024


def _package(root: Path, name: str, size: int, used: float) -> Path:
    folder = root / "packages" / name
    (folder / "build").mkdir(parents=True)
    (folder / "build" / "lib.so").write_bytes(b"\0" * size)
    use = root / "packages" / f".{name}.use"
    use.touch()
    os.utime(use, (used, used))
    return folder


def _runtime(root: Path, key: str, size: int, used: float) -> Path:
    folder = root / f"cpu-runtime-{key}"
    (folder / "build").mkdir(parents=True)
    (folder / "build" / "rt.so").write_bytes(b"\0" * size)
    use = root / f"cpu-runtime-{key}.use"
    use.touch()
    os.utime(use, (used, used))
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    monkeypatch.delenv("PLANNER_CACHE_MAX_BYTES", raising=False)
    now = time.time()
    _package(tmp_path, "torch_old", 30 * KIB, now - 3000)
    _package(tmp_path, "dynamo_mid", 20 * KIB, now - 2000)
    _runtime(tmp_path, "a" * 16, 50 * KIB, now - 2500)
    _runtime(tmp_path, "b" * 16, 40 * KIB, now - 100)
    _package(tmp_path, "torch_new", 10 * KIB, now - 10)
    return tmp_path


def test_entries_are_listed_least_recently_used_first_with_their_sizes(cache):
    listed = entries()
    assert [(e.kind, e.name) for e in listed] == [
        ("package", "torch_old"), ("runtime", "cpu-runtime-" + "a" * 16),
        ("package", "dynamo_mid"), ("runtime", "cpu-runtime-" + "b" * 16),
        ("package", "torch_new")]
    assert [e.bytes // KIB for e in listed] == [30, 50, 20, 40, 10]


def test_prune_removes_the_least_recently_used_until_within_the_bound(cache):
    # 150 KiB kept; to 75 KiB: torch_old (30), the old runtime (50) go; dynamo_mid stays.
    removed = prune(75 * KIB)
    assert [e.name for e in removed] == ["torch_old", "cpu-runtime-" + "a" * 16]
    assert not (cache / "packages" / "torch_old").exists()
    assert sum(e.bytes for e in entries()) == 70 * KIB <= 75 * KIB
    assert prune(75 * KIB) == ()  # within the bound: nothing more


def test_prune_spares_the_newest_runtime_what_is_kept_and_what_is_in_use(cache):
    mark_used(cache / "packages" / "torch_old")  # this process loaded it: a shared lock held
    removed = prune(0, keep=frozenset({"cpu-runtime-" + "a" * 16}))
    assert [e.name for e in removed] == ["dynamo_mid", "torch_new"]
    assert {e.name for e in entries()} == {"torch_old", "cpu-runtime-" + "a" * 16,
                                           "cpu-runtime-" + "b" * 16}


def test_prune_skips_a_package_being_built(cache):
    with open_lock(cache / "packages" / ".torch_old.lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a builder holds it
        removed = prune(0)
    assert "torch_old" not in [e.name for e in removed]
    assert (cache / "packages" / "torch_old" / "build" / "lib.so").exists()


def test_mark_used_moves_an_entry_to_the_end(cache):
    mark_used(cache / "packages" / "torch_old")
    assert entries()[-1].name == "torch_old"


def test_the_bound_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE_MAX_BYTES", "3MiB")
    assert max_bytes() == 3 * 2**20
    monkeypatch.setenv("PLANNER_CACHE_MAX_BYTES", "lots")
    from planner.errors import UserError

    with pytest.raises(UserError, match="PLANNER_CACHE_MAX_BYTES: 'lots'"):
        max_bytes()


def test_cache_list_and_prune_commands(cache, capsys):
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "torch_old" in out and "total" in out and "150.0 KiB" not in out
    assert out.splitlines()[-1].split()[:3] == ["total", "0.1", "MiB"]
    assert main(["cache", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["total_bytes"] == 150 * KIB
    assert [e["name"] for e in listed["entries"]][0] == "torch_old"
    assert main(["cache", "prune", "--max-bytes", "100KiB", "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in pruned["removed"]] == ["torch_old", "cpu-runtime-" + "a" * 16]
    assert pruned["total_bytes"] == 70 * KIB
    with pytest.raises(SystemExit) as refused:
        main(["cache", "prune", "--max-bytes", "some"])
    assert refused.value.code == 2
    assert "--max-bytes" in capsys.readouterr().err


def test_a_wait_on_another_processs_runtime_build_is_said(tmp_path, monkeypatch):
    """The kernel library's lock held elsewhere (another process building it, no intact build
    there yet): the wait is said in one line before it starts; once the other process has
    built it and let go, the kept runtime is used silently. (An intact build is used with no
    lock taken: a holder never stalls a process that only reads it.)"""
    from codegen.build import build_runtime

    real = build_runtime(progress=lambda s: None)  # built once per host, as every executor's
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    root = real.parent.parent
    said: list[str] = []
    with open_lock(tmp_path / f"{root.name}.lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: said.append(build_runtime(said.append)))
        waiter.start()
        deadline = time.time() + 30
        while not said and time.time() < deadline:
            time.sleep(0.05)
        (tmp_path / root.name).symlink_to(root)  # the other process's build, done
        fcntl.flock(held, fcntl.LOCK_UN)
    waiter.join(60)
    assert len(said) == 2 and said[0].startswith("waiting for another process building the "
                                                  "planner's kernel library"), said
    assert said[1] == tmp_path / root.name / "build" / real.name


def test_cache_warm_finds_the_built_kernel_library(tmp_path, monkeypatch, capsys):
    """`planner cache warm` on a cache whose kernel library is built: nothing built, the
    library's folder named, and its use recorded (it lists as just used)."""
    from codegen.build import build_runtime

    real = build_runtime(progress=lambda s: None).parent.parent
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    (tmp_path / real.name).symlink_to(real)
    assert main(["cache", "warm", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["built"] is False
    assert got["runtime"].startswith(str(tmp_path / real.name))
    assert (tmp_path / f"{real.name}.use").stat().st_mtime > time.time() - 60
