"""One rank of tests/importers/test_torch_optimizers.py's data-parallel trainer run, as
torchrun starts it (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT in the environment):
`python -m tests.importers.dp_trainer_worker - DATA OUT`. Its module starts from a seed of its
own rank (the trainer broadcasts rank 0's), trains its shard of each global batch through
trainer(data_parallel=True, shard_parameters=True) with an AdamW and a StepLR, and writes its
parameters to OUT (npz)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from planner.torch.training import trainer
from tests.helpers.optimizer_models import MLP


def main(data: str, out: str) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ["DP_TIMEOUT"])))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(100 + rank)  # unlike rank 0's: the trainer starts every rank from it
    model = MLP()
    held = np.load(data)
    xs, ys = torch.from_numpy(held["x"]), torch.from_numpy(held["y"])
    rows = xs.shape[1] // world
    shard = slice(rank * rows, (rank + 1) * rows)
    opt = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    t = trainer(model, (xs[0, shard],), loss=torch.nn.functional.mse_loss, labels=ys[0, shard],
                optimizer=opt, costs="analytical", out_dir=f"{out}.build",
                data_parallel=True, shard_parameters=True)
    for x, y in zip(xs, ys, strict=True):
        t.step(x[shard], y[shard])
        sched.step()
    np.savez(out, **t.params())
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[2], sys.argv[3])
