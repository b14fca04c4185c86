"""The committed example plans are exactly what the planner makes today (plans are
deterministic): a planner change that moves a decision shows up as a reviewed plan diff, made
with `python examples/plans/regenerate.py`."""

import importlib.util
from pathlib import Path

REGENERATE = Path(__file__).parents[1] / "examples" / "plans" / "regenerate.py"


def test_committed_example_plans_are_current():
    spec = importlib.util.spec_from_file_location("regenerate_plans", REGENERATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = [path.name for path, text in module.plans().items()
             if not path.exists() or path.read_text() != text]
    assert not stale, f"stale example plans (run examples/plans/regenerate.py): {stale}"
