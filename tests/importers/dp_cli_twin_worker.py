"""One rank of tests/importers/test_torch_cli_twin.py, as torchrun starts it (RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR/PORT in the environment):
`python -m tests.importers.dp_cli_twin_worker PACKAGE DATA OUT`.

Two runs of TanhNet (seed 0) on this rank's shard of each global batch in DATA: PACKAGE, the
executor `planner build` made of the CLI's plan, loaded as its docs say (the module's
state_dict under the export's `model.` prefix, this rank's shards of it), then
trainer(data_parallel=True, shard_parameters=True, precision="bf16-mixed", memory_budget=
DATA's budget) with the same optimizer. OUT (npz) gets both runs' whole parameters (gathered
from the ranks) and the trainer's plan JSON. The ranks' trainers share one build folder beside
OUT (one plan: the first to take its lock builds it)."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from tests.helpers.optimizer_models import TanhNet

F = torch.nn.functional


def module() -> torch.nn.Module:
    torch.manual_seed(0)
    return TanhNet()


def cli_run(package: str, xs: torch.Tensor, ys: torch.Tensor, shard: slice) -> dict:
    from codegen.load import load
    from planner.graph import init_params
    from planner.ir.graph import Graph
    from planner.runtime.sharded import shard_params

    ex = load(package).Executor()  # joins the default group
    graph = Graph.model_validate(json.loads(ex.plan)["graph"])
    start = {**init_params(graph),
             **{f"model.{k}": v.numpy() for k, v in module().state_dict().items()}}
    ex.load_params(shard_params(ex.plan, start, dist.get_rank()))
    for x, y in zip(xs, ys, strict=True):
        ex.step({"args_0": x[shard].numpy(), "args_1": y[shard].numpy()})
    return {k.removeprefix("model."): v for k, v in ex.state_dict()["model"].items()}


def main(package: str, data: str, out: str) -> None:
    from planner.torch.training import trainer

    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ["DP_TIMEOUT"])))
    held = np.load(data)
    xs, ys = torch.from_numpy(held["x"]), torch.from_numpy(held["y"])
    rows = xs.shape[1] // dist.get_world_size()
    shard = slice(dist.get_rank() * rows, (dist.get_rank() + 1) * rows)
    cli = cli_run(package, xs, ys, shard)
    t = trainer(module(), (xs[0, shard],), loss=F.cross_entropy, labels=ys[0, shard],
                optimizer="adamw", lr=0.01,  # costs: the default, as the CLI's
                out_dir=os.path.join(os.path.dirname(out), "trainer"),  # one build, both ranks
                data_parallel=True, shard_parameters=True, precision="bf16-mixed",
                memory_budget=int(held["budget"]))
    for x, y in zip(xs, ys, strict=True):
        t.step(x[shard], y[shard])
    np.savez(out, **{f"cli:{k}": v for k, v in cli.items()},
             **{f"ours:{k}": v for k, v in t.params().items()},
             plan=np.array(t.plan.to_json()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
