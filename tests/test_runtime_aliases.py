"""The run-time modules' old names (planner.distributed, planner.checkpoint,
planner.hyperparameters) are the planner.runtime modules themselves, so an executor generated
before they moved (its package, its cached runtime library) still finds what it calls."""

import importlib

import pytest

# What the compiled bindings and the generated packages call, by their old module names.
CALLED = {"distributed": ["join"], "checkpoint": ["state_dict", "load_state_dict"],
          "hyperparameters": ["hyperparameters", "set_hyperparameters"]}


@pytest.mark.parametrize("name", sorted(CALLED))
def test_the_old_name_is_the_run_time_module(name):
    old = importlib.import_module(f"planner.{name}")
    new = importlib.import_module(f"planner.runtime.{name}")
    assert old is new
    for attr in CALLED[name]:
        assert callable(getattr(old, attr)), f"planner.{name}.{attr}"
