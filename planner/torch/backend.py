"""`torch.compile(model, backend="planner")`: the planner behind the user's own training loop.

    model = torch.compile(model, backend="planner")          # the one line
    model = torch.compile(model, backend="planner", options={"costs": "analytical"})

Registered as a Dynamo backend on import of `planner.torch`, and by the package's entry point
(group `torch_dynamo_backends` in pyproject.toml), so `backend="planner"` works without the
import. Dynamo splits the Python around the model at graph breaks and re-traces on guard
failures; each graph it hands over becomes a Piece (planner/torch/piece.py): imported by the
ATen front end, planned for the host per call signature (measured costs by default), built,
cached by the plan's digest, and differentiated by the planner's own gradient rules behind an
autograd.Function. The options (costs, target, strategy, memory_budget, precision, fallback,
adaptive, out_dir) are planner/torch/backend_options.py's.
"""

from __future__ import annotations

import itertools
from typing import Any

from planner.torch.backend_options import BackendOptions

NAME = "planner"
_COUNT = itertools.count()


def planner_backend(gm: Any, example_inputs: Any, options: dict[str, Any] | None = None,
                    **unused: Any) -> Any:
    """The Dynamo backend: `gm` (one graph of the model, parameters among its arguments) to a
    callable Dynamo runs in its place. Options are checked here, at the first call of the
    compiled model; `mode=` (Inductor's) is refused as an unknown option."""
    from codegen.build import build_runtime_ahead
    from planner.target.presets import load_target
    from planner.torch.piece import Piece
    from planner.torch.skipped import backend_called, install

    backend_called()  # this frame's compile planned something (planner/torch/skipped.py)
    install(planner_backend)  # again, after a torch._dynamo.reset()
    if unused:
        raise ValueError(f"torch.compile(backend='planner'): {sorted(unused)} are Inductor's; "
                         f"the planner's options go in options={{...}}")
    parsed = BackendOptions.parse(options)
    # A cold kernel library compiles while the graph is planned; a new host's peaks are
    # measured before it starts, not beside the compiler (the trainer's are, with its recipe).
    build_runtime_ahead(first=lambda: load_target(parsed.target))
    return Piece(gm, f"planner_{next(_COUNT)}", parsed)


def register() -> None:
    """Register the backend with Dynamo under "planner" (once; torch already imported)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if _BACKENDS.get(NAME) is None:
        register_backend(name=NAME)(planner_backend)
    from planner.torch.skipped import install

    install(planner_backend)  # a frame Dynamo skips is told, not silently eager
