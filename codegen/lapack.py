"""Where the CPU runtime's LAPACK comes from: the scipy-openblas32 wheel (a dependency of the
planner, pyproject.toml), OpenBLAS built for Python packaging by the NumPy and SciPy projects,
with its LAPACK, a pkg-config description and the functions that say where it lies.

Why that wheel: numpy's and scipy's own copies (numpy.libs, scipy.libs) are vendored under
hashed file names with no way to find them but a glob, and numpy's has 64-bit integers and a
suffixed symbol set; PyTorch's CPU wheel links MKL statically and exports no LAPACK; oneDNN has
none. The wheel's symbols carry a prefix (`scipy_`), so the runtime never binds to another
copy loaded in the same process.

Example:
    >>> found = lapack()                                    # doctest: +SKIP
    >>> found.prefix, found.library.name                    # doctest: +SKIP
    ('scipy_', 'libscipy_openblas.so')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from codegen.errors import BuildError

WHEEL = "scipy-openblas32"
_MISSING = (f"LAPACK not found: the CPU runtime links the {WHEEL} wheel's; install the "
            f"planner's dependencies (pip install -e .)")


@dataclass(frozen=True)
class Lapack:
    """The library to link (its folder is the runtime's RUNPATH), its symbol prefix and the
    wheel's version (part of the runtime's cache key)."""

    library: Path
    prefix: str
    version: str


def lapack() -> Lapack:
    """The installed wheel's LAPACK; BuildError in one line where it is absent or damaged."""
    try:
        import scipy_openblas32 as wheel
    except ImportError:
        raise BuildError(_MISSING) from None
    library = Path(wheel.get_lib_dir()) / wheel.get_library(fullname=True)
    flags = re.search(r"-DBLAS_SYMBOL_PREFIX=(\w*)", wheel.get_pkg_config())
    if not library.is_file() or flags is None:
        raise BuildError(f"{_MISSING} (the installed one has no {library.name} or symbol "
                         f"prefix)")
    return Lapack(library, flags[1], getattr(wheel, "__version__", "?"))
