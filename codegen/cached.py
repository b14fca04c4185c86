"""A plan's executor package, found by its name (the plan's digest) in a folder any later
process finds it in: rendered, built and loaded once per host, not once per process.

The default folder is the cache's packages folder (planner.io.disk_cache.packages_root), shared
by every process of the host: builders of one package take turns under its lock, an unchanged
package finds its build stamp and compiles nothing (codegen.build), each load records its use
(the package is not pruned while this process lives), and a package built anew prunes the
cache to its bound ($PLANNER_CACHE_MAX_BYTES, planner.io.disk_cache.max_bytes), least recently
used first. A folder of the caller's own (an `out_dir`) is neither stamped nor pruned.

Example:
    >>> module, result = load_built(plan, None, "torch_" + digest)    # doctest: +SKIP
    >>> result.cached                                                  # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import ModuleType

from codegen.build import BuildResult, Progress, build
from codegen.load import load
from codegen.render import render
from planner.errors import UserError
from planner.io.disk_cache import mark_used, max_bytes, packages_root, prune
from planner.io.write import folder_lock
from planner.plan import Plan


def package_name(plan: Plan, prefix: str) -> str:
    """The name a door gives `plan`'s package: `prefix` and the plan's digest, so that the same
    plan is found by any process (and by the background child that built it ahead)."""
    return prefix + hashlib.sha256(plan.to_json().encode()).hexdigest()[:16]


def load_built(plan: Plan, folder: Path | None, name: str,
               progress: Progress | None = None) -> tuple[ModuleType, BuildResult]:
    """`plan`'s package `folder/name` (folder None: the cache's packages folder) rendered,
    built where it changed, and imported; with the build's result (`cached`: nothing was
    compiled)."""
    shared = folder is None
    if folder is not None:
        check_out_dir(folder)
    out = (packages_root() if shared else folder) / name
    with folder_lock(out):  # two processes of one plan take turns to write it
        result = build(render(plan, out), progress=progress)
        module = load(result.dir)
        if shared:
            mark_used(out)
    if shared and not result.cached:
        _bounded(result.runtime, progress)
    return module, result


def check_out_dir(folder: Path) -> None:
    """UserError in one line naming `folder` (the caller's out_dir) where it cannot hold the
    executors' sources: a file or another non-folder in its place, or a path that cannot be
    made (a file among its parents, a read-only parent)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"out_dir {str(folder)!r}: is a file, not a folder; name a folder for "
                        f"the executors' sources") from None
    except OSError as e:
        raise UserError(f"out_dir {str(folder)!r}: cannot be made ({e.strerror or e})") from None


def _bounded(runtime: Path, progress: Progress | None) -> None:
    """The cache pruned to its bound after a new package, the runtime just used kept; what
    was removed said in one line."""
    removed = prune(max_bytes(), keep=frozenset({runtime.parent.parent.name}))
    if removed:
        freed = sum(e.bytes for e in removed) / 2**20
        line = (f"planner cache: removed {len(removed)} least recently used entr"
                f"{'y' if len(removed) == 1 else 'ies'} ({freed:.1f} MiB) to stay under "
                f"{max_bytes() / 2**20:.0f} MiB (PLANNER_CACHE_MAX_BYTES)")
        (progress or (lambda s: print(s, file=sys.stderr, flush=True)))(line)

