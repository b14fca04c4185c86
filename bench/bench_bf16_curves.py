"""bf16-mixed loss curves against float32 and against PyTorch autocast's own, on the small
ResNet, DenseNet and Inception graphs whose 30-step bf16 curves leave float32's (issue 23).

    PYTHONPATH=. python bench/bench_bf16_curves.py [--steps 30] [--models resnet,densenet]

For each configuration, from the same start and batch (init_params / random_feeds, seed 0),
30 SGD steps of: the reference interpreter on the float32 and the bf16-mixed training graph
(bfloat16 emulated with ml_dtypes), and PyTorch on the same forward graph translated op by op
(tests/torch_translator.py) in float32 and under torch.autocast("cpu", bfloat16).
Printed: the first and last losses, the last-step gaps (ours bf16 vs ours float32, autocast vs
torch float32, and torch float32 vs ours float32: two float32 implementations, the curve's own
reproducibility), and the first step's gradient error against float64 (torch's autograd on
the float64 graph), all params together. Numerics, not timing: one run, no rounds.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.frontend.autodiff import add_dropout_step, find_loss  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds, run, train_step  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.zoo import build  # noqa: E402

# (model, configuration, learning rate)
CONFIGS = [
    ("resnet", dict(batch=4, image=32, depth=18, width=0.125, classes=4), 1e-3),
    ("resnet", dict(batch=4, image=32, depth=18, width=0.125, classes=4), 1e-4),
    ("resnet", dict(batch=16, image=32, depth=18, width=0.125, classes=4), 1e-4),
    ("densenet", dict(batch=4, image=32, depth=121, width=0.125, classes=4), 1e-3),
    ("inception_v3", dict(batch=4, image=16, width=0.0625, classes=4), 1e-3),
]


def ours(forward, precision: str, lr: float, steps: int) -> list[float]:
    g = prepare(forward, GraphOptions(optimizer=Optimizer(kind="sgd", lr=lr), precision=precision))
    state, feeds = init_params(g, seed=0), random_feeds(g, seed=0)
    losses = []
    for _ in range(steps):
        out, state = train_step(g, feeds, state)
        losses.append(float(out[find_loss(forward)]))
    return losses


def ours_grads(forward, precision: str) -> np.ndarray:
    """Every param's first-step gradient, read off an SGD step with lr 1."""
    g = prepare(forward, GraphOptions(optimizer=Optimizer(kind="sgd", lr=1.0), precision=precision))
    state = init_params(g, seed=0)
    values = run(g, random_feeds(g, seed=0), state)
    new = {t.updates: t.name for t in g.tensors if t.updates is not None}
    return np.concatenate([(state[p.name].astype(np.float64)
                            - values[new[p.name]].astype(np.float64)).ravel()
                           for p in forward.by_role("param")])


def torch_run(forward, lr: float, steps: int, dtype: str, autocast: bool):
    """(losses, first-step gradients) of PyTorch on the translated graph."""
    import torch

    from tests.torch_translator import torch_forward

    dt = getattr(torch, dtype)
    g = prepare(forward, GraphOptions(optimizer=Optimizer(kind="sgd", lr=lr)))
    state, feeds = init_params(g, seed=0), random_feeds(g, seed=0)

    def tensor(v):
        t = torch.from_numpy(np.asarray(v))
        return t.to(dt) if t.is_floating_point() else t

    names = [t.name for t in forward.by_role("param")]
    params = {p: tensor(state[p]).requires_grad_() for p in names}
    stats = {t.name: tensor(state[t.name]) for t in forward.by_role("state")}
    opt = torch.optim.SGD(list(params.values()), lr=lr)
    fwd, loss = add_dropout_step(forward), find_loss(forward)
    losses, grads = [], None
    for step in range(steps):
        opt.zero_grad()
        values = {**{k: tensor(v) for k, v in feeds.items()}, **params, **stats,
                  "rng/step": torch.tensor(step)}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            env = torch_forward(fwd, values)
        env[loss].float().backward()
        if grads is None:
            grads = np.concatenate([params[p].grad.double().numpy().ravel() for p in names])
        opt.step()
        losses.append(float(env[loss].detach()))
    return losses, grads


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--models", default="", help="comma-separated subset of the models")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import os

    print(f"load average {os.getloadavg()[0]:.1f}; {args.steps} SGD steps on one batch")
    print("| model (config) | lr | first loss f32 / bf16 / autocast | last f32 | gap bf16 "
          "| gap autocast | gap torch-f32 | grad err f32 / bf16 / autocast |")
    print("|---|---|---|---|---|---|---|---|")
    wanted = set(filter(None, args.models.split(",")))
    for model, cfg, lr in CONFIGS:
        if wanted and model not in wanted:
            continue
        forward = build(model, **cfg)
        o32, o16 = ours(forward, "fp32", lr, args.steps), ours(forward, "bf16-mixed", lr,
                                                                args.steps)
        t32, _ = torch_run(forward, lr, args.steps, "float32", False)
        t16, g16 = torch_run(forward, lr, 1 if args.steps < 1 else args.steps, "float32",
                             True)
        _, g64 = torch_run(forward, lr, 1, "float64", False)
        e32, e16 = rel(ours_grads(forward, "fp32"), g64), rel(ours_grads(forward, "bf16-mixed"),
                                                            g64)
        shown = ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "classes")
        print(f"| {model} ({shown}) | {lr:g} | {o32[0]:.4f} / {o16[0]:.4f} / {t16[0]:.4f} "
              f"| {o32[-1]:.4f} | {100 * rel(o16[-1], o32[-1]):.1f}% "
              f"| {100 * rel(t16[-1], t32[-1]):.1f}% | {100 * rel(t32[-1], o32[-1]):.1f}% "
              f"| {e32:.1e} / {e16:.2f} / {rel(g16, g64):.2f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
