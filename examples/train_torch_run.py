"""A PyTorch training script, run on the generated CPU executor: a DataLoader, AdamW with no
decay on biases and norms, a warm-up + cosine schedule from torch.optim.lr_scheduler,
clip_grad_norm_, evaluation each epoch and a checkpoint each epoch (docs/training.md).

    python examples/train_torch_run.py                  # 3 epochs on scikit-learn's digits
    python examples/train_torch_run.py --check          # also resume from epoch 1's checkpoint
                                                        # and compare with the whole run
    python examples/train_torch_run.py --save run.npz   # the trained parameters, to compare
                                                        # runs (the same bits every run)

What differs from a plain PyTorch loop: `trainer(...)` plans and builds the step once (cached);
the scheduler drives the executor through `ExecutorOptimizer`; evaluation runs the module in
eval() mode from the same build (`Trainer.evaluate`: the parameters as trained, no copy); the
checkpoint is `executor.state_dict()` (PyTorch's model/optimizer layout) beside the
scheduler's. Exits 1 if test accuracy is 85% or less, or (--check) the resumed run's
parameters are not the whole run's bit for bit (the executor runs the plan's main schedule
whatever the machine's load: docs/training.md, "Reproducibility").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from planner.graph.optimizer import ParamGroup
from planner.torch import trainer
from planner.torch.schedule import ExecutorOptimizer

BATCH, LR, DECAY, CLIP, WARMUP = 32, 1e-2, 0.05, 1.0, 10
NO_DECAY = r"(bias|norm\.weight)$"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(self.norm(F.relu(self.fc1(x))))


def data() -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    return TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])


def start(model: nn.Module, epochs: int, batches: int, out: Path):
    """The executor's trainer, its optimizer view and the PyTorch scheduler driving it."""
    x0, y0 = torch.zeros(BATCH, 64), torch.zeros(BATCH, dtype=torch.int64)
    t = trainer(model, (x0,), loss=F.cross_entropy, labels=y0, optimizer="adamw", lr=LR,
                weight_decay=DECAY, clip_grad_norm=CLIP, out_dir=out,
                groups=[ParamGroup(params=NO_DECAY, weight_decay=0.0)])
    opt = ExecutorOptimizer(t.executor)
    L = torch.optim.lr_scheduler
    sched = L.SequentialLR(opt, [L.LinearLR(opt, 0.1, total_iters=WARMUP),
                                 L.CosineAnnealingLR(opt, T_max=epochs * batches - WARMUP)],
                           milestones=[WARMUP])
    return t, opt, sched


def accuracy(t, test: TensorDataset) -> float:
    """The module in eval() mode from the same build (`Trainer.evaluate`), a training-sized
    batch at a time; the last one padded with zeros, whose predictions are not counted."""
    x, y = test.tensors
    right = 0
    for at in range(0, len(y), BATCH):
        xs, ys = x[at:at + BATCH], y[at:at + BATCH]
        take = len(ys)
        if take < BATCH:
            xs = torch.cat([xs, xs.new_zeros(BATCH - take, *xs.shape[1:])])
            ys = torch.cat([ys, ys.new_zeros(BATCH - take)])
        _, (logits,) = t.evaluate(xs, ys)
        right += int((logits[:take].argmax(1) == ys[:take].numpy()).sum())
    return right / len(y)


def train(model, train_set, test, epochs: int, out: Path, resume: Path | None = None,
          first_epoch: int = 0) -> tuple[dict[str, np.ndarray], float]:
    loader = DataLoader(train_set, batch_size=BATCH, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(0))
    t, opt, sched = start(model, epochs, len(loader), out)
    if resume is not None:
        saved = torch.load(resume, weights_only=True)
        t.executor.load_state_dict(_numpy(saved["run"]))
        sched.load_state_dict(saved["scheduler"])
        # the next step's rates: the scheduler's (what optimizer.load_state_dict restores)
        for group, lr in zip(opt.param_groups, sched.get_last_lr(), strict=True):
            group["lr"] = lr
        loader.generator.set_state(saved["data"])
    acc = 0.0
    for epoch in range(first_epoch, epochs):
        for x, y in loader:
            opt.step()                      # this step's learning rates into the executor
            loss = t.step(x, y)
            sched.step()
        acc = accuracy(t, test)
        print(f"epoch {epoch + 1}: loss {loss:.4f}, test accuracy {acc:.1%}")
        torch.save({"run": _torch(t.executor.state_dict()), "scheduler": sched.state_dict(),
                    "data": loader.generator.get_state()}, out / f"epoch{epoch + 1}.pt")
    return t.params(), acc


def _torch(tree):
    """numpy arrays as torch tensors (torch.load(weights_only=True) reads only those)."""
    if isinstance(tree, dict):
        return {k: _torch(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_torch(v) for v in tree]
    return torch.from_numpy(np.array(tree)) if isinstance(tree, np.ndarray) else tree


def _numpy(tree):
    if isinstance(tree, dict):
        return {k: _numpy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_numpy(v) for v in tree]
    return tree.numpy() if isinstance(tree, torch.Tensor) else tree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="build and checkpoint folder")
    ap.add_argument("--check", action="store_true",
                    help="resume from epoch 1's checkpoint and compare with the whole run")
    ap.add_argument("--save", type=Path, default=None,
                    help="write the trained parameters to this .npz file")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="train-torch-run-"))
    out.mkdir(parents=True, exist_ok=True)
    train_set, test = data()
    torch.manual_seed(0)
    model = Net()
    start_state = {k: v.clone() for k, v in model.state_dict().items()}
    whole, acc = train(model, train_set, test, args.epochs, out)
    if args.save is not None:
        np.savez(args.save, **whole)
    status = 0 if acc > 0.85 else 1
    if args.check and args.epochs > 1:
        fresh = Net()
        fresh.load_state_dict(start_state)
        resumed, _ = train(fresh, train_set, test, args.epochs, out / "resumed",
                           resume=out / "epoch1.pt", first_epoch=1)
        worst = max(float(np.max(np.abs(resumed[k] - whole[k])) / np.max(np.abs(whole[k])))
                    for k in whole)
        print("resumed from epoch 1: " + ("bit for bit the whole run" if worst == 0 else
                                          f"{worst:.2g} (relative) from the whole run"))
        status |= 0 if worst == 0 else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
