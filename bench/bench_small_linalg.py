"""The CPU executor's small-matrix SVD and QR (planner/ops/linalg.py's MatrixSvd, MatrixQr)
against PyTorch's on batches of small matrices (issue 86), the sizes models use them at.

    python bench/bench_small_linalg.py [--rounds 11] [--threads N]

Each row is one node of one inference graph, run by the generated CPU executor with every
core (per-op times from `stats()`), beside the torch.linalg call PyTorch runs for it, with
every core (or both with `--threads N`). Rounds alternate (one executor step, then each torch
op once) so load changes hit both alike; the table gives medians over rounds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.graph import GraphBuilder  # noqa: E402

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
    from bench_index_ops import against_torch

    against_torch(graph_and_feeds, torch_ops, "small_linalg", rounds=11, label="op (n x batch)")


if __name__ == "__main__":
    main()
