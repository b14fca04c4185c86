"""PlanSettings: every setting of `planner plan`, by its flag's name, behind both the command
line and planner.torch.trainer, so the two cannot drift.

A flag `--memory-budget 11GiB` is the field `memory_budget` ("11GiB" or 11 * 2**30 from
Python); the command line fills the record from its parsed flags, `trainer(..., memory_budget=
"11GiB")` from its keywords, and both read it through the same two functions:

    graph_options(settings)   the GraphOptions of the training graph (optimizer, precision,
                              loss scaling, accumulation, kept tensors)
    plan_options(settings)    the PlanOptions of planning (strategy, memory budget and the
                              user's recompute / offload / keep pins and region budgets, data
                              parallelism and ZeRO sharding, schedule variants)

Errors name the setting as the caller spells it: `spelled(message, "python")` turns the
flags in a message into keywords (`--memory-budget` -> `memory_budget`, `--train` ->
`optimizer`, the trainer's name for it). Flags of the command line alone: the graph file
(the trainer's module), -o/--force/--json (the plan file written and its summary), and
--train-dropout (ONNX files' flagless Dropouts; a torch.export trace records every mode).

Example:
    >>> s = PlanSettings(train="adam", precision="bf16-mixed", memory_budget="1MiB",
    ...                  recompute="layer1", region_budget={"layer2": "64KiB"})
    >>> graph_options(s).precision, plan_options(s).memory.budget_bytes
    ('bf16-mixed', 1048576)
    >>> memory = plan_options(s).memory
    >>> [p.name for p in memory.pins], memory.region_budgets[0].bytes
    (['layer1'], 65536)
    >>> try:
    ...     settings_of({"accumulate": 0}, "python")
    ... except UserError as e:
    ...     print(e)
    accumulate 0: input should be greater than or equal to 1
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from planner.errors import UserError
from planner.frontend.options import MAX_ACCUMULATE, GraphOptions
from planner.frontend.passes.precision import Precision
from planner.ir.record import Record
from planner.ops.lr_schedule import LRSchedule

Spelling = Literal["flags", "python"]
# Flags whose Python twin has another name (the trainer's own argument).
PYTHON_NAMES = {"train": "optimizer", "graph": "module"}
# `planner plan` flags with no Python twin, and why (tests/test_plan_settings.py).
CLI_ONLY = {"graph": "the trainer's module is the graph",
            "output": "the plan file the command writes",
            "force": "overwrite the plan file", "json": "the command's summary as JSON",
            "help": "argparse's help",
            "train_dropout": "ONNX files' flagless Dropouts; torch.export records each mode",
            "batch_sizes": "a plan file per zoo batch size; a trainer plans each batch it is "
                           "fed (or trainer(shapes=[...]) up front)",
            "batch_range": "a zoo graph's plan for a range of batches; a trainer's plan is a "
                           "range (trainer(shapes=[...]) declares its largest)"}


def _names(value: Any) -> tuple[str, ...]:
    """One name or several (a repeated flag's list)."""
    if isinstance(value, str):
        return (value,)
    return tuple(value or ())


class PlanSettings(Record):
    """`planner plan`'s settings by flag name (module docstring); the defaults are the flags'."""

    # ---- the graph (planner/cli/graph_flags.py, planner/cli/precision.py) -----------------
    train: Literal["sgd", "momentum", "adam", "adamw"] | None = None
    lr: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    weight_decay: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    lr_schedule: LRSchedule | None = None
    loss: str | None = None
    keep: tuple[str, ...] = ()
    train_dropout: bool = False
    accumulate: int = Field(default=1, ge=1, le=MAX_ACCUMULATE)
    precision: Precision = "fp32"
    loss_scale_growth_interval: int | None = None
    loss_scale_growth_factor: float | None = None
    loss_scale_backoff_factor: float | None = None
    no_loss_scaling: bool = False
    # ---- planning (planner/cli/plan.py, planner/cli/decisions.py) --------------------------
    target: str = "host"
    costs: str | None = None
    strategy: Literal["uniform", "paper", "optimized"] = "optimized"
    intra: int | None = Field(default=None, ge=1)
    inter: int | None = Field(default=None, ge=1)
    grid: bool = False
    min_team_us: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    memory_budget: str | None = None  # bytes: 11GiB, 12GB, 1e9 (an int from Python)
    keep_tensor: tuple[str, ...] = ()
    recompute: tuple[str, ...] = ()
    offload: tuple[str, ...] = ()
    region_budget: tuple[str, ...] = ()  # PREFIX=BYTES each ({prefix: bytes} from Python)
    recompute_products: bool = False  # matrix products and convolutions recomputable too
    decisions: str | None = None  # a JSON file of the same decisions
    data_parallel: int = Field(default=1, ge=1, le=4096)
    ranks_per_host: int = Field(default=1, ge=1, le=4096)
    no_variants: bool = False
    interconnect: str | None = None  # a measured link's JSON file
    bucket_bytes: int | None = Field(default=None, ge=1)
    shard_optimizer: bool = False
    shard_parameters: bool = False
    no_evaluation: bool = False

    @field_validator("lr_schedule", mode="before")
    @classmethod
    def _schedule(cls, v: Any) -> Any:
        return LRSchedule.parse(v) if isinstance(v, str) else v

    @field_validator("keep", mode="before")
    @classmethod
    def _kept(cls, v: Any) -> Any:
        if isinstance(v, str):
            return tuple(n for n in (part.strip() for part in v.split(",")) if n)
        return _names(v)

    @field_validator("keep_tensor", "recompute", "offload", mode="before")
    @classmethod
    def _pins(cls, v: Any) -> Any:
        return _names(v)

    @field_validator("region_budget", mode="before")
    @classmethod
    def _regions(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            return tuple(f"{k}={b}" for k, b in v.items())
        return _names(v)

    @field_validator("memory_budget", mode="before")
    @classmethod
    def _bytes(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        return v


def settings_of(values: Mapping[str, Any], spelling: Spelling) -> PlanSettings:
    """PlanSettings of flag-named `values` (unknown names and refused values: UserError in one
    line naming the setting as `spelling` spells it)."""
    unknown = sorted(set(values) - set(PlanSettings.model_fields))
    if unknown:
        raise UserError(f"{_spell(unknown[0], spelling)}: not a plan setting; expected one of "
                        f"{', '.join(_spell(f, spelling) for f in PlanSettings.model_fields)}")
    try:
        return PlanSettings(**values)
    except ValidationError as e:
        first = e.errors()[0]
        name = _spell(str(first["loc"][0]), spelling) if first["loc"] else "settings"
        msg = first["msg"].removeprefix("Value error, ")
        given = first.get("input")
        shown = f" {given!r}" if isinstance(given, str) else f" {given}" if given is not None \
            else ""
        raise UserError(f"{name}{shown}: {msg[:1].lower()}{msg[1:]}") from None


def from_flags(args: Any) -> PlanSettings:
    """PlanSettings of the command line's parsed flags (an argparse Namespace)."""
    return settings_of({f: getattr(args, f) for f in PlanSettings.model_fields
                        if hasattr(args, f)}, "flags")


def _spell(field: str, spelling: Spelling) -> str:
    if spelling == "python":
        return PYTHON_NAMES.get(field, field)
    return "--" + field.replace("_", "-")


def spelled(message: str, spelling: Spelling) -> str:
    """`message` (naming flags) with each flag as `spelling` names it.

    >>> spelled("--precision needs --train (a policy)", "python")
    'precision needs optimizer (a policy)'
    """
    if spelling == "flags":
        return message
    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)",
                  lambda m: PYTHON_NAMES.get(m[1].replace("-", "_"), m[1].replace("-", "_")),
                  message)


def graph_options(s: Any, optimizer: Any = None) -> GraphOptions:
    """The GraphOptions `s` asks for (PlanSettings, or any object with its fields: the other
    commands' parsed flags); `optimizer`: a planner.graph.Optimizer made elsewhere (the
    trainer's), in place of train, lr, weight_decay and lr_schedule. UserError naming the
    flag."""
    from planner.cli.precision import loss_scaling
    from planner.graph.optimizer import Optimizer

    if s.train is None and (s.lr is not None or s.weight_decay is not None
                            or s.lr_schedule is not None):
        raise UserError("--lr, --weight-decay and --lr-schedule need --train")
    scaling = loss_scaling(s)
    try:
        if optimizer is None and s.train is not None:
            optimizer = Optimizer.parse(s.train, lr=s.lr, weight_decay=s.weight_decay,
                                        schedule=s.lr_schedule)
        return GraphOptions(optimizer=optimizer, precision=s.precision, loss_scaling=scaling,
                            loss=s.loss, keep=tuple(s.keep or ()),
                            train_dropout=s.train_dropout, accumulate=s.accumulate)
    except ValidationError as e:
        first = e.errors()[0]
        flag = FIELD_FLAGS.get(first["loc"][0]) if first["loc"] else None
        said = first["msg"].removeprefix("Value error, ")
        raise UserError(f"{flag} {first['input']}: {said[:1].lower()}{said[1:]}" if flag
                        else said) from None


# GraphOptions' fields a flag sets directly: a refused value names its flag.
FIELD_FLAGS = {"accumulate": "--accumulate", "lr": "--lr", "weight_decay": "--weight-decay"}


def read_link(path: str | None) -> Any:
    """The Interconnect record in file `path` (planner profile --all-reduce), or None."""
    if path is None:
        return None
    from planner.io.read import read_json
    from planner.target.interconnect import Interconnect

    try:
        return Interconnect.model_validate(read_json(path, "interconnect"))
    except ValidationError as e:
        first = e.errors()[0]
        raise UserError(f"--interconnect {path}: {'.'.join(map(str, first['loc']))}: "
                        f"{first['msg']}") from None


def plan_options(s: PlanSettings) -> Any:
    """The PlanOptions `s` asks for (its interconnect file read). UserError naming the
    flag."""
    from planner.cli.decisions import memory_decisions
    from planner.cli.flags import flag_message
    from planner.memory.options import MemoryOptions, parse_budget
    from planner.pipeline import PlanOptions
    from planner.schedule import ScheduleOptions
    from planner.schedule.parallel import DataParallelOptions

    budget = (parse_budget(s.memory_budget, "--memory-budget")
              if s.memory_budget is not None else None)
    try:
        return PlanOptions(
            schedule=ScheduleOptions(strategy=s.strategy, intra=s.intra, inter=s.inter,
                                     grid=s.grid, min_team_seconds=s.min_team_us * 1e-6),
            memory=MemoryOptions(budget_bytes=budget, **memory_decisions(s)),
            data_parallel=DataParallelOptions(ranks=s.data_parallel,
                                              bucket_bytes=s.bucket_bytes,
                                              ranks_per_host=s.ranks_per_host,
                                              shard_optimizer=s.shard_optimizer,
                                              shard_parameters=s.shard_parameters,
                                              link=read_link(s.interconnect)),
            variants=not s.no_variants)
    except ValidationError as e:
        raise UserError(flag_message(e) or e.errors()[0]["msg"].removeprefix("Value error, ")
                        ) from None
