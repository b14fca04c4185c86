"""planner: an ahead-of-time planner for neural-network training steps.

Pipeline: model -> Graph -> (schedule, memory) -> Plan -> generated executor.

`planner.prepare(model, GraphOptions(...))` is the front end (model -> Graph,
planner/frontend/prepare.py); `planner.pipeline.plan` the rest.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Imported on first use: `import planner` stays as light as the version string.
    if name == "prepare":
        from planner.frontend.prepare import prepare

        return prepare
    if name == "GraphOptions":
        from planner.frontend.options import GraphOptions

        return GraphOptions
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
