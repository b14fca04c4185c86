"""numpy's BLAS against torch.matmul on a 1024^3 float32 GEMM, on 1 and 2 threads, in alternating
rounds (issue 60: which kernel host detection measures the peak with). Prints each kernel's
median and best GFLOP/s and the load average before and after.

    python bench/gemm_kernels.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.target.measure import gemm_flops, tuned_gemm_flops  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("load before", os.getloadavg())
    res: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for threads in (1, 2):
            res.setdefault(f"numpy-{threads}", []).append(
                gemm_flops(1024, 0.3, threads=threads) / 1e9)
            res.setdefault(f"torch-{threads}", []).append(
                tuned_gemm_flops(1024, 0.3, threads=threads) / 1e9)
    for k, v in res.items():
        print(f"{k:8s} median {statistics.median(v):6.1f} GFLOP/s  max {max(v):6.1f}")
    print("load after", os.getloadavg())


if __name__ == "__main__":
    main()
