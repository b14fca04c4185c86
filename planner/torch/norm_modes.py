"""BatchNorm settings the trainer's step cannot hold, refused in one line before the trace.

`BatchNorm(momentum=None)` keeps a cumulative moving average: each training call's running
statistics move by 1 / num_batches_tracked (after its increment), a factor PyTorch reads as a
Python number from the counter, which torch.export cannot trace (it fails with a
data-dependent-guard error pointing nowhere useful) and which the planner's BatchNorm would
need as a value of the step. A BatchNorm in eval() updates nothing, so its momentum is never
read: left alone. `track_running_stats=False` (batch statistics in train() and eval() alike)
is planned (planner/importers/torch/rules.py, batch_norm_no_stats).

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3, momentum=None))
    >>> print(cumulative_norms(net, "Sequential"))  # doctest: +ELLIPSIS
    Sequential: module '1' (BatchNorm1d) has momentum=None (a cumulative moving average...
    >>> print(cumulative_norms(net.eval(), "Sequential"))
    None
"""

from __future__ import annotations

from typing import Any


def cumulative_norms(module: Any, name: str) -> str | None:
    """One line naming the first BatchNorm of `module` in train() with running statistics and
    momentum=None (module docstring), or None."""
    from torch.nn.modules.batchnorm import _BatchNorm

    for path, m in module.named_modules():
        if (isinstance(m, _BatchNorm) and m.training and m.track_running_stats
                and m.momentum is None):
            where = f"module {path!r}" if path else "the module"
            return (f"{name}: {where} ({type(m).__name__}) has momentum=None (a cumulative "
                    f"moving average, each step's factor 1/num_batches_tracked), which the "
                    f"trainer does not plan; give it a momentum (0.1 is PyTorch's default) or "
                    f"train it with torch.compile(model, backend=\"planner\")")
    return None
