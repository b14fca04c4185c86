"""Writing the user's files so that nothing is lost: every write goes to a temporary file in
the target's folder and is renamed into place (a failed write leaves the old file whole), a
target that is not a regular file is never read or replaced, and folders are locked while a
command rebuilds them.

Example:
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> atomic_write(os.path.join(d, "a.json"), "{}\\n")
    >>> open(os.path.join(d, "a.json")).read(), sorted(os.listdir(d))
    ('{}\\n', ['a.json'])
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from planner.errors import NotWritten, UserError


def cache_root() -> Path:
    """The planner's cache folder (built runtimes, measured hosts): $PLANNER_CACHE, else
    ~/.cache/planner (without $HOME, the user's home from the password database); UserError
    saying so where there is neither (a container's user with no entry there)."""
    env = os.environ.get("PLANNER_CACHE")
    if env:
        if Path(env).exists() and not Path(env).is_dir():
            raise UserError(f"PLANNER_CACHE {env!r}: is not a folder; set it to a folder for "
                            "the planner's kernels and measurements")
        return Path(env)
    try:
        return Path.home() / ".cache" / "planner"
    except (RuntimeError, KeyError):  # Path.home(): no $HOME and no home for this uid
        raise UserError("no cache folder: $HOME is not set and this user has no home "
                        "directory; set PLANNER_CACHE to a folder to keep the planner's "
                        "kernels and measurements in") from None


def atomic_write(path: str | Path, text: str | bytes) -> None:
    """Write `text` to `path` through a temporary file renamed over it (same folder, so the
    rename is atomic); the temporary file is removed when anything fails, and an OSError
    (a full disk, a read-only folder) becomes NotWritten naming `path`."""
    p = Path(path)
    data = _utf8(path, text) if isinstance(text, str) else text
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as e:  # a read-only folder, a file where the folder should be
        raise NotWritten(f"{path}: not written ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if p.exists():
            os.chmod(tmp, stat.S_IMODE(p.stat().st_mode))
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):  # ENOSPC, EDQUOT, EIO: the message names the file
            raise NotWritten(f"{path}: not written ({e.strerror or e})") from None
        raise


def _utf8(path: str | Path, text: str) -> bytes:
    """`text` as UTF-8, or UserError before anything is written (readers refuse what cannot be
    encoded, naming the field; this names the file for text made some other way)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{path}: not written: {ascii(text[e.start])} at character {e.start} is "
                        f"a lone surrogate, not text") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def holds(path: str | Path, text: str | bytes) -> bool:
    """Whether `path` is a regular file holding exactly `text`. Anything else (absent, a FIFO,
    a device, a folder) is False, and is never opened: its size is compared first."""
    p = Path(path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        st = p.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
        return False
    return p.read_bytes() == data


def check_target(path: str | Path) -> None:
    """Refuse an output path that exists but is not a regular file (a folder, a FIFO, a device,
    a symlink to one): replacing it would be wrong, and reading it may never end."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise UserError(f"{path}: cannot use as output ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path}: is not a regular file; not writing over it")


@contextlib.contextmanager
def folder_lock(folder: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (a `.NAME.lock` file beside it) for the block: two
    commands writing one folder take turns."""
    f = Path(folder)
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file among its parents, a read-only parent
        raise UserError(f"{f.parent}: cannot be made ({e.strerror or e})") from None
    with open_lock(f.parent / f".{f.name}.lock") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def folder_lock_if_writable(folder: str | Path) -> Iterator[bool]:
    """folder_lock's block, yielding True; where no lock file can be made (a read-only cache,
    its folder not creatable) the block runs unlocked, yielding False: a reader needs no lock
    to read what is kept, only a writer does (and cannot write there anyway)."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(folder_lock(folder))
            locked = True
        except UserError:
            raise
        except OSError:
            locked = False
        yield locked


def open_lock(path: Path) -> Any:
    """Lock file `path` opened for flock, created if absent. Opening never blocks: a FIFO or
    another special file in its place (which an open for writing would wait on forever) is
    refused, naming it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno not in (errno.ENXIO, errno.ELOOP):  # ENXIO: a FIFO with no reader
            raise
        raise UserError(f"{path}: lock file is not a regular file; remove it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path}: lock file is not a regular file; remove it")
    return os.fdopen(fd, "a")


def write_text(path: str, text: str | bytes, force: bool = False) -> bool:
    """Write `text` to `path`, refusing to replace a different existing file unless `force`.

    Returns False when the file already holds exactly this text (nothing written, so build
    tools watching timestamps see no change). The write is atomic (planner.io.write): a failure
    leaves the old file whole. A target that is not a regular file (a FIFO, /dev/full, a
    folder) is refused before anything is read from it.
    """
    check_target(path)
    if holds(path, text):
        return False
    if Path(path).exists() and not force:
        raise UserError(f"{path} exists and differs; pass --force to overwrite it")
    atomic_write(path, text)
    return True


def write_generated_page(argv: list[str] | None, description: str, page: str) -> int:
    """The command line of a generated docs page (`python -m ... -o docs/PAGE.md`): `page`
    written to -o, or to stdout without it."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description=description)
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    args = p.parse_args(argv)
    if args.output:
        atomic_write(args.output, page)
    else:
        sys.stdout.write(page)
    return 0
