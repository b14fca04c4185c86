"""One rank of tests/importers/test_torch_dp_shapes.py, as torchrun starts it (RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT in the environment):
`python -m tests.importers.dp_shapes_worker MODE DATA OUT`.

MODE `epoch` or `epoch-zero3`: a DistributedSampler and a DataLoader with drop_last=False over
the rows in DATA end each rank's epoch on a smaller batch; the rank trains two epochs through
trainer(data_parallel=True) (`-zero3`: shard_parameters=True too), and the same epochs
through torch's DistributedDataParallel on the module as the trainer started it (rank 0's), in
float32 and float64; OUT (npz) gets each run's parameters and last loss, and the trainer's
shapes planned; then each rank steps batches of other sizes than the other rank's, and makes
a trainer of an example batch of another size than the other rank's: OUT gets what each of
those raised and the parameters after them."""

from __future__ import annotations

import copy
import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from planner.torch.training import trainer

F = torch.nn.functional
BATCH = 8


def model() -> torch.nn.Module:
    torch.manual_seed(100 + dist.get_rank())  # unlike rank 0's: the trainer broadcasts it
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def loader(data: str) -> torch.utils.data.DataLoader:
    held = np.load(data)
    rows = torch.utils.data.TensorDataset(torch.from_numpy(held["x"]),
                                          torch.from_numpy(held["y"]))
    sampler = torch.utils.data.DistributedSampler(rows, shuffle=False)  # drop_last=False
    return torch.utils.data.DataLoader(rows, batch_size=BATCH, sampler=sampler)


def ddp_epochs(module: torch.nn.Module, data: torch.utils.data.DataLoader, dtype: torch.dtype,
               epochs: int) -> tuple[dict[str, np.ndarray], float]:
    """torch's own data-parallel loop: DDP averages each rank's mean gradient over the ranks."""
    ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(module).to(dtype))
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    loss = torch.zeros(())
    for _ in range(epochs):
        for x, y in data:
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x.to(dtype)), y)
            loss.backward()
            opt.step()
    return ({k: v.detach().numpy().copy() for k, v in ddp.module.state_dict().items()},
            float(loss.detach()))


def epochs(data: str, out: str, zero3: bool) -> None:
    net, batches = model(), loader(data)
    x0, y0 = next(iter(batches))
    t = trainer(net, (x0,), loss=F.cross_entropy, labels=y0, optimizer="adam", lr=0.01,
                costs="analytical", out_dir=f"{out}.build", data_parallel=True,
                shard_parameters=zero3)
    last = 0.0
    for _ in range(2):
        for x, y in batches:
            last = t.step(x, y)
    ours = t.params()  # every rank gathers the shards together
    f32, loss32 = ddp_epochs(net, batches, torch.float32, 2)  # net: rank 0's, broadcast
    f64, loss64 = ddp_epochs(net, batches, torch.float64, 2)
    # Uneven batches: shapes each rank holds a plan for (8 rows on rank 0, the last batch's
    # 2 on rank 1), then shapes no rank has planned (4 rows and 3).
    x, y = next(iter(batches))
    said = []
    for rows in ([BATCH, 2][dist.get_rank()], 4 - dist.get_rank()):
        try:
            t.step(x[:rows], y[:rows])
            said.append("no error")
        except Exception as e:  # noqa: BLE001 - the test reads what each rank said
            said.append(f"{type(e).__name__}: {e}")
    after = t.params()
    try:  # a trainer made from example batches of other sizes on the ranks
        rows = BATCH - dist.get_rank()
        trainer(model(), (x[:rows],), loss=F.cross_entropy, labels=y[:rows], optimizer="adam",
                costs="analytical", out_dir=f"{out}.build", data_parallel=True)
        said.append("no error")
    except Exception as e:  # noqa: BLE001
        said.append(f"{type(e).__name__}: {e}")
    np.savez(out, **{f"ours:{k}": v for k, v in ours.items()},
             **{f"after:{k}": v for k, v in after.items()}, said=np.array(said),
             **{f"f32:{k}": v for k, v in f32.items()}, **{f"f64:{k}": v for k, v in f64.items()},
             losses=np.array([last, loss32, loss64]),
             planned=np.array([t.shapes.planned]),
             kept=np.array([k[0][0] for k in t.shapes.kept()]))


def main(mode: str, data: str, out: str) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ["DP_TIMEOUT"])))
    epochs(data, out, zero3=mode == "epoch-zero3")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
