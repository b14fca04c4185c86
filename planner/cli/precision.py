"""The training-precision flags of `planner graph` and `planner plan`: the policy and
fp16-mixed's dynamic loss scaling (LossScaling, torch.amp.GradScaler's knobs).

    --precision P                       fp32 | tf32 | bf16-mixed | fp16-mixed
    --loss-scale-growth-interval N      clean steps before the scale grows (default 2000)
    --loss-scale-growth-factor F        its growth, > 1 (default 2)
    --loss-scale-backoff-factor F       its cut on overflow, in (0, 1) (default 0.5)
    --no-loss-scaling                   fp16-mixed without it (GradScaler(enabled=False))

The first scale (2^16, GradScaler's init_scale) is the value of the optimizer-state tensor
`optim/loss_scale` that the caller loads with the parameters (init_params gives 2^16), not a
property of the planned step. The Python API takes the same as
make_training_graph(..., precision="fp16-mixed", loss_scaling=LossScaling(growth_interval=N)).

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser()
    >>> add_precision_flags(p)
    >>> loss_scaling(p.parse_args(["--precision", "fp16-mixed",
    ...                            "--loss-scale-growth-interval", "100"])).growth_interval
    100
    >>> loss_scaling(p.parse_args([])) is None
    True
"""

from __future__ import annotations

import argparse
from typing import Any

from planner.errors import UserError

# flag -> LossScaling field
_FIELDS = {"--loss-scale-growth-interval": "growth_interval",
           "--loss-scale-growth-factor": "growth_factor",
           "--loss-scale-backoff-factor": "backoff_factor"}


def add_precision_flags(p: argparse.ArgumentParser, loss_scaling: bool = True) -> None:
    """--precision, and with `loss_scaling` the fp16 loss scale's flags."""
    from planner.frontend.passes.precision import PRECISIONS

    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="precision policy of the training graph "
                        "(planner/frontend/passes/precision.py): "
                        "bf16-mixed and fp16-mixed run convolutions and matrix products in the "
                        "low type with float32 master weights; tf32 lets the CUDA executor's "
                        "float32 convolutions and GEMMs use TF32 tensor cores on sm_80+ GPUs "
                        "(default: fp32)")
    if not loss_scaling:
        return
    p.add_argument("--loss-scale-growth-interval", type=int, metavar="N",
                   help="fp16-mixed: clean steps before the loss scale grows (default 2000)")
    p.add_argument("--loss-scale-growth-factor", type=float, metavar="F",
                   help="fp16-mixed: the loss scale's growth, > 1 (default 2)")
    p.add_argument("--loss-scale-backoff-factor", type=float, metavar="F",
                   help="fp16-mixed: the loss scale's cut on an overflow, in (0, 1) "
                        "(default 0.5)")
    p.add_argument("--no-loss-scaling", action="store_true",
                   help="fp16-mixed without dynamic loss scaling")


def loss_scaling(args: argparse.Namespace) -> Any:
    """The LossScaling the flags ask for; None for the defaults. UserError naming the flag
    when one is out of range or given with a policy that has no loss scaling."""
    from pydantic import ValidationError

    from planner.graph.optimizer import LossScaling

    given = {flag: getattr(args, field_attr(flag)) for flag in _FIELDS
             if getattr(args, field_attr(flag)) is not None}
    if args.no_loss_scaling:
        given["--no-loss-scaling"] = True
    if not given:
        return None
    flag = next(iter(given))
    if args.precision != "fp16-mixed":
        raise UserError(f"{flag} applies to --precision fp16-mixed (the policy with loss "
                        f"scaling), not {args.precision}")
    if args.no_loss_scaling:
        if len(given) > 1:
            raise UserError(f"{flag} and --no-loss-scaling contradict each other")
        return LossScaling(enabled=False)
    for flag, value in given.items():
        try:
            LossScaling(**{_FIELDS[flag]: value})
        except ValidationError as e:
            raise UserError(f"{flag} {value}: {e.errors()[0]['msg'].lower()}") from None
    return LossScaling(**{_FIELDS[flag]: value for flag, value in given.items()})


def field_attr(flag: str) -> str:
    """argparse's attribute for a flag."""
    return flag.removeprefix("--").replace("-", "_")
