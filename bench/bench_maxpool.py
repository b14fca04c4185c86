"""MaxPool and MaxPoolGrad kernels against PyTorch's on GoogLeNet's pooling shapes (issue 12).

    python bench/bench_maxpool.py [--batch 4] [--rounds 31] [--threads N]

GoogLeNet (torchvision, 224x224 images) pools with 3x3 stride-2 windows between stages and 3x3
stride-1 pad-1 windows in every inception block's fourth branch, all with ceil_mode; the last
stage pool is 2x2 stride 2. Every shape below becomes a MaxPool node and a MaxPoolGrad node of
one inference graph, run by the generated executor with every core (per-op times from
`stats()`); PyTorch runs what its autograd runs for a training step, aten's
max_pool2d_with_indices forward and max_pool2d_with_indices_backward, with every core (or both
with `--threads N`: the plan's target keeps its first N logical CPUs). Rounds alternate (one
executor step, then each torch op once) so load changes hit both alike; the table gives medians
over rounds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.build import build  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.graph import GraphBuilder  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target.detect import detect  # noqa: E402

# (label, channels, size, kernel, stride, pad): torchvision googlenet's pools at 224x224
POOLS = [
    ("maxpool1", 64, 112, 3, 2, 0),
    ("maxpool2", 192, 56, 3, 2, 0),
    ("3a branch4", 192, 28, 3, 1, 1),
    ("3b branch4", 256, 28, 3, 1, 1),
    ("maxpool3", 480, 28, 3, 2, 0),
    ("4a branch4", 480, 14, 3, 1, 1),
    ("4e branch4", 528, 14, 3, 1, 1),
    ("maxpool4", 832, 14, 2, 2, 0),
    ("5a branch4", 832, 7, 3, 1, 1),
]


def attrs(kernel: int, stride: int, pad: int) -> dict:
    return {"kernel": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4,
            "ceil_mode": True}


def pool_graph(batch: int):
    b = GraphBuilder("googlenet_pools")
    for k, (_, c, size, kernel, stride, pad) in enumerate(POOLS):
        x = b.input(f"x{k}", (batch, c, size, size))
        y = b.op("MaxPool", [x], attrs(kernel, stride, pad), name=f"pool{k}")
        dy = b.input(f"dy{k}", b.type(y).shape)
        b.op("MaxPoolGrad", [dy, x], attrs(kernel, stride, pad), name=f"grad{k}")
    g = b.build(outputs=[f"pool{k}" for k in range(len(POOLS))]
                + [f"grad{k}" for k in range(len(POOLS))])
    return g


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--threads", type=int, default=0, help="0: every logical CPU")
    args = parser.parse_args()
    target = detect()
    if args.threads:
        target = target.model_copy(update={"logical_cpus": target.logical_cpus[:args.threads]})
    torch.set_num_threads(len(target.logical_cpus))
    graph = pool_graph(args.batch)
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32)
             for t in graph.by_role("input")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, target, options=PlanOptions(schedule=ScheduleOptions(strategy="uniform")))
    aten = torch.ops.aten
    with tempfile.TemporaryDirectory() as tmp:
        ex = load(build(render(p, Path(tmp) / "pools")).dir).Executor()
        ex.forward(feeds)
        ours: dict[str, list[float]] = {}
        theirs: dict[str, list[float]] = {}
        tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
        for _ in range(args.rounds):
            ex.reset_stats()
            ex.forward(feeds)
            for op in ex.stats()["ops"]:
                ours.setdefault(op["name"], []).append(op["seconds"])
            for k, (_, _, _, kernel, stride, pad) in enumerate(POOLS):
                x, dy = tensors[f"x{k}"], tensors[f"dy{k}"]
                t0 = time.perf_counter()
                _, idx = aten.max_pool2d_with_indices(x, [kernel] * 2, [stride] * 2, [pad] * 2,
                                                      [1, 1], True)
                t1 = time.perf_counter()
                aten.max_pool2d_with_indices_backward(dy, x, [kernel] * 2, [stride] * 2,
                                                      [pad] * 2, [1, 1], True, idx)
                t2 = time.perf_counter()
                theirs.setdefault(f"pool{k}", []).append(t1 - t0)
                theirs.setdefault(f"grad{k}", []).append(t2 - t1)
    load_avg = os.getloadavg()
    print(f"host: {target.name}; {len(target.logical_cpus)} threads; batch {args.batch}; "
          f"{args.rounds} alternating rounds; load average {load_avg[0]:.2f}")
    print(f"{'pool':<12}{'shape (C, H)':>14}{'k/s/p':>7}{'fwd ms':>9}{'torch':>8}{'ratio':>7}"
          f"{'bwd ms':>9}{'torch':>8}{'ratio':>7}")
    total = np.zeros(4)
    for k, (label, c, size, kernel, stride, pad) in enumerate(POOLS):
        row = [float(np.median(d[name])) * 1e3 for name in (f"pool{k}", f"grad{k}")
               for d in (ours, theirs)]
        total += row
        print(f"{label:<12}{f'({c}, {size})':>14}{f'{kernel}/{stride}/{pad}':>7}"
              f"{row[0]:>9.3f}{row[1]:>8.3f}{row[0] / row[1]:>7.2f}"
              f"{row[2]:>9.3f}{row[3]:>8.3f}{row[2] / row[3]:>7.2f}")
    print(f"{'all pools':<33}{total[0]:>9.3f}{total[1]:>8.3f}{total[0] / total[1]:>7.2f}"
          f"{total[2]:>9.3f}{total[3]:>8.3f}{total[2] / total[3]:>7.2f}")


if __name__ == "__main__":
    main()
