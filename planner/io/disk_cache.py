"""What the planner keeps on disk, listed and bounded: built packages and runtimes.

Under the cache folder (planner.io.write.cache_root: $PLANNER_CACHE, else ~/.cache/planner):

    packages/NAME/                a built executor package, NAME its plan's digest
    packages/.NAME.lock           its build lock (folder_lock: builders take turns)
    packages/.NAME.use            its use lock and last-use stamp: every process that loaded it
                                  holds a shared flock on it while it lives, and touches it
    KIND-runtime-KEY/             a kernel library (codegen.build.build_runtime)
    KIND-runtime-KEY.lock, .use   its build lock, and its use lock and stamp
    records/KEY/                  a traced program's decomposed record (KBs), KEY the digest of
                                  the trace (planner/importers/torch/record_cache.py), or a
                                  plan (tens of KBs), KEY the digest of its graph, target, cost
                                  table, options and the planner (planner/pipeline/kept.py)
    records/.KEY.use              its use lock and last-use stamp

`prune` removes the least recently used first until the entries' total is at most the bound,
skipping what is in use: an entry whose build lock or use lock another holder has (a process
building it, or one that loaded it: its executors open the schedule library by path), and the
runtimes `keep` names (the one this environment builds). Lock files are left where they are:
one removed while another process opens it would let two holders lock two files.

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "packages" / "torch_a").mkdir(parents=True)
    >>> _ = (root / "packages" / "torch_a" / "lib.so").write_bytes(b"x" * 100)
    >>> [(e.kind, e.name, e.bytes) for e in entries(root)]
    [('package', 'torch_a', 100)]
    >>> [e.name for e in prune(50, root=root)]
    ['torch_a']
    >>> entries(root)
    ()
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from planner.errors import UserError
from planner.io.write import cache_root, open_lock
from planner.ir.record import Record

# The packages' bound when $PLANNER_CACHE_MAX_BYTES says none: a package is 0.3-7 MB (a tiny
# MLP's to a ResNet's, sources and CMake tree with its libraries), so a few hundred plans fit.
DEFAULT_MAX_BYTES = 2 * 2**30
_RUNTIME = re.compile(r"^[a-z0-9-]+-runtime-[0-9a-f]{16}$")
# The use locks this process holds, one per entry it loaded (released at exit).
_USES: dict[Path, IO] = {}


@atexit.register
def _release_uses() -> None:
    for handle in _USES.values():
        with contextlib.suppress(OSError):
            handle.close()
    _USES.clear()


class Entry(Record):
    """One kept package or runtime: its folder, size in bytes and last use (seconds since the
    epoch: its use stamp's time, else the folder's)."""

    kind: Literal["package", "runtime", "record"]
    name: str
    path: str
    bytes: int
    last_use: float


def packages_root(root: Path | None = None) -> Path:
    """Where built packages are kept: <cache>/packages."""
    return (root or cache_root()) / "packages"


def records_root(root: Path | None = None) -> Path:
    """Where traced programs' records are kept: <cache>/records."""
    return (root or cache_root()) / "records"


def max_bytes() -> int:
    """The cache's bound: $PLANNER_CACHE_MAX_BYTES (bytes, or with a KiB/MiB/GiB suffix),
    else DEFAULT_MAX_BYTES; UserError naming the variable for a value that is no size.

    >>> os.environ["PLANNER_CACHE_MAX_BYTES"] = "512MiB"; max_bytes()
    536870912
    >>> del os.environ["PLANNER_CACHE_MAX_BYTES"]; max_bytes() == DEFAULT_MAX_BYTES
    True
    """
    text = os.environ.get("PLANNER_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise UserError(f"PLANNER_CACHE_MAX_BYTES: {e}") from None


def parse_bytes(text: str) -> int:
    """A byte count: digits, optionally with a KiB, MiB or GiB suffix.

    >>> parse_bytes("2GiB"), parse_bytes("1000")
    (2147483648, 1000)
    """
    m = re.fullmatch(r"\s*(\d+)\s*(KiB|MiB|GiB|B)?\s*", text)
    if not m:
        raise ValueError(f"{text!r} is not a byte count (digits, optionally KiB, MiB or GiB)")
    return int(m[1]) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}.get(m[2] or "B", 1)


def entries(root: Path | None = None) -> tuple[Entry, ...]:
    """The packages, runtimes and records kept under `root` (default: the cache folder), least
    recently used first."""
    root = root or cache_root()
    found = [_entry("package", p) for p in _folders(packages_root(root))]
    found += [_entry("runtime", p) for p in _folders(root) if _RUNTIME.match(p.name)]
    found += [_entry("record", p) for p in _folders(records_root(root))]
    # A folder removed while listed (another process's prune) is left out.
    return tuple(sorted((e for e in found if e is not None), key=lambda e: (e.last_use, e.name)))


def prune(limit: int, keep: frozenset[str] = frozenset(),
          root: Path | None = None) -> tuple[Entry, ...]:
    """Remove kept entries, least recently used first, until their total is at most `limit`
    bytes; returns those removed. Never removed: the names in `keep`, the most recently used
    runtime, and what another holder locks (being built, or loaded by a live process)."""
    listed = entries(root)
    total = sum(e.bytes for e in listed)
    runtimes = [e for e in listed if e.kind == "runtime"]
    spared = set(keep) | ({runtimes[-1].name} if runtimes else set())
    removed = []
    for e in listed:
        if total <= limit:
            break
        if e.name in spared or not _remove_unless_held(Path(e.path)):
            continue
        removed.append(e)
        total -= e.bytes
    return tuple(removed)


def mark_used(folder: Path) -> None:
    """Record that this process uses `folder` (a package or runtime): its use stamp touched
    now, and a shared lock on it held while the process lives, so no prune removes it."""
    use = _use_file(folder)
    if use in _USES:
        os.utime(use)
        return
    with contextlib.suppress(OSError):  # a read-only cache: nothing to record, nothing pruned
        handle = open_lock(use)
        fcntl.flock(handle, fcntl.LOCK_SH)
        os.utime(use)
        _USES[use] = handle


def _use_file(folder: Path) -> Path:
    if folder.parent.name in ("packages", "records"):
        return folder.parent / f".{folder.name}.use"
    return folder.parent / f"{folder.name}.use"


def _lock_file(folder: Path) -> Path:
    if folder.parent.name in ("packages", "records"):
        return folder.parent / f".{folder.name}.lock"
    return folder.parent / f"{folder.name}.lock"


def _folders(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir()
                if not p.name.startswith(".") and p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _entry(kind: Literal["package", "runtime", "record"], folder: Path) -> Entry | None:
    try:
        last = _use_file(folder).stat().st_mtime
    except OSError:
        try:
            last = folder.stat().st_mtime
        except OSError:
            return None
    return Entry(kind=kind, name=folder.name, path=str(folder), bytes=_size(folder),
                 last_use=last)


def _size(folder: Path) -> int:
    total = 0
    for top, _, files in os.walk(folder):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, f)).st_size
    return total


def _remove_unless_held(folder: Path) -> bool:
    """Remove `folder` if no one else holds its build or use lock; whether it was removed."""
    try:
        with _held(_lock_file(folder)), _held(_use_file(folder)):
            shutil.rmtree(folder, ignore_errors=True)
            return not folder.exists()
    except BlockingIOError:
        return False
    except OSError:  # a lock that cannot be taken (read-only cache): not ours to remove
        return False


@contextlib.contextmanager
def _held(lock: Path) -> Iterator[None]:
    with open_lock(lock) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def describe(listed: tuple[Entry, ...], now: float | None = None) -> str:
    """`planner cache list`'s text: one line per entry (kind, size, last use, name), then
    the total.

    >>> print(describe((Entry(kind="package", name="torch_a", path="/c/packages/torch_a",
    ...                       bytes=3 * 2**20, last_use=0.0),), now=7200.0))
    package    3.0 MiB  2.0 h ago  torch_a
    total      3.0 MiB  1 entry (1 package, 0 runtimes)
    """
    now = time.time() if now is None else now
    lines = [f"{e.kind:<8} {_mib(e.bytes):>9}  {_ago(now - e.last_use):>9}  {e.name}"
             for e in listed]
    count = {k: sum(e.kind == k for e in listed) for k in ("package", "runtime", "record")}
    kinds = ", ".join(f"{c} {k}{'' if c == 1 else 's'}" for k, c in count.items()
                      if c or k != "record")
    n = len(listed)
    lines.append(f"{'total':<8} {_mib(sum(e.bytes for e in listed)):>9}  {n} "
                 f"entr{'y' if n == 1 else 'ies'} ({kinds})")
    return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.0f} d ago"
