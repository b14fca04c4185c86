"""Built packages last across processes and stay bounded (codegen/cached.py): a second process
compiling the same model through torch.compile(backend="planner") finds every package by its
digest and builds nothing, leaving nothing in $TMPDIR; a new package prunes the cache to
$PLANNER_CACHE_MAX_BYTES. Each case has a cache folder of its own, the host's kernel library
linked into it (built once per host, as for every executor test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, torch
import codegen.cached as cached
results = []
real = cached.build
def build(tree, progress=None):  # the builds' own results, as the backend gets them
    result = real(tree, progress)
    results.append(result.cached)
    return result
cached.build = build
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
step = torch.compile(model, backend="planner", options={"costs": "analytical"})
x = torch.randn(4, 6)
step(x).sum().backward()
print(json.dumps({"cached": results, "grad": float(model[0].weight.grad.abs().sum())}))
"""


def _cache_with_runtime(folder: Path) -> Path:
    from codegen.build import build_runtime

    runtime = build_runtime(progress=lambda s: None).parent.parent
    folder.mkdir()
    (folder / runtime.name).symlink_to(runtime)
    return folder


def _child(cache: Path, tmpdir: Path, **env: str) -> tuple[dict, str]:
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=600, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "PLANNER_CACHE": str(cache),
                              "TMPDIR": str(tmpdir), **env})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


def _files(packages: Path) -> dict[str, int]:
    """The packages' files (not their lock and use files beside them) and their times."""
    return {str(p.relative_to(packages)): p.stat().st_mtime_ns
            for p in packages.glob("[!.]*/**/*") if p.is_file()}


def test_a_second_process_builds_nothing_and_nothing_is_left_in_tmpdir(tmp_path):
    cache = _cache_with_runtime(tmp_path / "cache")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    first, _ = _child(cache, tmpdir)
    assert first["cached"] and not any(first["cached"])  # forward and backward, built
    packages = cache / "packages"
    built = _files(packages)
    names = sorted({k.split("/")[0] for k in built})
    assert len(names) == len(first["cached"]) and all(n.startswith("dynamo_") for n in names)
    second, err = _child(cache, tmpdir)
    assert len(second["cached"]) == len(first["cached"]) and all(second["cached"])
    assert second["grad"] == first["grad"]
    assert "compiling" not in err and "building" not in err, err
    # The packages' files untouched: found, not written again.
    assert {k: v for k, v in _files(packages).items() if k in built} == built
    # Only torch's own cache folder (torchinductor_<user>, one per user, reused by every
    # process) may be there: nothing of the planner's.
    assert [n for n in os.listdir(tmpdir) if not n.startswith("torchinductor_")] == []


def test_a_new_package_prunes_the_cache_to_its_bound(tmp_path):
    """Stale packages beyond PLANNER_CACHE_MAX_BYTES go, least recently used first, when a new
    one is built; the new one and the runtime stay."""
    cache = _cache_with_runtime(tmp_path / "cache")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    now = time.time()
    for age, name in ((3000, "torch_stale"), (2000, "torch_older")):
        folder = cache / "packages" / name
        folder.mkdir(parents=True)
        (folder / "lib.so").write_bytes(b"\0" * 3 * 2**20)
        os.utime(folder, (now - age, now - age))
    # 4 MiB: the stale 3 MiB package must go for the new ones (well under a MiB) to fit.
    got, err = _child(cache, tmpdir, PLANNER_CACHE_MAX_BYTES="4MiB")
    assert not any(got["cached"])
    kept = sorted(p.name for p in (cache / "packages").iterdir() if not p.name.startswith("."))
    assert "torch_stale" not in kept and "torch_older" in kept
    assert len([k for k in kept if k.startswith("dynamo_")]) == len(got["cached"])
    assert "planner cache: removed 1 least recently used entry (3.0 MiB)" in err
