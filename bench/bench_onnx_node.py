"""ONNX node conformance status (issue 12): the onnx package's node cases (float32), how many
import into the planner, pass on its numpy reference, and run and pass through the generated
CPU executor; then the ops that keep the most cases out.

    python bench/bench_onnx_node.py [--top N]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.codegen.node_executor import executor_excess  # noqa: E402
from tests.importers.node_cases import DEVIATIONS, float32_cases, outcome, summary  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="how many unsupported ops to list")
    args = parser.parse_args()
    start = time.perf_counter()
    results = [outcome(c) for c in float32_cases()]
    with tempfile.TemporaryDirectory() as tmp:
        worst = executor_excess(results, Path(tmp))
    counts = summary(results)
    passed = sum(w <= 1.0 for w in worst.values())
    print(f"{'stage':<40} {'cases':>6}")
    print(f"{'float32 node cases':<40} {counts['cases']:>6}")
    print(f"{'imported':<40} {counts['imported']:>6}")
    print(f"{'pass on the reference':<40} {counts['reference']:>6}")
    print(f"{'run through the CPU executor':<40} {len(worst):>6}")
    print(f"{'pass through the CPU executor':<40} {passed:>6}")
    off = [r.case for r in results if r.imported and not r.passed]
    print(f"imported but off the expected outputs: {off or 'none'} "
          f"(deliberate: {sorted(DEVIATIONS)})")
    missing = collections.Counter(u for r in results for u in r.unsupported)
    print(f"\nunsupported, by cases kept out (top {args.top}):")
    for op, n in missing.most_common(args.top):
        print(f"  {n:>4}  {op}")
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
