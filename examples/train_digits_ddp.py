r"""Train LeNet on scikit-learn's digits data-parallel: N processes, one gloo process group.

    torchrun --nproc-per-node 2 examples/train_digits_ddp.py     # 2 ranks x batch 16
    torchrun --nproc-per-node 2 examples/train_digits_ddp.py --steps 300 --batch 32
    # two nodes, one process each (here both on this host, rendezvous over loopback):
    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 \
        --master-port 29500 examples/train_digits_ddp.py &
    torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
        --master-port 29500 examples/train_digits_ddp.py

Every rank plans the same training graph with `--data-parallel N` (planner.schedule.parallel: the
gradients' all-reduces on a communication lane, overlapped with backward); rank 0 renders
and builds the executor while the others wait, then every rank imports it. Executor() joins
torch.distributed's default group (the generated package checks the group's size and that
every rank loaded the same plan). Each step, every rank draws the same global batch of N x
batch rows (same seed) and feeds its own shard; the planned all-reduce averages the
gradients, so the ranks' parameters stay bit-identical, which the script checks at the end
(sha256 of every parameter, all-gathered). Rank 0 prints the loss curve (averaged over the
ranks) and the test accuracy, which every rank measures on its slice of the test split with
the same executor's evaluate() (the plan's evaluation schedule), the counts summed over the
ranks; exits 1 if the ranks' parameters differ or accuracy is 95% or
less.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from codegen.build import build as build_tree
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions
from planner.pipeline import plan as make_plan
from planner.schedule.parallel import DataParallelOptions
from planner.target.detect import detect
from planner.zoo import build


def single_process_example():
    """examples/train_digits.py as a module: the data, batch order and test accuracy."""
    name = "train_digits"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def params_digest(params: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(params):
        h.update(name.encode() + b"\0" + np.ascontiguousarray(params[name]).tobytes())
    return h.hexdigest()


def hidden_communication(stats: dict) -> tuple[float, float]:
    """(seconds of collectives (all-reduces; with --shard-optimizer reduce-scatters and
    sharded updates) in the last step, of which compute ran alongside): from the executor's
    measured per-op start and end times (stats())."""
    from planner.ops.collective import COLLECTIVE_OPS

    ops = stats["ops"]
    compute = sorted((o["start"], o["end"]) for o in ops if o["op"] not in COLLECTIVE_OPS)
    total = hidden = 0.0
    for o in ops:
        if o["op"] not in COLLECTIVE_OPS:
            continue
        total += o["end"] - o["start"]
        at = o["start"]  # sweep the compute spans' union across [start, end)
        for s, e in compute:
            s, e = max(s, at), min(e, o["end"])
            if e > s:
                hidden += e - s
                at = e
    return total, hidden


def test_accuracy(ex, digits, batch: int, rank: int, world: int) -> float:
    """Test accuracy by the training executor's evaluate() on every rank: each rank counts
    the right answers on its own slice of the test split (training-sized batches, the last one
    padded with zeros, whose predictions are not counted), and the counts are summed over the
    ranks (no second plan or build)."""
    mine = np.array_split(np.arange(len(digits.test_labels)), world)[rank]
    images = np.zeros((batch, 1, 8, 8), np.float32)
    labels = np.zeros(batch, np.int64)
    right = 0
    for at in range(0, len(mine), batch):
        rows = mine[at:at + batch]
        images[:len(rows)], labels[:len(rows)] = digits.test_images[rows], \
            digits.test_labels[rows]
        images[len(rows):], labels[len(rows):] = 0, 0
        logits = ex.evaluate({"images": images, "labels": labels})["logits"]
        right += int(np.sum(np.argmax(logits[:len(rows)], axis=1) == labels[:len(rows)]))
    counts = torch.tensor([right, len(mine)], dtype=torch.int64)
    dist.all_reduce(counts)
    return int(counts[0]) / int(counts[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16, help="rows per rank per step")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--bucket-bytes", type=int, default=None,
                        help="gradient bucket size (default: the planner's, from alpha-beta; "
                             "small ones let all-reduces overlap backward)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the generated executors (default: a temporary one)")
    args = parser.parse_args(argv)
    # The group's timeout bounds how long a rank waits for a dead peer in an all-reduce.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    # torchrun's ranks on this host: each plans for, and runs on, its share of the cores.
    per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    say = print if rank == 0 else (lambda *a, **k: None)
    single = single_process_example()
    digits = single.reference_example().load_digits(seed=args.seed)
    graph = make_training_graph(build("lenet", batch=args.batch, image=8),
                                Optimizer(kind="sgd", lr=args.lr))
    with warnings.catch_warnings():  # analytical costs: no profile here
        warnings.simplefilter("ignore")
        plan = make_plan(graph, detect(), options=PlanOptions(
            data_parallel=DataParallelOptions(ranks=world, bucket_bytes=args.bucket_bytes,
                                              ranks_per_host=per_host)))
    with tempfile.TemporaryDirectory() as tmp:
        # Every rank needs the folder: rank 0's temporary one, broadcast.
        shared = [str(args.out or tmp)]
        dist.broadcast_object_list(shared, src=0)
        out = Path(shared[0])
        if rank == 0:
            result = build_tree(render(plan, out / "lenet_digits_ddp"), progress=say)
            say(f"{plan.graph.name}: {len(plan.ops)} ops "
                f"({sum(op.op == 'AllReduce' for op in plan.ops)} all-reduces) for {world} "
                f"ranks, built in {result.seconds:.1f} s")
        # The first build of the runtime takes minutes: wait for it without the group's timeout.
        dist.monitored_barrier(timeout=datetime.timedelta(minutes=30))
        ex = load(out / "lenet_digits_ddp").Executor()
        ex.load_params(init_params(graph, seed=args.seed))
        feeds = {"images": np.empty((args.batch, 1, 8, 8), np.float32),
                 "labels": np.empty(args.batch, np.int64)}
        mine = slice(rank * args.batch, (rank + 1) * args.batch)
        losses: list[float] = []
        start = time.perf_counter()
        picks = single.batches(len(digits.train_labels), world * args.batch, args.steps,
                               args.seed)
        for step, pick in enumerate(picks, 1):
            np.take(digits.train_images, pick[mine], axis=0, out=feeds["images"])
            np.take(digits.train_labels, pick[mine], axis=0, out=feeds["labels"])
            loss = torch.tensor(float(ex.step(feeds)["loss"]))
            dist.all_reduce(loss)  # for printing only: the global batch's mean loss
            losses.append(float(loss) / world)
            if args.every and (step % args.every == 0 or step == 1):
                say(f"step {step:4d}  loss {losses[-1]:.4f}")
        seconds = time.perf_counter() - start
        say(f"{args.steps} steps in {seconds:.2f} s ({seconds / max(args.steps, 1) * 1e3:.2f} "
            f"ms/step) on {world} ranks, global batch {world * args.batch}")
        total, hidden = hidden_communication(ex.stats())
        say(f"last step: all-reduces took {total * 1e3:.3f} ms, {hidden * 1e3:.3f} ms of it "
            f"alongside compute ops (measured, stats())")
        params = ex.params()
        digests: list[str | None] = [None] * world
        dist.all_gather_object(digests, params_digest(params))
        same = len(set(digests)) == 1
        acc = test_accuracy(ex, digits, args.batch, rank, world)
        ok = same and acc > 0.95
        if rank == 0:
            say(f"parameters {'identical' if same else 'DIFFERENT'} on all {world} ranks; "
                f"loss {losses[0]:.4f} -> {float(np.mean(losses[-10:])):.4f}; "
                f"test accuracy {acc:.1%} (evaluate() on every rank's slice)")
        dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
