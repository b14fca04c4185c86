"""The host's figures kept as a quiet machine's, for tests that compare plans of `--target
host`: a plan is priced from the figures kept for the machine, and a figure measured busy is
measured again by the first plan that finds the machine quiet (planner.target.host_cache,
tested in tests/target/test_host_figures.py), so two plans made a minute apart could be priced
from different figures. Kept quiet, every later plan reads them as they are."""

from __future__ import annotations

import os
from pathlib import Path

from planner.target.detect import detect
from planner.target.host_cache import RATES, HostMeasurement
from planner.target.records import Target


def keep_host_quiet(cache: Path, budget_s: float = 0.01) -> Target:
    """This host detected into the cache folder `cache` (a short measurement), its kept
    figures then marked as measured quiet; the target detected."""
    was = os.environ.get("PLANNER_CACHE")
    os.environ["PLANNER_CACHE"] = str(cache)
    try:
        target = detect(budget_s=budget_s)
    finally:
        if was is None:
            del os.environ["PLANNER_CACHE"]
        else:
            os.environ["PLANNER_CACHE"] = was
    for entry in (cache / "hosts").glob("*.json"):
        kept = HostMeasurement.model_validate_json(entry.read_text())
        quiet = {f: 0.0 for f in RATES if getattr(kept, f)}
        entry.write_text(kept.model_copy(update={"load": 0.0, "loads": quiet})
                         .model_dump_json(indent=2) + "\n")
    return target
