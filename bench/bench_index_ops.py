"""The index, sort and embedding-bag kernels against PyTorch's on a GNN's, a recommender's and
a masked autoencoder's shapes (issue 46).

    python bench/bench_index_ops.py [--rounds 21] [--threads N]

Each row is one node of one inference graph, run by the generated CPU executor with every
core (per-op times from `stats()`), beside the ATen op PyTorch runs for it, with every core
(or both with `--threads N`: the plan's target keeps its first N logical CPUs). Rounds
alternate (one executor step, then each torch op once) so load changes hit both alike; the
table gives medians over rounds.
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

NODES, EDGES, WIDTH = 20000, 200000, 64        # a GNN layer's message passing
ROWS, COLS, PICK = 256, 1024, 256              # gather / scatter along rows, sort of a batch
VOCAB, BAGS, PER_BAG = 100000, 2048, 20        # one DLRM embedding table


def graph_and_feeds(rng: np.random.Generator):
    b = GraphBuilder("index_ops")
    feeds: dict[str, np.ndarray] = {}

    def feed(name: str, value: np.ndarray) -> str:
        feeds[name] = value
        return b.input(name, value.shape, str(value.dtype))

    h = feed("h", rng.standard_normal((NODES, WIDTH)).astype(np.float32))
    src = feed("src", rng.integers(0, NODES, EDGES))
    dst = feed("dst", rng.integers(0, NODES, EDGES))
    msg = feed("msg", rng.standard_normal((EDGES, WIDTH)).astype(np.float32))
    zeros = feed("zeros", np.zeros((NODES, WIDTH), np.float32))
    x = feed("x", rng.standard_normal((ROWS, COLS)).astype(np.float32))
    idx = feed("idx", rng.integers(0, COLS, (ROWS, PICK)))
    upd = feed("upd", rng.standard_normal((ROWS, PICK)).astype(np.float32))
    table = feed("table", rng.standard_normal((VOCAB, WIDTH)).astype(np.float32))
    ids = feed("ids", rng.integers(0, VOCAB, BAGS * PER_BAG))
    offsets = feed("offsets", np.arange(BAGS) * PER_BAG)
    rows = {"axis": 0}
    elements = {"axis": 1, "mode": "elements"}
    b.op("IndexGather", [h, src], rows, name="index_select")
    b.op("IndexScatter", [zeros, dst, msg], {**rows, "reduce": "sum"}, name="index_add")
    b.op("IndexGather", [x, idx], elements, name="gather")
    b.op("IndexScatter", [x, idx, upd], {**elements, "reduce": "sum"}, name="scatter_add")
    b.op_n("TopK", [x], {"k": COLS, "axis": 1}, name="sort")
    b.op("EmbeddingBag", [table, ids, offsets], {}, name="embedding_bag")
    return b.build(outputs=["index_select", "index_add", "gather", "scatter_add", "sort:0",
                            "embedding_bag"]), feeds


def torch_ops(t: dict):
    import torch
    import torch.nn.functional as F

    return {
        "index_select": lambda: t["h"].index_select(0, t["src"]),
        "index_add": lambda: t["zeros"].index_add(0, t["dst"], t["msg"]),
        "gather": lambda: t["x"].gather(1, t["idx"]),
        "scatter_add": lambda: t["x"].scatter_add(1, t["idx"], t["upd"]),
        "sort": lambda: torch.sort(t["x"], dim=1, descending=True, stable=True),
        "embedding_bag": lambda: F.embedding_bag(t["ids"], t["table"], t["offsets"],
                                                 mode="sum"),
    }


def against_torch(graph_and_feeds, torch_ops, name: str, rounds: int, label: str = "op") -> None:
    """Each op of the graph `graph_and_feeds(rng)` makes, run by its uniform plan's executor
    (the op's stats() seconds), against `torch_ops(tensors)` on the same feeds, in `--rounds`
    alternating rounds on `--threads` threads (0: every logical CPU): a table of medians. The
    one loop of bench_index_ops.py and bench_small_linalg.py."""
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=rounds)
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
        ex = load(build(render(p, Path(tmp) / name)).dir).Executor()
        ex.forward(feeds)
        for _ in range(args.rounds):
            ex.reset_stats()
            ex.forward(feeds)
            for op in ex.stats()["ops"]:
                ours.setdefault(op["name"], []).append(op["seconds"])
            for key, f in ops.items():
                t0 = time.perf_counter()
                f()
                theirs.setdefault(key, []).append(time.perf_counter() - t0)
    load_avg = os.getloadavg()
    print(f"host: {target.name}; {len(target.logical_cpus)} threads; {args.rounds} alternating "
          f"rounds; load average {load_avg[0]:.2f}")
    print(f"{label:<16}{'ours ms':>9}{'torch ms':>10}{'ratio':>7}")
    for key in ops:
        a, t = (float(np.median(d[key])) * 1e3 for d in (ours, theirs))
        print(f"{key:<16}{a:>9.3f}{t:>10.3f}{a / t:>7.2f}")


def main() -> None:
    against_torch(graph_and_feeds, torch_ops, "index_ops", rounds=21)


if __name__ == "__main__":
    main()
