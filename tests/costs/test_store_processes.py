"""The per-host cost store under attack from real processes (issue 85, item 6), each a `planner
plan --costs measured` of a tiny MLP with $HOME unset and a cache folder of its own (the host's
kernel library linked into it, built once per host as for every executor test): two planning
one new graph at once on an empty store both succeed, the store holds each measurement once
and a third plans from it measuring nothing; a store cut short is refused in one warning line
and only what was lost is measured again; a full disk mid-write still makes the plan, with one
warning; a read-only cache plans from what it holds, said in one line; no home at all is one
line naming PLANNER_CACHE. Never a traceback. The store's damage in one process is
tests/costs/test_store_under_attack.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.host_figures import keep_host_quiet

ROOT = Path(__file__).resolve().parents[2]
SPEC = "zoo:mlp?batch=4&hidden=8&in_features=4&classes=2"
# The child: `planner plan`, with the machine read as quiet (whether a busy measurement is
# measured again is host_costs' load rule, tested on its own; here a neighbour's load would
# make the third plan measure again), and, where asked, a disk that is full under the cache's
# costs folder (every fsync there fails as a full disk's does) or a user with no home.
CHILD = r"""
import errno, os, sys
from planner.costs import host_costs
host_costs.load_now = lambda: 0.0
host_costs.CpuClock.share = lambda self: 0.0
if os.environ.get("TEST_FULL_DISK"):
    full, fsync = os.path.join(os.environ["PLANNER_CACHE"], "costs"), os.fsync
    def fsync_or_full(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(full):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fsync(fd)
    os.fsync = fsync_or_full
if os.environ.get("TEST_NO_PASSWD"):
    import pwd
    def no_entry(uid):
        raise KeyError(uid)
    pwd.getpwuid = no_entry
from planner.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cache_with_runtime(folder: Path) -> Path:
    from codegen.build import build_runtime

    runtime = build_runtime(progress=lambda s: None).parent.parent
    folder.mkdir()
    (folder / runtime.name).symlink_to(runtime)
    # The host's figures kept as a quiet machine's: every child prices from the same ones (a
    # busy figure measured again when quiet would move the plans compared, not the store).
    keep_host_quiet(folder)
    return folder


def _argv(out: Path, spec: str = SPEC) -> list[str]:
    return [sys.executable, "-c", CHILD, "plan", spec, "--train", "sgd", "--target", "host",
            "--costs", "measured", "-o", str(out)]


def _env(cache: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "PLANNER_CACHE", "PLANNER_COSTS")}
    env.update(PYTHONPATH=str(ROOT), **extra)
    if cache is not None:
        env["PLANNER_CACHE"] = str(cache)
    return env


def _start(cache: Path | None, out: Path, prefix: tuple[str, ...] = (), spec: str = SPEC,
           **extra: str) -> subprocess.Popen:
    return subprocess.Popen([*prefix, *_argv(out, spec)], cwd=out.parent,
                            env=_env(cache, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _plan(cache: Path | None, out: Path, prefix: tuple[str, ...] = (), code: int = 0,
          **extra: str) -> str:
    """A child's stderr, once it exited with `code` and no traceback."""
    child = _start(cache, out, prefix, **extra)
    _, err = child.communicate(timeout=600)
    assert child.returncode == code, err
    assert "Traceback" not in err and "internal error" not in err, err
    return err


def _store(cache: Path) -> Path:
    (store,) = (cache / "costs").glob("*.json")
    return store


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key written twice: {keys}"
    return dict(pairs)


def _key(entry: dict) -> str:
    """A store entry's signature key (what a plan's summary lists)."""
    from planner.costs.records import CostEntry

    return CostEntry.model_validate(entry).key


def _measured(err: str) -> int:
    """How many signatures a plan said it measured (planner/cli/plan.py's line)."""
    found = re.findall(r"measured (\d+) signature\(s\) on this host", err)
    return int(found[0]) if found else 0


def test_two_plans_at_once_on_an_empty_store_measure_each_signature_once(tmp_path):
    cache = _cache_with_runtime(tmp_path / "cache")
    a, b, c, other = (tmp_path / f"{k}.json" for k in ("a", "b", "c", "other"))
    # Two of one graph, and beside them one of another that shares its first layer's kernels.
    children = [_start(cache, a), _start(cache, b),
                _start(cache, other, spec=SPEC.replace("classes=2", "classes=3"))]
    errs = []
    for child in children:
        _, err = child.communicate(timeout=600)
        assert child.returncode == 0 and "Traceback" not in err, err
        errs.append(err)
    # Of the two alike, one measured while the other waited on the store's lock, then read
    # what it kept; no signature measured twice, none lost, whoever went first.
    assert sum("measuring costs on this host" in e for e in errs[:2]) == 1, errs
    data = json.loads(_store(cache).read_text(), object_pairs_hook=_unique_pairs)
    keys = [e["signature"] for e in data["table"]["entries"]]
    assert len({json.dumps(k, sort_keys=True) for k in keys}) == len(keys)
    assert sum(_measured(e) for e in errs) == len(keys) + len(data["timeless"])
    assert len(data["loads"]) == len(keys)
    assert a.read_text() == b.read_text()  # both priced by the same measurements
    third = _plan(cache, c)
    assert "measuring" not in third and "lane(s)" not in third, third
    assert c.read_text() == a.read_text()
    # A store cut short (inside its fourth entry): one warning line naming it, and of the
    # graph's signatures only those cut off measured again; the rest of the store was lost.
    store = _store(cache)
    text = store.read_text()
    cut = text.index('"signature"', text.index('"entries"'))
    for _ in range(3):
        cut = text.index('"signature"', cut + 1)
    store.write_text(text[:cut])
    err = _plan(cache, tmp_path / "d.json")
    warned = [line for line in err.splitlines() if "warning" in line]
    line, column = text[:cut].count("\n") + 1, cut - text[:cut].rfind("\n")
    assert warned == [f"planner: warning: {store}: not a valid cost store (not valid JSON "
                      f"(line {line} column {column}: Expecting property name enclosed in "
                      f"double quotes)); kept 3 of its 4 measurement(s), the rest measured "
                      f"again"], err  # 4: the fourth cut inside, the rest not read
    summary = json.loads(a.read_text())["summary"]
    measured_a = set(summary["measured_signatures"])
    wanted = measured_a | set(summary.get("modelled_signatures", ()))
    first3 = {_key(e) for e in data["table"]["entries"][:3]}
    assert _measured(err) == len(wanted - first3)
    rebuilt = json.loads(store.read_text(), object_pairs_hook=_unique_pairs)
    assert {_key(e) for e in rebuilt["table"]["entries"]} == first3 | measured_a


def test_a_full_disk_mid_write_still_makes_the_plan_with_one_warning(tmp_path):
    cache = _cache_with_runtime(tmp_path / "cache")
    out = tmp_path / "p.json"
    err = _plan(cache, out, TEST_FULL_DISK="1")
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "No space left on device" in warned[0], err
    assert warned[0].endswith("the measurements price this plan but are not kept")
    assert json.loads(out.read_text())["summary"]["measured_signatures"]
    # Nothing half-written left behind: no store, no temporary file.
    assert [p.name for p in (cache / "costs").rglob("*") if p.is_file()] == [
        p.name for p in (cache / "costs").rglob(".*.lock")]


def _read_only(folder: Path) -> tuple[str, ...]:
    """A command prefix that runs the child with `folder` read-only: a read-only bind mount in
    a mount namespace of its own (root ignores file modes), else `folder`'s modes cleared."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True) if shutil.which(
        "unshare") else None
    if probe is not None and probe.returncode == 0:
        return ("unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"',
                str(folder))
    if os.geteuid() == 0:
        pytest.skip("no mount namespace to make a folder read-only for root")
    for p in [folder, *folder.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o555)
    return ()


def test_a_read_only_cache_plans_from_what_it_holds_said_in_one_line(tmp_path):
    cache = _cache_with_runtime(tmp_path / "cache")
    first = tmp_path / "a.json"
    _plan(cache, first)
    kept = _store(cache).read_bytes()
    prefix = _read_only(cache)
    again = tmp_path / "b.json"
    err = _plan(cache, again, prefix)
    assert "measuring" not in err, err
    said = [line for line in err.splitlines() if line.startswith("planner: ")]
    assert said == [f"planner: note: {cache / 'costs'} cannot be written: this plan is priced "
                    f"by the measurements kept there, and nothing new is kept"], err
    assert again.read_text() == first.read_text()
    # A graph with kernels the store lacks: measured, priced, not kept, one line.
    other = tmp_path / "c.json"
    child = _start(cache, other, prefix, spec=SPEC.replace("classes=2", "classes=3"))
    _, err = child.communicate(timeout=600)
    assert child.returncode == 0 and "Traceback" not in err, err
    said = [line for line in err.splitlines() if line.startswith("planner: ")]
    assert len(said) == 1 and "not written" in said[0] and said[0].endswith(
        "the measurements price this plan but are not kept"), err
    assert _measured(err) > 0 and _store(cache).read_bytes() == kept


def test_no_home_and_no_cache_folder_is_one_line(tmp_path):
    err = _plan(None, tmp_path / "p.json", code=2, TEST_NO_PASSWD="1")
    assert err.strip() == ("planner: error: no cache folder: $HOME is not set and this user has "
                           "no home directory; set PLANNER_CACHE to a folder to keep the "
                           "planner's kernels and measurements in"), err
