"""The `torch` extra accepts the user's PyTorch within the tested range; the test suite's exact
pin (the `dev` extra) lies inside it, so the suite tests a version the extra accepts."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _torch(extra: str) -> Requirement:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    (req,) = [Requirement(r) for r in extras[extra] if Requirement(r).name == "torch"]
    return req


def test_the_torch_extra_is_a_range_holding_the_suites_pin():
    ranged, pinned = _torch("torch"), _torch("dev")
    (pin,) = [s.version for s in pinned.specifier if s.operator == "=="]
    assert ranged.specifier.contains(pin)
    assert {s.operator for s in ranged.specifier} == {">=", "<"}  # a range, not a pin
    # A later patch release of the tested minor one is accepted.
    major, minor, *_ = pin.split(".")
    assert ranged.specifier.contains(f"{major}.{minor}.9")
