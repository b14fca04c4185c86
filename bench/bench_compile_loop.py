"""The acceptance loop of issue 59 at bench size: a stock PyTorch loop (AdamW, clip_grad_norm_, a
StepLR schedule, a DataLoader whose last batch is smaller, model.eval() and no_grad for
validation), run eagerly and with only `model = torch.compile(model, backend="planner")` added,
from the same weights on the same data; prints how far apart they end and each epoch's time.

    python bench/bench_compile_loop.py [--models resnet18,transformer_encoder] [--epochs 2]
                                       [--batches 4] [--costs measured|analytical]
                                       [--step eager|planner]

`--step planner` compiles the optimizer step too (PyTorch's compiled-optimizer pattern,
`torch.compile(opt.step, backend="planner")`): the backend's loop then plans AdamW's update
as well (planner/torch/held.py).

Models: bench/cpu_modules.py's ResNet-18 (torchvision's layout, half its channels) and
nn.TransformerEncoder, at their bench batch of 8; the training set is `--batches` batches and
half of one more (the smaller last batch), the validation set one batch and a half. The loops
run in this process one after the other (eager, eager without oneDNN, the backend): the times
say what the first epoch's planning and building cost beside the second epoch's steps, not a
race (bench_vs_compile.py times each engine in a process of its own). The weights are compared
as the tests do (tests/test_torch_compile.py: AdamW moves a weight whose gradient is rounding
noise by up to lr a step, so the largest difference is given beside the losses'). What float32
noise alone does to the loop is shown by a third run: eager with oneDNN off (PyTorch's own
convolution and GEMM kernels, which sum in another order): on ResNet-18, AdamW's first steps
(each weight moved by about lr times the sign of its gradient) turn rounding into percent-level
loss differences within a few steps, for that run as for the backend's.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def loop(model, train, val, epochs: int, step_options: dict | None = None):
    """tests/test_torch_compile.stock_loop, timed per epoch: (losses, val losses, seconds);
    with `step_options`, the optimizer step compiled by the backend with those options."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    step = opt.step if step_options is None else \
        torch.compile(opt.step, backend="planner", options=step_options)
    losses, val_losses, seconds = [], [], []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        for x, y in train:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            step()
            sched.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            val_losses.append(sum(F.cross_entropy(model(x), y, reduction="sum").item()
                                  for x, y in val))
        seconds.append(time.perf_counter() - start)
    return losses, val_losses, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,transformer_encoder")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--costs", choices=("measured", "analytical"), default="measured")
    ap.add_argument("--step", choices=("eager", "planner"), default="eager",
                    help="the backend loop's optimizer step: torch.optim's, or compiled too")
    args = ap.parse_args()
    import torch
    from cpu_modules import MODULES

    import planner.torch  # noqa: F401  (the backend, where the entry point is not installed)
    from planner.torch.piece import _RUNS, PlannerFallback

    torch.set_num_threads(os.cpu_count() or 1)
    print(f"{os.cpu_count()} logical CPUs; load average {os.getloadavg()[0]:.2f} before")
    for label in args.models.split(","):
        make, shape, classes = MODULES[label]
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(1)
        n_train, n_val = (args.batches * 2 + 1) * shape[0] // 2, shape[0] * 3 // 2
        data = torch.utils.data.TensorDataset(
            torch.randn(n_train + n_val, *shape[1:], generator=g),
            torch.randint(0, classes, (n_train + n_val,), generator=g))
        train = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(n_train)),
                                            batch_size=shape[0])
        val = torch.utils.data.DataLoader(
            torch.utils.data.Subset(data, range(n_train, n_train + n_val)), batch_size=shape[0])
        model = make().train()
        ref = copy.deepcopy(model)
        other = copy.deepcopy(model)
        before = set(_RUNS)
        want = loop(ref, train, val, args.epochs)
        # The noise yardstick: eager again with PyTorch's own (not oneDNN's) kernels, whose
        # float32 sums round otherwise.
        with torch.backends.mkldnn.flags(enabled=False):
            yardstick = loop(other, train, val, args.epochs)
        costs = None if args.costs == "measured" else "analytical"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PlannerFallback)
            got = loop(torch.compile(model, backend="planner", options={"costs": costs}),
                       train, val, args.epochs,
                       {"costs": costs} if args.step == "planner" else None)
        fallbacks = sorted({str(w.message) for w in caught if w.category is PlannerFallback})
        loss_rel = max(abs(a - b) / abs(b) for a, b in zip(got[0], want[0], strict=True))
        val_rel = max(abs(a - b) / abs(b) for a, b in zip(got[1], want[1], strict=True))
        noise = max(abs(a - b) / abs(b) for a, b in zip(yardstick[0], want[0], strict=True))
        state, state_ref = model.state_dict(), ref.state_dict()
        weight = max(float((state[k].double() - v.double()).abs().max())
                     for k, v in state_ref.items() if v.is_floating_point())
        print(f"{label}: {len(got[0])} steps ({len(train)} batches an epoch, the last of "
              f"{n_train - (len(train) - 1) * shape[0]}); train loss max rel diff "
              f"{loss_rel:.2e} (eager without oneDNN: {noise:.2e}), validation {val_rel:.2e}, "
              f"largest weight or buffer diff {weight:.2e}")
        print("  epoch seconds: eager " + " ".join(f"{s:.1f}" for s in want[2])
              + f"; backend (step {args.step}) " + " ".join(f"{s:.1f}" for s in got[2])
              + f"; load average {os.getloadavg()[0]:.2f}")
        print("  train losses, eager:           " + " ".join(f"{v:.6f}" for v in want[0]))
        print("  train losses, backend:         " + " ".join(f"{v:.6f}" for v in got[0]))
        print("  train losses, eager no oneDNN: " + " ".join(f"{v:.6f}" for v in yardstick[0]))
        for line in fallbacks:
            print(f"  fallback: {line}")
        print("  " + _bytes_per_step(before))


def _bytes_per_step(before: set) -> str:
    """What a training call of the largest batch moves: the saved activations left in the
    forward executor's arena (views; those that are the user's outputs are copies) and the
    tensors fed in place (DLPack, no copy)."""
    from planner.torch.piece import _RUNS, _Training

    runs = [r for r in list(_RUNS) if isinstance(r, _Training) and r.forward is not None
            and r not in before]
    if not runs:
        return "no training call planned"
    run = max(runs, key=lambda r: sum(t.nbytes for t in r.split.forward.tensors
                                       if t.role == "input"))
    kept = sum(run.split.forward.tensor(t).nbytes for t in run.views)
    copied = sum(run.split.forward.tensor(t).nbytes for t in run.split.saved
                 if t not in run.views)
    fed = sum(t.nbytes for t in run.split.forward.tensors if t.role == "input")
    return (f"a training call: {kept / 2**20:.1f} MiB of saved activations read in the "
            f"forward executor's arena, {copied / 2**20:.1f} MiB saved as the outputs' copies, "
            f"{fed / 2**20:.1f} MiB of inputs and parameters read in place")


if __name__ == "__main__":
    main()
