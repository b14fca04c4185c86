"""A zip archive read as one unambiguous list of members, or refused.

Two zip readers can disagree about what an archive holds: one walks the central directory,
another the local headers, a third finds a second archive appended to the first (the "concat"
differential). So this reader accepts an archive only when every byte of the file is accounted
for exactly once, in the order

    local header, name, extra, data[, data descriptor]   (one per member, no gap, no overlap)
    central directory                                     (one entry per member)
    [zip64 end record, zip64 locator] end record          (no comment, nothing after it)

and each member's local header agrees with its central entry (name, flags, method, CRC and
sizes). Refused too: duplicate names, names that are absolute, climb out (`..`), hold a
backslash or a control character; directories and symlinks; encryption; methods other than
stored and deflate; a member whose data does not match its CRC or size; and compressed members
declaring more than RATIO_LIMIT times their compressed bytes, or all members together more
than TOTAL_LIMIT times the file's size (a zip bomb is refused before any of it is inflated;
inflation stops at the declared size). The tiling is checked before any member is inflated:
members sharing bytes (Fifield's overlapping zip bomb) are refused at the cost of reading the
headers.

The file is opened with O_NONBLOCK and checked to be a regular file before it is read, so a FIFO
or a device is refused without blocking.

>>> import io, zipfile
>>> buf = io.BytesIO()
>>> with zipfile.ZipFile(buf, "w") as z:
...     z.writestr("a/b.txt", b"hello")
>>> read_zip_bytes(buf.getvalue(), "x.zip")
{'a/b.txt': b'hello'}
>>> read_zip_bytes(buf.getvalue() + b"PK", "x.zip")
Traceback (most recent call last):
planner.errors.UserError: x.zip: not a zip archive the planner reads (bytes after the end record)
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from planner.errors import UserError

RATIO_LIMIT = 100  # declared size / compressed size of a deflated member, at most
TOTAL_LIMIT = 100  # all members' declared sizes / the file's size, at most
_LOCAL, _CENTRAL, _END = 0x04034B50, 0x02014B50, 0x06054B50
_END64, _LOCATOR64, _DESCRIPTOR = 0x06064B50, 0x07064B50, 0x08074B50
_STORED, _DEFLATED = 0, 8
_ENCRYPTED, _HAS_DESCRIPTOR, _UTF8 = 0x1, 0x8, 0x800
_FLAGS = _HAS_DESCRIPTOR | _UTF8  # the general-purpose flags a plain writer sets
_SATURATED32, _SATURATED16 = 0xFFFFFFFF, 0xFFFF


@dataclass(frozen=True)
class _Entry:
    name: str
    flags: int
    method: int
    crc: int
    csize: int
    usize: int
    offset: int
    zip64: bool


def read_file(path: str | Path) -> bytes:
    """A regular file's bytes; a FIFO, device, socket or directory is refused before it is
    read (opened non-blocking, so opening a FIFO does not wait for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{path}: not a regular file (a FIFO, device or directory); give "
                            "the model file itself")
        os.set_blocking(fd, True)
        chunks, left = [], info.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)


def read_zip(path: str | Path, kind: str = "zip archive") -> dict[str, bytes]:
    """Member name -> bytes of the zip archive at `path` (see the module docstring); `kind`
    names what the file should be, in messages."""
    return read_zip_bytes(read_file(path), str(path), kind)


def read_zip_bytes(data: bytes, where: str, kind: str = "zip archive") -> dict[str, bytes]:
    def refuse(why: str) -> UserError:
        return UserError(f"{where}: not a {kind} the planner reads ({why})")

    entries, directory = _central(data, refuse)
    names: set[str] = set()
    starts: list[int] = []
    ends: list[tuple[int, int, str]] = []
    for entry in entries:
        if entry.name in names:
            raise refuse(f"member {entry.name!r} is listed twice")
        names.add(entry.name)
        start, end = _local(data, entry, refuse)
        starts.append(start)
        ends.append((entry.offset, end, entry.name))
    # Every member's bytes its own before any is inflated: members that share bytes (one
    # deflate stream quoting the next member's as stored blocks) would each inflate to the
    # file's size again, n members to n times it.
    _tiles(ends, directory, refuse)
    declared = sum(e.usize for e in entries)
    if declared > TOTAL_LIMIT * max(len(data), 1):
        raise refuse(f"its members declare {declared} bytes in all, more than {TOTAL_LIMIT} "
                     f"times the file's {len(data)} (a zip bomb?)")
    return {entry.name: _inflate(data[start:start + entry.csize], entry, refuse)
            for entry, start in zip(entries, starts, strict=True)}


def _u(fmt: str, data: bytes, at: int, refuse) -> tuple[int, ...]:
    if at < 0 or at + struct.calcsize(fmt) > len(data):
        raise refuse(f"a record at byte {at} runs past the end of the file")
    return struct.unpack_from(fmt, data, at)


def _end(data: bytes, refuse) -> tuple[int, int, int, int]:
    """(entries, directory size, directory offset, where the end records start)."""
    at = len(data) - 22
    if at < 0 or _u("<I", data, at, refuse)[0] != _END:
        found = data.rfind(struct.pack("<I", _END))
        if found > len(data) - 22:
            raise refuse(f"truncated: its end record is cut off after {len(data) - found} of "
                         "its 22 bytes")
        if found >= 0:
            raise refuse("bytes after the end record")
        raise refuse("no end-of-central-directory record: truncated, or not a zip archive")
    (_, disk, cd_disk, here, count, size, offset, comment) = _u("<IHHHHIIH", data, at, refuse)
    if comment or disk or cd_disk or here != count:
        raise refuse("a multi-disk archive or an archive comment")
    if at >= 20 and _u("<I", data, at - 20, refuse)[0] == _LOCATOR64:
        (_, disk64, end64, disks) = _u("<IIQI", data, at - 20, refuse)
        if disk64 or disks != 1:
            raise refuse("a multi-disk zip64 archive")
        (sig, rest, _, _, d1, d2, n1, n2, size64, offset64) = _u("<IQHHIIQQQQ", data, end64,
                                                                  refuse)
        if sig != _END64 or end64 + 12 + rest != at - 20 or d1 or d2 or n1 != n2:
            raise refuse("a zip64 end record that does not end where its locator starts")
        for small, big in ((count, n1), (size, size64), (offset, offset64)):
            if small not in (big, _SATURATED16, _SATURATED32):
                raise refuse("the zip64 end record and the end record disagree")
        return n1, size64, offset64, end64
    if _SATURATED32 in (size, offset) or count == _SATURATED16:
        raise refuse("a saturated end record without a zip64 end record")
    return count, size, offset, at


def _central(data: bytes, refuse) -> tuple[list[_Entry], int]:
    """The central directory's entries, and where it starts."""
    count, size, offset, tail = _end(data, refuse)
    if offset + size != tail:
        raise refuse("the central directory does not end where the end records start")
    entries, at = [], offset
    for _ in range(count):
        (sig, made, _, flags, method, _, _, crc, csize, usize, nlen, elen, clen, disk, _,
         attrs, local) = _u("<IHHHHHHIIIHHHHHII", data, at, refuse)
        if sig != _CENTRAL:
            raise refuse(f"central directory entry at byte {at} has no signature")
        raw = data[at + 46:at + 46 + nlen]
        extra = data[at + 46 + nlen:at + 46 + nlen + elen]
        at += 46 + nlen + elen + clen
        if at > tail:
            raise refuse("a central directory entry runs past the directory")
        name = _name(raw, flags, refuse)
        if disk:
            raise refuse(f"member {name!r} is on another disk")
        if flags & _ENCRYPTED:
            raise refuse(f"member {name!r} is encrypted")
        if flags & ~_FLAGS:
            raise refuse(f"member {name!r} has flags {flags:#06x}")
        if method not in (_STORED, _DEFLATED):
            raise refuse(f"member {name!r} uses compression method {method}")
        if (made >> 8) == 3 and stat.S_IFMT(attrs >> 16) not in (0, stat.S_IFREG):
            raise refuse(f"member {name!r} is a symlink or special file")
        usize, csize, local, zip64 = _zip64(extra, usize, csize, local, name, refuse)
        entries.append(_Entry(name, flags, method, crc, csize, usize, local, zip64))
    if at != tail:
        raise refuse("the central directory holds bytes after its last entry")
    return entries, offset


def _zip64(extra: bytes, usize: int, csize: int, local: int, name: str,
           refuse) -> tuple[int, int, int, bool]:
    """Sizes and offset, from the zip64 extra field where the 32-bit ones are saturated."""
    want = [v == _SATURATED32 for v in (usize, csize, local)]
    at, found = 0, None
    while at + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, at)
        if tag == 1:
            if found is not None:
                raise refuse(f"member {name!r} has two zip64 fields")
            found = extra[at + 4:at + 4 + length]
        at += 4 + length
    if at != len(extra):
        raise refuse(f"member {name!r} has a malformed extra field")
    if not any(want):
        return usize, csize, local, False
    values = [usize, csize, local]
    if found is None or len(found) < 8 * sum(want):
        raise refuse(f"member {name!r} has saturated sizes and no zip64 field")
    k = 0
    for i, w in enumerate(want):
        if w:
            values[i] = struct.unpack_from("<Q", found, k)[0]
            k += 8
    return values[0], values[1], values[2], True


def _name(raw: bytes, flags: int, refuse) -> str:
    try:
        name = raw.decode("utf-8" if flags & _UTF8 else "ascii")
    except UnicodeDecodeError:
        raise refuse(f"member name {raw!r} is not {'UTF-8' if flags & _UTF8 else 'ASCII'}") \
            from None
    parts = name.split("/")
    if (not name or name.startswith("/") or "\\" in name or ":" in parts[0]
            or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        raise refuse(f"member name {name!r} is not a plain relative file path")
    return name


def _local(data: bytes, entry: _Entry, refuse) -> tuple[int, int]:
    """(where the member's data starts, where its record ends), the local header checked
    against the central entry."""
    at = entry.offset
    (sig, _, flags, method, _, _, crc, csize, usize, nlen, elen) = _u("<IHHHHHIIIHH", data, at,
                                                                       refuse)
    what = f"member {entry.name!r}"
    if sig != _LOCAL:
        raise refuse(f"{what}: no local header at byte {at}")
    if data[at + 30:at + 30 + nlen] != entry.name.encode("utf-8"):
        raise refuse(f"{what}: its local header names another member")
    if flags != entry.flags or method != entry.method:
        raise refuse(f"{what}: its local header and central entry disagree on flags or method")
    start = at + 30 + nlen + elen
    end = start + entry.csize
    if end > len(data):
        raise refuse(f"{what}: its data runs past the end of the file")
    if flags & _HAS_DESCRIPTOR:
        if (crc, csize, usize) not in ((0, 0, 0), (entry.crc, entry.csize, entry.usize),
                                       (entry.crc, _SATURATED32, _SATURATED32)):
            raise refuse(f"{what}: its local header and central entry disagree on sizes")
        if _u("<I", data, end, refuse)[0] == _DESCRIPTOR:
            end += 4
        fmt = "<IQQ" if entry.zip64 else "<III"
        if tuple(_u(fmt, data, end, refuse)) != (entry.crc, entry.csize, entry.usize):
            raise refuse(f"{what}: its data descriptor and central entry disagree")
        end += struct.calcsize(fmt)
    else:
        if (csize, usize) == (_SATURATED32, _SATURATED32):  # sizes in its zip64 field
            extra = data[at + 30 + nlen:start]
            usize, csize = _zip64(extra, usize, csize, 0, entry.name, refuse)[:2]
        if (crc, csize, usize) != (entry.crc, entry.csize, entry.usize):
            raise refuse(f"{what}: its local header and central entry disagree on sizes")
    return start, end


def _inflate(raw: bytes, entry: _Entry, refuse) -> bytes:
    what = f"member {entry.name!r}"
    if entry.method == _STORED:
        if entry.csize != entry.usize:
            raise refuse(f"{what}: stored with two different sizes")
        out = raw
    else:
        if entry.usize > RATIO_LIMIT * max(entry.csize, 1):
            raise refuse(f"{what}: declares {entry.usize} bytes from {entry.csize} compressed "
                         f"(more than {RATIO_LIMIT} to 1: a zip bomb?)")
        inflater = zlib.decompressobj(-15)
        try:
            out = inflater.decompress(raw, entry.usize + 1)
        except zlib.error as e:
            raise refuse(f"{what}: its compressed data is corrupt ({e})") from None
        if len(out) != entry.usize or not inflater.eof or inflater.unused_data:
            raise refuse(f"{what}: its compressed data is not {entry.usize} bytes")
    if zlib.crc32(out) != entry.crc:
        raise refuse(f"{what}: its data does not match its CRC")
    return out


def _tiles(records: list[tuple[int, int, str]], directory: int, refuse) -> None:
    """Member records cover the bytes before the central directory exactly once, in order."""
    at = 0
    for start, end, name in sorted(records):
        if start != at:
            raise refuse(f"member {name!r} starts at byte {start}, not where the previous "
                         f"record ends ({at}): bytes no entry accounts for, or two entries "
                         "sharing bytes")
        at = end
    if at != directory:
        raise refuse(f"bytes {at} to {directory} before the central directory belong to no "
                     "member")
