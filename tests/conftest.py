"""The suite's plans of this machine are priced by the analytical model unless a test asks for
measured costs itself (tests/costs/test_host_costs.py, tests/importers/test_torch_costs.py):
measuring every kernel a test plans on the host (the default, planner.costs.host_costs) would
make the suite profile the machine first; the numbers the tests check do not depend on it.

Tiers: `make test` (CI: a fresh clone in under 20 minutes on 2 cores) runs every test but those
of an opt-in marker, and of each module with opt-in cases its `ci_sample` case(s)
(tests/test_ci_tiers.py); `make test-all` adds the `slow` tier (the larger cases: more models, more
ranks, sanitizer builds, the generated files' freshness) and the `nvcc` one (the CUDA runtime
built and executors compiled against it; CI compiles the kernel sources to PTX only); the whole
OpInfo sweep and the whole matrix through torch.compile have targets of their own."""

import os
import sys

import pytest

os.environ.setdefault("PLANNER_COSTS", "analytical")

# Markers whose tests run only when `-m` names them.
OPT_IN = {"slow": "a larger case (the slow tier)",
          "nvcc": "a build of the CUDA runtime (minutes of nvcc; the slow tier)",
          "opinfo_full": "the whole OpInfo sweep",
          "compile_full": "the whole matrix through torch.compile(backend='planner')"}


def pytest_collection_modifyitems(config, items):
    """Tests marked with an OPT_IN marker run only when asked for by `-m <marker>`."""
    expr = config.getoption("markexpr") or ""
    for marker, what in OPT_IN.items():
        if marker in expr and f"not {marker}" not in expr:
            continue
        skip = pytest.mark.skip(reason=f"{what}: run with -m {marker}"
                                + (" (make test-all)" if marker in ("slow", "nvcc") else ""))
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    """Each test module starts on empty Dynamo caches. They are the process's: every compiled
    nn.Module runs through one wrapper frame (torch._dynamo.external_utils.wrap_inline), so
    past `recompile_limit` (8) compiles in one worker Dynamo ran a later module's model
    eagerly, and a test of the backend passed on PyTorch's own results; hitting the limit
    inside a module fails its test instead. (Per module, not per test: a module's compiled
    fixture stays compiled across its tests.)"""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()
        dynamo.config.fail_on_recompile_limit_hit = True
        backend = sys.modules.get("planner.torch.backend")
        if backend is not None:  # reset() dropped the skipped-frame callbacks
            from planner.torch.skipped import install
            install(backend.planner_backend)
    yield
