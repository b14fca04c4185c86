"""Train LeNet on scikit-learn's bundled 8x8 digits with the numpy reference interpreter.

No download: the 1,797 digit images ship inside scikit-learn. The training graph comes from the
zoo's LeNet (`zoo:lenet?image=8`) and `make_training_graph`; every step is one `train_step` of
the reference interpreter, the oracle that generated executors are checked against. Accuracy is
measured with the forward graph (batch = the whole test split) and the trained parameters.

    python examples/train_digits_reference.py                 # 300 steps of Adam, batch 32
    python examples/train_digits_reference.py --steps 100 --optimizer momentum --lr 0.05

Prints the loss every `--every` steps, then the test accuracy; exits 1 if the run misses its
targets (final loss below 30% of the first, test accuracy above 90%).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params, run, train_step
from planner.graph.optimizer import Optimizer
from planner.zoo import build


@dataclass(frozen=True)
class Digits:
    """Images (N, 1, 8, 8) float32 scaled to [0, 1] and labels (N,) int64, split train/test."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


@dataclass(frozen=True)
class Result:
    losses: list[float]  # training loss of each step (of that step's batch)
    test_accuracy: float


def load_digits(test_fraction: float = 0.25, seed: int = 0) -> Digits:
    """scikit-learn's digits, shuffled with `seed` and split."""
    from sklearn.datasets import load_digits as sklearn_digits

    data = sklearn_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Digits(images[train], labels[train], images[test], labels[test])


def train(steps: int = 300, batch: int = 32, optimizer: Optimizer | None = None,
          seed: int = 0, every: int = 0, precision: str = "fp32") -> Result:
    """Train LeNet for `steps` steps on shuffled mini-batches; return losses and test accuracy.

    `every` > 0 prints the loss every that many steps; `precision` is the training graph's
    policy (bf16-mixed: bfloat16 emulated exactly, planner/frontend/passes/precision.py).
    """
    optimizer = optimizer or Optimizer(kind="adam", lr=0.01)
    digits = load_digits(seed=seed)
    graph = make_training_graph(build("lenet", batch=batch, image=8), optimizer,
                                precision=precision)
    state = init_params(graph, seed=seed)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(digits.train_labels))
    at, losses = 0, []
    for step in range(1, steps + 1):
        if at + batch > len(order):
            order, at = rng.permutation(len(order)), 0
        pick = order[at:at + batch]
        at += batch
        feeds = {"images": digits.train_images[pick], "labels": digits.train_labels[pick]}
        outputs, state = train_step(graph, feeds, state)
        losses.append(float(outputs["loss"]))
        if every and (step % every == 0 or step == 1):
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
    return Result(losses, accuracy(state, digits.test_images, digits.test_labels))


def accuracy(state: dict[str, np.ndarray], images: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of `images` whose largest logit is the label, by the forward graph."""
    forward = build("lenet", batch=len(labels), image=8, loss=False)
    params = {t.name: state[t.name] for t in forward.by_role("param", "state")}
    logits = run(forward, {"images": images}, params, keep="outputs")["logits"]
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="adam")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: 0.01 for adam, 0.05 otherwise)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=25, help="print the loss every N steps")
    args = parser.parse_args(argv)
    lr = args.lr if args.lr is not None else (0.01 if args.optimizer == "adam" else 0.05)
    result = train(args.steps, args.batch, Optimizer.parse(args.optimizer, lr=lr), args.seed,
                   args.every)
    first, last = result.losses[0], float(np.mean(result.losses[-10:]))
    print(f"loss {first:.4f} -> {last:.4f} ({last / first:.0%} of the start); "
          f"test accuracy {result.test_accuracy:.1%}")
    return 0 if last < 0.3 * first and result.test_accuracy > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
