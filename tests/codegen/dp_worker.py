"""One rank of the data-parallel tests (tests/codegen/test_data_parallel.py), run as its own
process: `python -m tests.codegen.dp_worker PACKAGE_DIR DATA.npz OUT.npz [die_after]`.

It joins the gloo group from the environment (MASTER_ADDR 127.0.0.1, MASTER_PORT, RANK,
WORLD_SIZE, the test's timeout in DP_TIMEOUT seconds), loads the initial parameters from
DATA.npz, steps its shard of every global batch there (rows rank*B .. (rank+1)*B), and
writes its parameters to OUT.npz and the CPUs each of its threads may run on (the OS's
affinity, /proc/self/task), the address and length of every bucket the all-reduce summed, the
(bucket, shard) addresses and lengths of every reduce-scatter and all-gather, and the
executor's stats() and its evaluate() of its rows of the first batch to OUT.npz.json. A
UserError (or a failed step) is printed on one line prefixed `rank R error:` and exits 3.
PACKAGE_DIR and OUT.npz may each be a list (os.pathsep between): the packages run one after
the other in the one process group, each from the same initial parameters, each writing its
own OUT. With `die_after` k it exits
abruptly after k steps (a killed rank). DP_GROUP=new passes a new group of every rank as
`process_group`. DP_END=in-flight ends the script with a step in flight (started, not
waited for) and without destroying the process group.
DP_BACKEND picks the group's backend (default gloo; nccl for a CUDA package, each rank on GPU
DP_DEVICE, default its rank modulo the GPUs there are)."""

from __future__ import annotations

import datetime
import json
import os
import sys

import numpy as np


def thread_cpus() -> dict[str, list[int]]:
    """Per thread of this process (by id): the logical CPUs the OS lets it run on."""
    from planner.target.detect import parse_cpu_list

    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                line = next(x for x in f if x.startswith("Cpus_allowed_list:"))
        except (OSError, StopIteration):
            continue  # a thread that ended meanwhile
        out[tid] = parse_cpu_list(line.split(":", 1)[1].strip())
    return out


def main(package: str, data_path: str, out_path: str, die_after: int = -1) -> int:
    import torch.distributed as dist

    from codegen.load import load
    from planner.errors import UserError

    backend = os.environ.get("DP_BACKEND", "gloo")
    if backend == "nccl":
        import torch

        rank = int(os.environ["RANK"])
        torch.cuda.set_device(int(os.environ.get("DP_DEVICE", rank % torch.cuda.device_count())))
    dist.init_process_group(backend, timeout=datetime.timedelta(
        seconds=float(os.environ.get("DP_TIMEOUT", "30"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    data = np.load(data_path)
    summed: list[tuple[int, int]] = []  # (address, floats) of each bucket all-reduced
    all_reduce = dist.all_reduce

    def recording(tensor, *args, **kwargs):
        summed.append((tensor.data_ptr(), tensor.numel()))
        return all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = recording
    sharded: dict[str, list[tuple[int, int, int, int]]] = {"scatter": [], "gather": []}
    # (torch 2.13 renamed them reduce_scatter_single and all_gather_single)
    scatter_name = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") \
        else "reduce_scatter_tensor"
    gather_name = "all_gather_single" if hasattr(dist, "all_gather_single") \
        else "all_gather_into_tensor"
    scatter, gather = getattr(dist, scatter_name), getattr(dist, gather_name)

    def recording_scatter(out, whole, *args, **kwargs):
        sharded["scatter"].append((whole.data_ptr(), whole.numel(), out.data_ptr(), out.numel()))
        return scatter(out, whole, *args, **kwargs)

    def recording_gather(whole, mine, *args, **kwargs):
        sharded["gather"].append((whole.data_ptr(), whole.numel(), mine.data_ptr(), mine.numel()))
        return gather(whole, mine, *args, **kwargs)

    setattr(dist, scatter_name, recording_scatter)
    setattr(dist, gather_name, recording_gather)
    for pkg, out in zip(package.split(os.pathsep), out_path.split(os.pathsep), strict=True):
        summed.clear()
        for calls in sharded.values():
            calls.clear()
        ex = _train(load(pkg), data, rank, world, die_after, UserError)
        np.savez(out, **ex.params())
        # the plan's evaluation from the same build, on this rank's rows of the first batch
        rows = slice(rank * (data["x"].shape[1] // world), (rank + 1) * (data["x"].shape[1]
                                                                        // world))
        evaluated = {k: np.asarray(v).tolist() for k, v in ex.evaluate(
            {"x": data["x"][0, rows], "labels": data["labels"][0, rows]}).items()} \
            if ex.has_evaluation else None
        with open(out + ".json", "w") as f:
            json.dump({"threads": thread_cpus(), "summed": summed[-8:], "stats": ex.stats(),
                       "sharded": {k: v[-8:] for k, v in sharded.items()},
                       "evaluate": evaluated}, f, default=str)
    if os.environ.get("DP_END") == "in-flight":
        # a script that ends with a step still in flight and its group never destroyed
        rows = slice(0, data["x"].shape[1] // world)
        ex.step_async({"x": data["x"][0, rows], "labels": data["labels"][0, rows]})
        return 0
    dist.destroy_process_group()
    return 0


def _train(module, data, rank: int, world: int, die_after: int, user_error: type):
    """An executor of `module` on the group, stepped over this rank's rows of every batch."""
    import torch.distributed as dist

    try:
        device = {"device": int(os.environ["DP_DEVICE"])} if "DP_DEVICE" in os.environ else {}
        # init=True: what DATA leaves out (the plan's learning rate) from the plan's init
        if os.environ.get("DP_GROUP") == "new":  # a group of its own, passed explicitly
            ex = module.Executor(process_group=dist.new_group(list(range(world))), init=True,
                                 **device)
        else:  # torch.distributed's default group
            ex = module.Executor(init=True, **device)
        ex.load_params({k[len("param:"):]: data[k] for k in data.files
                        if k.startswith("param:")}, partial=True)
        x, labels = data["x"], data["labels"]
        shard = x.shape[1] // world
        rows = slice(rank * shard, (rank + 1) * shard)
        for step in range(x.shape[0]):
            if step == die_after:
                os._exit(9)  # noqa: SLF001 - a rank killed mid-training, no clean-up
            ex.step({"x": x[step, rows], "labels": labels[step, rows]})
    except (user_error, RuntimeError) as e:
        print(f"rank {rank} error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              flush=True)
        os._exit(3)  # noqa: SLF001 - the group may be broken: do not wait in its teardown
    return ex


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4], *map(int, sys.argv[4:5])))
