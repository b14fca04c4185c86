"""The trainer's settings (planner/torch/training.py): its keywords split into `planner
plan`'s settings (planner/cli/settings.py) and the optimizer's (planner/torch/optimizers.py),
and data parallelism under torchrun: the ranks of torch.distributed's default group, rank 0's
parameters and plan on every rank, as DDP starts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

# The plan settings that are the optimizer's: the trainer reads them from `optimizer` (a name
# with torch.optim's keywords, or an instance).
OPTIMIZER_SETTINGS = ("train", "lr", "weight_decay", "lr_schedule")


def split(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """trainer's further keywords as (plan settings by flag name, optimizer settings)."""
    from planner.cli.settings import PlanSettings

    if "train" in settings:
        from planner.errors import UserError

        raise UserError("train: the trainer's twin of --train is optimizer= (a name or a "
                        "torch.optim instance)")
    plan_settings = {k: v for k, v in settings.items()
                     if k in PlanSettings.model_fields and k not in OPTIMIZER_SETTINGS}
    rest = {k: v for k, v in settings.items() if k not in plan_settings}
    from planner.torch.optimizers import OLD_NAMES, PLANNER_EXTRAS, TORCH_NAMES

    known = {n for names in TORCH_NAMES.values() for n in names} | set(PLANNER_EXTRAS)
    for name in rest:
        if name not in known | set(OPTIMIZER_SETTINGS) | set(OLD_NAMES):
            from planner.errors import UserError

            raise UserError(f"trainer setting {name}: neither an optimizer setting (torch.optim's "
                            f"{', '.join(sorted(known))}) nor a plan setting (planner plan's "
                            f"flags by name: {', '.join(sorted(PlanSettings.model_fields))})")
    if "lr_schedule" in rest:  # the flag's name for the optimizer's schedule
        from planner.ops.lr_schedule import LRSchedule

        value = rest.pop("lr_schedule")
        rest["schedule"] = LRSchedule.parse(value) if isinstance(value, str) else value
    return plan_settings, rest


def ranks_of(data_parallel: bool | int, settings: dict[str, Any]) -> int:
    """The data-parallel ranks of trainer's `data_parallel` (1 without), from
    torch.distributed's default group; fills ranks_per_host from torchrun's LOCAL_WORLD_SIZE
    when not given. UserError in one line when there is no group to train in."""
    import os

    from planner.errors import UserError

    if data_parallel is False or (data_parallel == 1 and data_parallel is not True):
        return 1
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise UserError("data_parallel: trains the ranks of torch.distributed's default "
                        "process group, and none is initialized; run under torchrun and call "
                        "torch.distributed.init_process_group('gloo') first")
    world = dist.get_world_size()
    if data_parallel is not True and data_parallel != world:
        raise UserError(f"data_parallel {data_parallel}: the process group has {world} ranks; "
                        f"give True (its size) or {world}")
    settings.setdefault("ranks_per_host", int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return world


def broadcast_state(module: Any) -> None:
    """Rank 0's parameters and buffers into every rank's module, as DDP starts."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for value in module.state_dict().values():
            dist.broadcast(value, 0)


def rank0_plan(make: Callable[[], Any]) -> Any:
    """Rank 0's plan (made by `make` there), on every rank of the default group."""
    import json

    import torch.distributed as dist

    from planner.plan import Plan

    box = [make().to_json() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, 0)
    return Plan.from_data(json.loads(box[0]))


# What a rank is about to do with a batch, as same_shapes says it.
ACTIONS = ("step", "evaluate", "plan")


def same_shapes(shapes: Sequence[Sequence[int]], what: str) -> None:
    """UserError in one line, on every rank of the default group, unless every rank is about
    to `what` (step, evaluate, plan: a trainer's example or declared shapes) batches of the
    same shapes: each rank runs the plan of its batch's shapes, made on rank 0, whose
    collectives meet only the same plan's on the other ranks. `shapes`: this rank's feeds'
    shapes. One all-reduce of three integers (the action and a digest of the shapes, the same
    length whatever the shapes) where the ranks agree."""
    import hashlib

    import torch
    import torch.distributed as dist

    from planner.errors import UserError
    from planner.torch.shapes import spell

    key = tuple(tuple(int(d) for d in s) for s in shapes)
    digest = hashlib.sha256(repr(key).encode()).digest()
    mine = [ACTIONS.index(what), *(int.from_bytes(digest[k:k + 7], "little") for k in (0, 7))]
    # The largest of each entry and of its negation: every rank's equal where the largest is
    # minus the largest negation, the smallest.
    both = torch.tensor(mine + [-v for v in mine], dtype=torch.int64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    top = both.tolist()
    if top[:len(mine)] == [-v for v in top[len(mine):]]:
        return
    # They differ: every rank's, to say which (every rank takes this path).
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, (what, key))
    ranks = "; ".join(f"rank {r}: {action} {spell(k)}" for r, (action, k) in enumerate(every))
    raise UserError(f"data_parallel: the ranks' batches differ ({ranks}); every rank runs one "
                    f"plan whose collectives meet the other ranks' only for batches of one "
                    f"shape: feed every rank the same batch size at each step (a "
                    f"DistributedSampler pads the ranks' shares to equal sizes, so a DataLoader "
                    f"with drop_last=False ends every rank on the same smaller batch)")


def optimizer_of(module: Any, optimizer: Any, lr: float | None,
                 settings: Mapping[str, Any], prefix: str) -> Any:
    """The planner's Optimizer of trainer's `optimizer` (a name with torch.optim's keyword
    names, or a torch.optim instance on the module's parameters: planner/torch/optimizers.py);
    UserError in one line for what it cannot honour."""
    from planner.errors import UserError
    from planner.torch.optimizers import from_settings, from_torch

    try:
        if isinstance(optimizer, str):
            return from_settings(optimizer, lr=lr, **settings)
        import torch

        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"optimizer: expected 'sgd', 'momentum', 'adam', 'adamw' or a "
                             f"torch.optim.SGD, Adam or AdamW instance, got "
                             f"{type(optimizer).__name__}")
        # Clipping is no optimizer's setting in PyTorch (clip_grad_norm_ runs before
        # opt.step()): the trainer takes it beside an instance, as the loop would.
        clip = settings.get("clip_grad_norm")
        given = {"lr": lr, **{k: v for k, v in settings.items() if k != "clip_grad_norm"}}
        extra = sorted(k for k, v in given.items() if v is not None)
        if extra:
            raise ValueError(f"trainer setting {extra[0]}: the optimizer instance holds its "
                             f"settings; give it to torch.optim.{type(optimizer).__name__}(...)")
        record = from_torch(optimizer, module, prefix)
        if clip is None:
            return record
        from pydantic import ValidationError

        try:
            return type(record).model_validate({**record.model_dump(), "clip_grad_norm": clip})
        except ValidationError as e:
            raise ValueError(f"trainer setting clip_grad_norm={clip!r}: "
                             f"{e.errors()[0]['msg']}") from None
    except ValueError as e:
        raise UserError(str(e)) from None
