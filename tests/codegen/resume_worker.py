"""One rank of the sharded checkpoint test (tests/codegen/test_sharded_checkpoint.py), as its
own process: `python -m tests.codegen.resume_worker PACKAGE_DIR DATA.npz OUT.pkl`.

It joins the gloo group from the environment (as tests/codegen/dp_worker.py), then, from the
initial parameters in DATA.npz, trains its shard of every global batch there once straight
through and once stopped halfway: the stopped executor's state_dict() goes through pickle (as
torch.save would write it), a new executor loads it and trains the rest. OUT.pkl holds both
runs' final state_dict(). PACKAGE_DIR and OUT.pkl may each be a list (os.pathsep between),
run one after the other in the one process group. An error is printed on one line prefixed
`rank R error:` and exits 3."""

from __future__ import annotations

import datetime
import os
import pickle
import sys

import numpy as np


def _steps(ex, data, rank: int, world: int, steps: range) -> None:
    x, labels = data["x"], data["labels"]
    rows = slice(rank * (x.shape[1] // world), (rank + 1) * (x.shape[1] // world))
    for step in steps:
        ex.step({"x": x[step, rows], "labels": labels[step, rows]})


def main(package: str, data_path: str, out_path: str) -> int:
    import torch.distributed as dist

    from codegen.load import load
    from planner.runtime.sharded import shard_params

    dist.init_process_group("gloo", timeout=datetime.timedelta(
        seconds=float(os.environ.get("DP_TIMEOUT", "30"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    data = np.load(data_path)
    start = {k[len("param:"):]: data[k] for k in data.files if k.startswith("param:")}
    steps = data["x"].shape[0]
    try:
        for pkg, out in zip(package.split(os.pathsep), out_path.split(os.pathsep), strict=True):
            module = load(pkg)
            runs = {}
            for stop in (steps, steps // 2):
                ex = module.Executor(init=True)
                ex.load_params(shard_params(ex.plan, start, rank), partial=True)
                _steps(ex, data, rank, world, range(stop))
                if stop < steps:
                    saved = pickle.dumps(ex.state_dict())
                    del ex
                    ex = module.Executor(init=True)
                    ex.load_state_dict(pickle.loads(saved))
                    _steps(ex, data, rank, world, range(stop, steps))
                runs["straight" if stop == steps else "resumed"] = ex.state_dict()
            with open(out, "wb") as f:
                pickle.dump(runs, f)
    except (ValueError, RuntimeError) as e:
        print(f"rank {rank} error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              flush=True)
        os._exit(3)  # noqa: SLF001 - the group may be broken: do not wait in its teardown
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
