"""PyTorch models in directly, through torch.export (not ONNX).

    from planner.torch import trainer
    t = trainer(model, (images,), loss=F.cross_entropy, labels=labels, optimizer="sgd", lr=0.1)
    t.step(images, labels); t.params(); t.load_into(model)

    planner graph module.pt2 --train adam        # a program saved with torch.export.save

- `convert(program)`: an ExportedProgram to a planner Graph with parameters and buffers under
  their state_dict names (convert.py; one rule per ATen op family in rules.py);
- `load_pt2(path)`: the Graph of a saved ExportedProgram (`planner graph` and every command
  taking a GRAPH accept a `.pt2` file);
- `trainer(module, example_inputs, loss, labels, ...)`: plan, build and load a training
  executor for a module and PyTorch's own loss (training.py: not trainer.py, which the
  first call's import would bind over this function).

torch is imported only when one of these runs; without it they raise a UserError saying so.
`torch.compile(model, backend="planner")` (backend.py) is registered here when torch is
already imported, and otherwise by the package's entry point, which Dynamo reads itself.
"""

from __future__ import annotations

import sys
from typing import Any

from planner.importers.pt2.program import load_pt2, require_torch
from planner.importers.torch.context import TorchImportError

__all__ = ["TorchImportError", "convert", "load_pt2", "require_torch", "trainer"]


def convert(program: Any, name: str = "torch", module_root: str = "") -> Any:
    from planner.importers.torch.convert import convert as _convert

    return _convert(program, name, module_root)


def trainer(*args: Any, **kwargs: Any) -> Any:
    require_torch()
    from planner.torch.training import trainer as _trainer

    return _trainer(*args, **kwargs)


if "torch._dynamo" in sys.modules or "torch" in sys.modules:
    from planner.torch.backend import register as _register

    _register()
