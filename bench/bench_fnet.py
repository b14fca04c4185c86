"""FNet block training step: planner.torch.trainer against eager PyTorch.

The block of tests/importers/test_complex_fft.py (`FNetBlock`: Fourier token mixing, the real
part of a 2-D DFT over the sequence and hidden dims, then a feed-forward layer, each with a
residual and a LayerNorm, a linear head on the mean token) at d = 256, 128 tokens, batch 8,
SGD, cross-entropy: the best and median of `--steps` steps after `--warmup`, in ms.
`--baseline DIR` also times the planner of another checkout (DIR on PYTHONPATH, in a
subprocess): the step before and after a change to the DFT's lowering.

    python bench/bench_fnet.py --baseline ../main
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F


class FNetBlock(torch.nn.Module):
    # A copy of the test's, not an import: `--baseline` runs this file against another
    # checkout's packages on PYTHONPATH, which may predate any shared module.
    def __init__(self, d: int, classes: int = 3) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(),
                                      torch.nn.Linear(2 * d, d))
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x):
        x = self.norm1(x + torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real)
        x = self.norm2(x + self.ff(x))
        return self.head(x.mean(1))


def _data(args):
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.tokens, args.d)
    y = torch.randint(0, 3, (args.batch,))
    return FNetBlock(args.d), x, y


def _timed(step, args) -> list[float]:
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def planner_times(args) -> list[float]:
    from planner.torch import trainer

    model, x, y = _data(args)
    with tempfile.TemporaryDirectory() as out:
        t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="sgd", lr=0.01,
                    out_dir=out, costs=args.costs)
        return _timed(lambda: t.step(x, y), args)


def eager_times(args) -> list[float]:
    model, x, y = _data(args)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return _timed(step, args)


def _baseline(args) -> list[float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.baseline)}
    cmd = [sys.executable, __file__, "--planner-only", "--costs", args.costs, "--d",
           str(args.d), "--tokens",
           str(args.tokens), "--batch", str(args.batch), "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--costs", default="measured",
                   help="the trainer's costs (default: measured first, so that no "
                        "measurement runs in the background while the steps are timed)")
    p.add_argument("--baseline", help="another checkout whose planner to time too")
    p.add_argument("--planner-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.planner_only:
        print(json.dumps(planner_times(args)))
        return
    rows = [("planner (this checkout)", planner_times(args)), ("eager PyTorch", eager_times(args))]
    if args.baseline:
        rows.insert(0, (f"planner ({args.baseline})", _baseline(args)))
    print(f"FNet block d={args.d}, {args.tokens} tokens, batch {args.batch}, SGD; "
          f"load average {os.getloadavg()[0]:.1f}; {torch.get_num_threads()} torch threads")
    print("| step | best ms | median ms |\n| --- | --- | --- |")
    for name, times in rows:
        print(f"| {name} | {min(times):.1f} | {statistics.median(times):.1f} |")


if __name__ == "__main__":
    main()
