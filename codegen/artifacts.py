"""What a built library is, recorded when it is built and checked before it is used: its size
and sha256. A cached runtime or a package's schedule library that was truncated (a full disk,
a copy cut short) or changed (a bit flipped) would otherwise be loaded as it is, and the
process dies in the dynamic loader (SIGBUS, SIGILL) instead of rebuilding it.

Only regular files are read, and only once their size matches (a FIFO or a device in their
place is never opened).

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "lib.so"
    >>> _ = p.write_bytes(b"\\x7fELF...")
    >>> r = file_record(p)
    >>> r["bytes"], intact(p, r)
    (7, True)
    >>> _ = p.write_bytes(b"\\x7fELF..!")
    >>> intact(p, r), intact(p, {"bytes": 7}), intact(p.with_name("gone.so"), r)
    (False, False, False)
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path
from typing import Any


def file_record(path: Path) -> dict[str, Any]:
    """{"bytes", "sha256"} of regular file `path`."""
    data = Path(path).read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def intact(path: Path, record: Any) -> bool:
    """Whether `path` is a regular file of the size and sha256 `record` says (False for a
    record that is not one: an old stamp, a hand-edited file)."""
    if not (isinstance(record, dict) and isinstance(record.get("bytes"), int)
            and isinstance(record.get("sha256"), str)):
        return False
    try:
        st = Path(path).lstat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != record["bytes"]:
        return False
    try:
        return file_record(path)["sha256"] == record["sha256"]
    except OSError:
        return False
