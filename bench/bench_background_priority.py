"""What a background process costs the steps beside it, by its scheduling priority (issue 83:
the host's kernels are measured by a child while the run's first plans step,
codegen/measure_later.py). The trainer steps the text workload's encoder (bench/
first_step_loop.py's, one length) alone, beside a process of 2-thread float32 matmuls at
nice 19, and beside the same at SCHED_IDLE (Linux: it runs only on a CPU nothing else wants),
in the other order each round; medians of each round's median step.

    python bench/bench_background_priority.py [--rounds 5] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

# The neighbour: float32 matmuls on 2 threads (as the child's kernel measurements run on
# the host's cores), at the priority its argument names.
NEIGHBOUR = """
import os, sys
import numpy as np
if sys.argv[1] == "nice":
    os.nice(19)
else:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
a = np.random.default_rng(0).random((512, 512), dtype=np.float32)
while True:
    a @ a
"""

KINDS = ("alone", "nice", "idle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F
    from first_step_loop import adamw, text_model

    from planner.torch import trainer

    torch.manual_seed(0)
    model = text_model()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 2000, (8, 48), generator=g)
    keep = torch.ones(8, 48, dtype=torch.bool)
    labels = torch.arange(8) % 2
    t = trainer(model, (tokens, keep), loss=F.cross_entropy, labels=labels,
                optimizer=adamw(model, 3e-4), costs="analytical")
    for _ in range(20):
        t.step(tokens, keep, labels)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    medians: dict[str, list[float]] = {k: [] for k in KINDS}
    print(f"load average before: {os.getloadavg()}", flush=True)
    for r in range(args.rounds):
        for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
            beside = None if kind == "alone" else subprocess.Popen(
                [sys.executable, "-c", NEIGHBOUR, kind], env=env)
            time.sleep(1.0)  # the neighbour's numpy imported and multiplying
            steps = []
            for _ in range(args.steps):
                start = time.perf_counter()
                t.step(tokens, keep, labels)
                steps.append(time.perf_counter() - start)
            if beside is not None:
                beside.kill()
                beside.wait()
            medians[kind].append(statistics.median(steps))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {1e3 * medians[k][-1]:.1f} ms"
                                               for k in KINDS), flush=True)
    print("\n| beside the steps | step (ms), median of round medians | over alone |\n"
          "| --- | ---: | ---: |")
    alone = statistics.median(medians["alone"])
    for kind, what in zip(KINDS, ("nothing", "2-thread matmuls at nice 19",
                                  "2-thread matmuls at SCHED_IDLE"), strict=True):
        m = statistics.median(medians[kind])
        print(f"| {what} | {1e3 * m:.1f} | {m / alone:.2f}x |")
    print(f"\nload average after: {os.getloadavg()}; {os.cpu_count()} logical CPUs", flush=True)


if __name__ == "__main__":
    main()
