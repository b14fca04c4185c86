"""One rank of tests/codegen/test_dp_budget_ranks.py, run as its own process:
`python -m tests.codegen.budget_dp_worker PACKAGES DATA.npz OUTS STEPS` (PACKAGES and OUTS
each a list, os.pathsep between).

It joins the gloo group from the environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE),
and for each package in turn, in the one process group: loads the parameters in DATA.npz
(`param:<name>`; a ZeRO-3 plan its rank's shards of them), steps STEPS times on its rank's
feeds there (`feed<rank>:<name>`) and writes the executor's params() (a ZeRO-3 plan's: its
shards) to its OUT. A failure is printed on one line prefixed `rank R error:`, exit 3."""

from __future__ import annotations

import datetime
import os
import sys

import numpy as np


def main(packages: str, data_path: str, outs: str, steps: int) -> int:
    import torch.distributed as dist

    from codegen.load import load
    from planner.runtime.sharded import shard_params

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    data = np.load(data_path)
    params = {k.removeprefix("param:"): data[k] for k in data.files if k.startswith("param:")}
    prefix = f"feed{rank}:"
    feeds = {k.removeprefix(prefix): data[k] for k in data.files if k.startswith(prefix)}
    try:
        for pkg, out in zip(packages.split(os.pathsep), outs.split(os.pathsep), strict=True):
            ex = load(pkg).Executor(init=True)
            ex.load_params(shard_params(ex.plan, params, rank), partial=True)
            for _ in range(steps):
                ex.step(feeds)
            np.savez(out, **ex.params())
    except Exception as e:  # one line for the test to show
        print(f"rank {rank} error: {type(e).__name__}: {e}".replace("\n", " "), flush=True)
        return 3
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
