"""The suite's plans of this machine are priced by the analytical model unless a test asks for
measured costs itself (tests/costs/test_host_costs.py, tests/importers/test_torch_costs.py):
measuring every kernel a test plans on the host (the default, planner.costs.host_costs) would
make the suite profile the machine first; the numbers the tests check do not depend on it."""

import os

os.environ.setdefault("PLANNER_COSTS", "analytical")
