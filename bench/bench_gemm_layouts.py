"""The runtime's float32 MatMul (oneDNN 3.2) against torch.matmul (PyTorch's BLAS) on the
TransformerEncoder row's GEMM shapes, in each operand layout, on 1 and 2 threads (issue 60:
what bounds the encoder's step). A layout is which operand is read transposed: `nt` is
x @ W^T (a linear layer's forward), `nn` dY @ W (its data gradient), `tn` dY^T @ x (its weight
gradient). Rounds alternate the two: each round measures every signature with the runtime the
way the cost store does (codegen.profiling.measure_signatures: one copy of each op in a built
graph, the fastest of its steps), then times torch.matmul on the same operands (the fastest of
--calls calls). Prints GFLOP/s, medians over rounds, and the load average before and after.

    PYTHONPATH=. python bench/bench_gemm_layouts.py [--rounds 3] [--calls 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (M, K, N) of C = A B: the encoder's d_model 128, feed-forward 512, 8 x 64 tokens
SHAPES = ((512, 128, 512), (512, 512, 128), (128, 512, 512))
LAYOUTS = ("nn", "nt", "tn", "tt")
THREADS = (1, 2)


def operand_shapes(m: int, k: int, n: int, layout: str) -> tuple[tuple[int, int], tuple[int, int]]:
    a = (k, m) if layout[0] == "t" else (m, k)
    b = (n, k) if layout[1] == "t" else (k, n)
    return a, b


def signature(m: int, k: int, n: int, layout: str):
    from planner.costs.signature import OpSignature

    a, b = operand_shapes(m, k, n, layout)
    return OpSignature(op="MatMul", shapes=(a, b), dtypes=("float32", "float32"),
                       attrs={"transpose_a": layout[0] == "t", "transpose_b": layout[1] == "t"})


def ours(target) -> dict[tuple, dict[int, float]]:
    """(shape, layout) -> {threads: seconds} of the runtime's MatMul, measured as the store does."""
    from codegen.profiling import measure_signatures

    cases = [(s, lay) for s in SHAPES for lay in LAYOUTS]
    table = measure_signatures([signature(*s, lay) for s, lay in cases], target)
    out = {}
    for s, lay in cases:
        entry = table.entry(signature(*s, lay))
        out[(s, lay)] = {c.threads: c.seconds for c in entry.cpu} if entry else {}
    return out


def theirs(calls: int) -> dict[tuple, dict[int, float]]:
    import torch

    out: dict[tuple, dict[int, float]] = {}
    gen = torch.Generator().manual_seed(0)
    for s in SHAPES:
        for lay in LAYOUTS:
            a_shape, b_shape = operand_shapes(*s, lay)
            a = torch.randn(a_shape, generator=gen)
            b = torch.randn(b_shape, generator=gen)
            a = a.t() if lay[0] == "t" else a
            b = b.t() if lay[1] == "t" else b
            for threads in THREADS:
                torch.set_num_threads(threads)
                for _ in range(5):
                    a @ b
                best = float("inf")
                for _ in range(calls):
                    t0 = time.perf_counter()
                    a @ b
                    best = min(best, time.perf_counter() - t0)
                out.setdefault((s, lay), {})[threads] = best
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    from planner.target.detect import detect

    target = detect()
    print("load before", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    runs: dict[str, list[dict]] = {"ours": [], "torch": []}
    for k in range(args.rounds):
        for engine in ("ours", "torch") if k % 2 == 0 else ("torch", "ours"):
            runs[engine].append(ours(target) if engine == "ours" else theirs(args.calls))
    print("GFLOP/s (medians of rounds); ours = the runtime's MatMul (oneDNN), torch = torch.matmul")
    print(f"{'M x K x N':16s} {'layout':6s}" + "".join(
        f"  {'ours ' + str(t) + 't':>9s} {'torch ' + str(t) + 't':>9s} {'ratio':>6s}"
        for t in THREADS))
    for s in SHAPES:
        flops = 2.0 * s[0] * s[1] * s[2]
        for lay in LAYOUTS:
            row = f"{'x'.join(map(str, s)):16s} {lay:6s}"
            for t in THREADS:
                o = statistics.median(r[(s, lay)][t] for r in runs["ours"])
                p = statistics.median(r[(s, lay)][t] for r in runs["torch"])
                row += f"  {flops / o / 1e9:9.1f} {flops / p / 1e9:9.1f} {p / o:6.2f}"
            print(row)
    print("load after", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)


if __name__ == "__main__":
    main()
