"""Where the CPU runtime's LAPACK comes from: the scipy-openblas32 wheel (a dependency of the
planner, pyproject.toml), OpenBLAS built for Python packaging by the NumPy and SciPy projects,
with its LAPACK and a pkg-config file that names the library and its symbols' prefix.

Why that wheel: numpy's and scipy's own copies (numpy.libs, scipy.libs) are vendored under
hashed file names with no way to find them but a glob, and numpy's has 64-bit integers and a
suffixed symbol set; PyTorch's CPU wheel links MKL statically and exports no LAPACK; oneDNN has
none. The wheel's symbols carry a prefix (`scipy_`), so the runtime never binds to another
copy loaded in the same process.

The wheel is found without importing it: its package's import loads the library (and starts
OpenBLAS's threads) in this process, which only needs to know where it lies.

Example:
    >>> found = lapack()                                    # doctest: +SKIP
    >>> found.prefix, found.library.name                    # doctest: +SKIP
    ('scipy_', 'libscipy_openblas.so')
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from codegen.errors import BuildError

PACKAGE = "scipy_openblas32"
_MISSING = ("LAPACK not found: the CPU runtime links the scipy-openblas32 wheel's; install the "
            "planner's dependencies (pip install -e .)")


@dataclass(frozen=True)
class Lapack:
    """The library to link (its folder is the runtime's RUNPATH), its symbol prefix and the
    wheel's version (part of the runtime's cache key)."""

    library: Path
    prefix: str
    version: str


def lapack() -> Lapack:
    """The installed wheel's LAPACK, read from its pkg-config file (lib/pkgconfig); BuildError
    in one line where the wheel is absent or that file does not say."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(_MISSING)
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    try:
        text = (lib / "pkgconfig" / "scipy-openblas.pc").read_text()
    except OSError:
        raise BuildError(f"{_MISSING} (the installed one has no pkg-config file)") from None
    library = re.search(r"^Libs:\s*\$\{libdir\}/(\S+\.so)", text, re.M)
    prefix = re.search(r"-DBLAS_SYMBOL_PREFIX=(\w*)", text)
    version = re.search(r"^version=(\S+)", text, re.M)
    if library is None or prefix is None or not (lib / library[1]).is_file():
        raise BuildError(f"{_MISSING} (its pkg-config file names no library and symbol "
                         f"prefix that exist)")
    return Lapack(lib / library[1], prefix[1], version[1] if version else "?")
