"""The optimizer step alone: torch.optim's eager `opt.step()` against the same step compiled by
`torch.compile(opt.step, backend="planner")` (planner/torch/held.py), on a bench module's
parameters with fixed gradients.

    python bench/bench_compiled_step.py [--models transformer_encoder,resnet18]
                                        [--optimizer adamw|sgd] [--rounds 5] [--steps 20]

Both optimizers start from the same parameters and state and take the same steps; each round
times --steps steps of one then of the other (alternating which goes first), and the table
gives the medians over rounds of each round's median step, the 1-minute load average beside it
(the machine may be shared: read the numbers as loaded unless it is near zero), the planning
and building time of the compiled step's graphs (its first calls: the lr a constant, then a
tensor once the scheduler has changed it), and how far the two runs' parameters end apart.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def make_optimizer(kind: str, params):
    import torch

    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="transformer_encoder,resnet18")
    ap.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--costs", choices=("measured", "analytical"), default="analytical")
    args = ap.parse_args()
    import torch
    from cpu_modules import MODULES

    import planner.torch  # noqa: F401  (the backend, where the entry point is not installed)

    torch.set_num_threads(os.cpu_count() or 1)
    print(f"{os.cpu_count()} logical CPUs; load average {os.getloadavg()[0]:.2f} before; "
          f"{args.optimizer}; medians of {args.rounds} rounds of {args.steps} steps")
    print(f"{'module':22s} {'params':>9s} {'eager ms':>9s} {'planned ms':>11s} "
          f"{'first s':>8s} {'param diff':>11s} {'load':>5s}")
    for label in args.models.split(","):
        torch.manual_seed(0)
        model = MODULES[label][0]()
        ref = copy.deepcopy(model)
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            p.grad = torch.randn_like(p) * 1e-2
            q.grad = p.grad.clone()
        opt, ref_opt = (make_optimizer(args.optimizer, m.parameters()) for m in (model, ref))
        scheds = [torch.optim.lr_scheduler.StepLR(o, 1, 0.999) for o in (opt, ref_opt)]
        torch._dynamo.reset()
        step = torch.compile(opt.step, backend="planner", options={"costs": args.costs})
        start = time.perf_counter()
        for _ in range(3):  # the lr a constant, then a tensor (planned twice), then reused
            step()
            ref_opt.step()
            for s in scheds:
                s.step()
        first = time.perf_counter() - start

        def timed(fn, sched) -> float:
            times = []
            for _ in range(args.steps):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
                sched.step()
            return statistics.median(times)

        eager, planned = [], []
        for r in range(args.rounds):
            pair = [(ref_opt.step, scheds[1], eager), (step, scheds[0], planned)]
            for fn, sched, out in pair if r % 2 == 0 else pair[::-1]:
                out.append(timed(fn, sched))
        diff = max(float((p.detach() - q.detach()).abs().max())
                   for p, q in zip(model.parameters(), ref.parameters(), strict=True))
        n = sum(p.numel() for p in model.parameters())
        print(f"{label:22s} {n:9d} {statistics.median(eager) * 1e3:9.2f} "
              f"{statistics.median(planned) * 1e3:11.2f} {first:8.1f} {diff:11.2e} "
              f"{os.getloadavg()[0]:5.2f}")


if __name__ == "__main__":
    main()
