"""Crafted .pt2 archives' parts: a pickle that would run code, a zip of given members
(tests/importers/test_pt2_*.py)."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path


class Mkdir:
    """Unpickled, creates the marker directory: the stand-in for any code a pickle could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def zip_members(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for name, data in members.items():
            out.writestr(name, data)
    return buf.getvalue()
