"""GraphOptions: everything besides the model that decides the graph a command plans.

One record for every command (`graph`, `plan`, `profile`, `fit`) and for planner.torch, read
by planner.frontend.prepare; its flags are added to each command by one function
(planner/cli/graph_flags.py). The target is not among them: a graph depends on the model and
these options only (what depends on the cores is a planning decision, planner.pipeline).

    field          flag                  what it decides
    optimizer      --train OPT, --lr     the training graph's update rule (None: inference)
    precision      --precision P         casts of the training graph (frontend/passes/precision.py)
    loss_scaling   --loss-scale-*        fp16-mixed's dynamic loss scaling (None: defaults)
    loss           --loss KIND[:OUTPUT]  a loss attached to an output (planner/frontend/loss.py)
    keep           --keep NAMES          tensors kept to the step's end and returned by it
    train_dropout  --train-dropout       an ONNX file's flagless Dropouts train too
    accumulate     --accumulate K        micro-batches per optimizer step (gradient
                                         accumulation, planner/ir/accumulation.py)

Data parallelism is not here: its gradient buckets are sized from the target's interconnect,
so its rewrite is planned (planner.pipeline.step_graph, PlanOptions.data_parallel).

Example:
    >>> GraphOptions().training
    False
    >>> GraphOptions(optimizer=Optimizer(kind="adam"), precision="bf16-mixed").training
    True
    >>> try:
    ...     GraphOptions(precision="bf16-mixed")
    ... except ValueError as e:
    ...     print(e.errors()[0]["msg"])
    Value error, --precision needs --train (a policy for training graphs; got bf16-mixed without it)
"""

from __future__ import annotations

from pydantic import Field, model_validator

from planner.frontend.passes.precision import Precision
from planner.graph.optimizer import LossScaling, Optimizer
from planner.ir.record import Record

MAX_ACCUMULATE = 2**31 - 1


class GraphOptions(Record):
    """The options of a graph (module docstring); the defaults give the inference graph."""

    optimizer: Optimizer | None = None
    precision: Precision = "fp32"
    loss_scaling: LossScaling | None = None
    loss: str | None = None
    keep: tuple[str, ...] = ()
    train_dropout: bool = False
    # The executors count micro-batches in a C++ int (schedule.h): at most 2^31 - 1.
    accumulate: int = Field(default=1, ge=1, le=MAX_ACCUMULATE)

    @model_validator(mode="after")
    def _training_only(self) -> GraphOptions:
        if self.optimizer is None and self.precision != "fp32":
            raise ValueError(f"--precision needs --train (a policy for training graphs; "
                             f"got {self.precision} without it)")
        if self.loss_scaling is not None and self.precision != "fp16-mixed":
            raise ValueError(f"loss scaling applies to --precision fp16-mixed (the policy "
                             f"with loss scaling), not {self.precision}")
        if self.accumulate > 1 and self.optimizer is None:
            raise ValueError(f"--accumulate needs --train (micro-batches of an optimizer step; "
                             f"got {self.accumulate} without it)")
        return self

    @property
    def training(self) -> bool:
        return self.optimizer is not None
