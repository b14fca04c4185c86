"""The CPU executor's small-matrix SVD and QR (planner/ops/linalg.py's MatrixSvd, MatrixQr)
against PyTorch's on batches of small matrices (issue 86), the sizes models use them at.

    python bench/bench_small_linalg.py [--rounds 11] [--threads N]

Each row is one node of one inference graph, run by the generated CPU executor with every
core (per-op times from `stats()`), beside the torch.linalg call PyTorch runs for it, with
every core (or both with `--threads N`). Rounds alternate (one executor step, then each torch
op once) so load changes hit both alike; the table gives medians over rounds.
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

SIZES = [(8, 512), (32, 128), (128, 8)]  # (n, batch): n x n matrices


def graph_and_feeds(rng: np.random.Generator):
    b = GraphBuilder("small_linalg")
    feeds: dict[str, np.ndarray] = {}
    outputs = []
    for n, batch in SIZES:
        name = f"a{n}"
        feeds[name] = rng.standard_normal((batch, n, n)).astype(np.float32)
        a = b.input(name, feeds[name].shape, "float32")
        b.op_n("MatrixSvd", [a], name=f"svd_{n}x{batch}")
        b.op_n("MatrixQr", [a], name=f"qr_{n}x{batch}")
        outputs += [f"svd_{n}x{batch}:1", f"qr_{n}x{batch}:1"]
    return b.build(outputs=outputs), feeds


def torch_ops(t: dict):
    import torch

    ops = {}
    for n, batch in SIZES:
        a = t[f"a{n}"]
        ops[f"svd_{n}x{batch}"] = lambda a=a: torch.linalg.svd(a, full_matrices=False)
        ops[f"qr_{n}x{batch}"] = lambda a=a: torch.linalg.qr(a)
    return ops


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--threads", type=int, default=0, help="0: every logical CPU")
    args = parser.parse_args()
    target = detect()
    if args.threads:
        target = target.model_copy(update={"logical_cpus": target.logical_cpus[:args.threads]})
    torch.set_num_threads(len(target.logical_cpus))
    graph, feeds = graph_and_feeds(np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, target, options=PlanOptions(schedule=ScheduleOptions(strategy="uniform")))
    ops = torch_ops({k: torch.from_numpy(v) for k, v in feeds.items()})
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ex = load(build(render(p, Path(tmp) / "small_linalg")).dir).Executor()
        ex.forward(feeds)
        for _ in range(args.rounds):
            ex.reset_stats()
            ex.forward(feeds)
            for op in ex.stats()["ops"]:
                ours.setdefault(op["name"], []).append(op["seconds"])
            for name, f in ops.items():
                t0 = time.perf_counter()
                f()
                theirs.setdefault(name, []).append(time.perf_counter() - t0)
    load_avg = os.getloadavg()
    print(f"host: {target.name}; {len(target.logical_cpus)} threads; {args.rounds} alternating "
          f"rounds; load average {load_avg[0]:.2f}")
    print(f"{'op (n x batch)':<16}{'ours ms':>9}{'torch ms':>10}{'ratio':>7}")
    for name in ops:
        a, t = (float(np.median(d[name])) * 1e3 for d in (ours, theirs))
        print(f"{name:<16}{a:>9.3f}{t:>10.3f}{a / t:>7.2f}")


if __name__ == "__main__":
    main()
