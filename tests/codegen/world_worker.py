"""One rank of the checkpoint-across-world-sizes test (tests/codegen/test_checkpoint_worlds.py),
as its own process: `python -m tests.codegen.world_worker PACKAGE_DIR DATA.npz OUT.pkl FROM TO
[CKPT.pkl]`.

With WORLD_SIZE above 1 it joins the gloo group from the environment (as
tests/codegen/dp_worker.py). It starts from the initial parameters in DATA.npz, or from
CKPT.pkl (a pickled state_dict(), as torch.save writes it, of any world size's run), steps its
rows of the global batches FROM..TO there, and rank 0 pickles to OUT.pkl the state_dict() just
after loading the checkpoint ("loaded"; None without one) and at the end ("end"). An error is
printed on one line prefixed `rank R error:` and exits 3."""

from __future__ import annotations

import datetime
import os
import pickle
import sys

import numpy as np


def main(package: str, data_path: str, out_path: str, first: str, last: str,
         checkpoint: str = "") -> int:
    from codegen.load import load
    from planner.runtime.sharded import shard_params

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(
            seconds=float(os.environ.get("DP_TIMEOUT", "30"))))
    data = np.load(data_path)
    x, labels = data["x"], data["labels"]
    rows = slice(rank * (x.shape[1] // world), (rank + 1) * (x.shape[1] // world))
    try:
        ex = load(package).Executor(init=True)
        loaded = None
        if checkpoint:
            with open(checkpoint, "rb") as f:
                ex.load_state_dict(pickle.load(f))
            loaded = ex.state_dict()
        else:
            start = {k[len("param:"):]: data[k] for k in data.files if k.startswith("param:")}
            ex.load_params(shard_params(ex.plan, start, rank), partial=True)
        for step in range(int(first), int(last)):
            ex.step({"x": x[step, rows], "labels": labels[step, rows]})
        end = ex.state_dict()
        if rank == 0:
            with open(out_path, "wb") as f:
                pickle.dump({"loaded": loaded, "end": end}, f)
    except (ValueError, RuntimeError) as e:
        print(f"rank {rank} error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              flush=True)
        os._exit(3)  # noqa: SLF001 - the group may be broken: do not wait in its teardown
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))
