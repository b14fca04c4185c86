"""The flags of planner.graph.GraphOptions, added to every command that makes a graph (`graph`,
`plan`, `profile`, `fit`) by one function, and read back into the record by another.

    --train OPT            sgd | momentum | adam | adamw: the training graph (default:
                           inference; fit: momentum)
    --lr LR                the optimizer's first learning rate (default per optimizer; a scalar
                           the step reads: the executor's set_hyperparameters changes it)
    --weight-decay WD      the optimizer's first weight decay (default: PyTorch's, 0.01 for
                           adamw, else 0)
    --loss KIND[:OUTPUT]   a loss attached to an output, with a new label input
    --keep NAMES           tensors kept to the step's end, returned by the executor's step
    --train-dropout        ONNX: the Dropouts a training-mode export left without a flag train
    --lr-schedule S        a learning-rate schedule recorded in the plan and run in the step:
                           KIND[:key=value,...], e.g. warmup-cosine:warmup=100,total=10000
                           (planner/ops/lr_schedule.py)
    --accumulate K         micro-batches per optimizer step (gradient accumulation: one step()
                           per micro-batch, the update on every K-th)
    --precision P, --loss-scale-*, --no-loss-scaling     (planner/cli/precision.py)

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser()
    >>> add_graph_flags(p)
    >>> o = graph_options(p.parse_args(["--train", "adam", "--lr", "0.1", "--keep", "a,b"]))
    >>> o.optimizer.kind, o.optimizer.lr, o.keep
    ('adam', 0.1, ('a', 'b'))
    >>> graph_options(p.parse_args([])).training
    False
"""

from __future__ import annotations

import argparse
import math
from typing import Any

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


def add_graph_flags(p: argparse.ArgumentParser, train: str | None = None) -> None:
    """GraphOptions' flags on command `p`; `train`: its default optimizer (None: inference)."""
    from planner.cli.precision import add_precision_flags

    p.add_argument("--train", choices=OPTIMIZERS, default=train,
                   help="the training graph (forward, backward, updates) with this optimizer"
                        + (f" (default: {train})" if train else ""))
    p.add_argument("--lr", type=non_negative_number, default=None,
                   help="the optimizer's first learning rate (default: per optimizer; a scalar "
                        "the step reads: the executor's set_hyperparameters changes it, "
                        "docs/training.md)")
    p.add_argument("--weight-decay", type=non_negative_number, default=None,
                   help="the optimizer's first weight decay (default: PyTorch's, 0.01 for "
                        "adamw, else 0)")
    p.add_argument("--lr-schedule", metavar="KIND[:KEY=VALUE,...]", type=lr_schedule,
                   help="a learning-rate schedule recorded in the plan, computed in the step "
                        "from the optimizer steps taken: constant, warmup, cosine, "
                        "warmup-cosine, step or one-cycle, with PyTorch's parameters "
                        "(warmup-cosine:warmup=100,total=10000; docs/training.md)")
    p.add_argument("--loss", metavar="KIND[:OUTPUT][?OPTIONS]", help=LOSS_HELP)
    p.add_argument("--keep", metavar="NAMES", type=kept_names,
                   help="tensors (comma-separated) to keep to the step's end, so that the "
                        "executor's step returns them: graph outputs, never reused memory")
    p.add_argument("--train-dropout", action="store_true",
                   help="ONNX: train the Dropouts a training-mode export wrote without a "
                        "training flag (the import warns naming them)")
    p.add_argument("--accumulate", metavar="K", type=positive_int, default=1,
                   help="micro-batches per optimizer step: the graph's batch is one "
                        "micro-batch, each step() takes one and every K-th applies the "
                        "update to the mean of their gradients (docs/training.md)")
    add_precision_flags(p)


def lr_schedule(text: str) -> Any:
    """argparse type: a learning-rate schedule, KIND[:key=value,...]."""
    from planner.ops.lr_schedule import LRSchedule

    try:
        return LRSchedule.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def graph_options(args: argparse.Namespace) -> Any:
    """The GraphOptions the flags ask for; UserError naming the flag when they contradict
    (planner.cli.settings.graph_options: the trainer's too)."""
    from planner.cli.settings import graph_options as from_settings

    return from_settings(args)


def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0 (argparse names the flag when it fails)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


def non_negative_number(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def kept_names(text: str) -> list[str]:
    """argparse type of --keep: comma-separated tensor names."""
    return [n for n in (part.strip() for part in text.split(",")) if n]


LOSS_HELP = ("attach a loss to an output (default: the only one) with a new label input: "
             "cross-entropy (int64 class ids; classes on axis 1 as PyTorch's; options "
             "?axis=A&ignore_index=I&label_smoothing=S) or mse (float targets), e.g. "
             "--loss cross-entropy:logits")
