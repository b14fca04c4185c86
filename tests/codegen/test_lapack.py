"""Where the CPU runtime's LAPACK comes from (codegen/lapack.py): the scipy-openblas32 wheel's
library, whose symbols carry the prefix the kernels are compiled with, and a one-line
BuildError where the wheel is not installed."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.errors import BuildError
from codegen.lapack import lapack


def test_the_wheels_library_has_the_routines_the_kernels_call():
    found = lapack()
    library = ctypes.CDLL(str(found.library))
    for routine in ("sgetrf", "sgetrs", "sgetri", "spotrf", "ssyevd", "sgesdd", "sgeqrf", "sorgqr",
                    "dgemm", "dgetrf", "dgetrs"):
        assert hasattr(library, f"{found.prefix}{routine}_"), routine
    assert hasattr(library, f"{found.prefix}openblas_set_num_threads")


def test_the_wheel_is_found_without_loading_it():
    """Importing the wheel's package loads OpenBLAS into the process (and its threads): the
    build only reads where it lies."""
    code = ("import sys; from codegen.lapack import lapack; lapack(); "
            "print('scipy_openblas32' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


def test_an_absent_wheel_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy_openblas32", None)  # find_spec fails as if absent
    with pytest.raises(BuildError, match=r"LAPACK not found: .*scipy-openblas32.*pip install") \
            as e:
        lapack()
    assert "\n" not in str(e.value)
