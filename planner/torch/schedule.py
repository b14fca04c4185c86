"""A PyTorch learning-rate scheduler driving a generated executor: `ExecutorOptimizer(ex)` is a
torch.optim.Optimizer whose `param_groups` are the executor's parameter groups (their `lr`
and `weight_decay`, planner/runtime/hyperparameters.py), so any torch.optim.lr_scheduler
works on it:

    opt = ExecutorOptimizer(ex)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    for feeds in batches:
        opt.step()              # the groups' current values into the executor, as opt.step()
        ex.step(feeds)          # reads them
        sched.step()

Its groups carry lr and weight_decay only (momentum and betas are compiled into the plan,
or, with the optimizer's cycle_momentum, written by ex.set_hyperparameters): a scheduler that
cycles them (OneCycleLR's cycle_momentum) is refused by PyTorch itself, as for an optimizer
without them.
"""

from __future__ import annotations

from typing import Any

from planner.importers.pt2.program import require_torch


def ExecutorOptimizer(ex: Any) -> Any:  # noqa: N802 - a class made when torch is imported
    """The executor's parameter groups as a torch.optim.Optimizer (module docstring)."""
    require_torch()
    import torch

    class _ExecutorOptimizer(torch.optim.Optimizer):
        def __init__(self, executor: Any) -> None:
            held = executor.hyperparameters()
            if not held:
                raise ValueError("ExecutorOptimizer: the executor holds no hyperparameters "
                                 "(an inference plan?)")
            self.executor = executor
            groups = [{"params": [torch.zeros(0)], **held[g]} for g in sorted(held)]
            super().__init__(groups, {})

        @torch.no_grad()
        def step(self, closure: Any = None) -> None:
            for k, group in enumerate(self.param_groups):
                self.executor.set_hyperparameters(
                    {name: group[name] for name in ("lr", "weight_decay") if name in group},
                    group=k)

    return _ExecutorOptimizer(ex)
