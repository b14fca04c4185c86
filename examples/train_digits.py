"""Train LeNet on scikit-learn's digits through a generated CPU executor.

The whole workflow of the planner on this host: build LeNet's training graph, plan it for the
detected target, render and compile its executor (the kernel library is built once and cached),
import the module, and train: every step is one `Executor.step` over the arena. Halfway, the
parameters (and the optimizer's state) are saved to an .npz file and a fresh executor resumes
from it. Test accuracy comes from the same executor's `evaluate` (the training plan's
evaluation schedule: LeNet's forward graph in inference mode on the parameters as trained).

    python examples/train_digits.py                     # 300 steps of SGD (lr 0.1), batch 32
    python examples/train_digits.py --check             # also run the reference interpreter
    python examples/train_digits.py --out generated/digits --save lenet.npz
    python examples/train_digits.py --precision bf16-mixed   # bfloat16 convs and GEMMs

Prints the loss curve and the test accuracy; with --check, the largest difference between the
executor's loss curve and the numpy reference interpreter's (same data, same order). Exits 1 if
test accuracy is 95% or less (or, with --check, the curves differ by 1e-3 or more).

Mixed precision (`--precision bf16-mixed`): with --check, the two test accuracies must agree
within 2 points instead of the curves within 1e-3. This run is chaotic at that scale: moving
every float32 parameter by one ulp at the start moves the loss by 1e-2 within five steps, and
a bfloat16 rounding that goes the other way (the executor and numpy sum in different orders)
moves a value by 2^-8 of itself. One step of the executor matches the reference's emulated
bfloat16 step to a few bfloat16 units (tests/codegen/test_mixed_precision.py).

SGD is the default because its loss curve is reproducible across implementations: Adam divides
by sqrt(v) + 1e-8, so a parameter whose gradient is float32 rounding noise still moves by about
lr, and two correct float32 implementations drift apart after a hundred steps (try
`--optimizer adam --check`).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from codegen.build import build as build_tree
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.frontend.passes.precision import PRECISIONS
from planner.graph.interpret import init_params
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from planner.pipeline import plan as make_plan
from planner.target.detect import detect
from planner.zoo import build

DEFAULT_LR = {"sgd": 0.1, "momentum": 0.05, "adam": 0.01}


def reference_example():
    """examples/train_digits_reference.py as a module: the data split and the reference run."""
    name = "train_digits_reference"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def executor_module(graph: Graph, out: Path, say=print):
    """Plan `graph` for this host, render it into `out`, build and import it."""
    import warnings

    with warnings.catch_warnings():  # costs come from the analytical model: no profile here
        warnings.simplefilter("ignore")
        plan = make_plan(graph, detect())
    tree = render(plan, out)
    result = build_tree(tree, progress=say)
    say(f"{tree.name}: {len(plan.ops)} ops, built in {result.seconds:.1f} s"
        f"{' (cached)' if result.cached else ''}")
    return load(result.dir)


def batches(n_train: int, batch: int, steps: int, seed: int):
    """The reference example's mini-batch order: shuffled epochs, a fresh shuffle when short."""
    rng = np.random.default_rng(seed)
    order, at = rng.permutation(n_train), 0
    for _ in range(steps):
        if at + batch > len(order):
            order, at = rng.permutation(len(order)), 0
        yield order[at:at + batch]
        at += batch


def train(steps: int, batch: int, optimizer: Optimizer, seed: int, out: Path, save: Path,
          every: int = 25, say=print, precision: str = "fp32") -> tuple[list[float], float]:
    """Train for `steps` steps (resuming from `save` halfway); return losses, test accuracy."""
    digits = reference_example().load_digits(seed=seed)
    graph = make_training_graph(build("lenet", batch=batch, image=8), optimizer,
                                precision=precision)
    module = executor_module(graph, out / f"lenet_digits_train_{precision.replace('-', '_')}",
                             say)
    ex = module.Executor()
    ex.load_params(init_params(graph, seed=seed))
    losses: list[float] = []
    half = steps // 2
    start = time.perf_counter()
    picks = batches(len(digits.train_labels), batch, steps, seed)
    feeds = {"images": np.empty((batch, 1, 8, 8), np.float32), "labels": np.empty(batch, np.int64)}

    def prepare(pick) -> None:  # gather the next batch into the feed arrays
        np.take(digits.train_images, pick, axis=0, out=feeds["images"])
        np.take(digits.train_labels, pick, axis=0, out=feeds["labels"])

    prepare(next(picks))
    for step in range(1, steps + 1):
        # step_async copies the feeds and returns at once: the next batch is gathered into the
        # same arrays while this step runs (seed 004's asynchronous execution).
        ex.step_async(feeds)
        if step < steps:
            prepare(next(picks))
        out_ = ex.wait()
        losses.append(float(out_["loss"]))
        if every and (step % every == 0 or step == 1):
            say(f"step {step:4d}  loss {losses[-1]:.4f}")
        if step == half:
            np.savez(save, **ex.params())
            say(f"saved parameters and optimizer state to {save}; resuming in a new executor")
            ex = module.Executor()
            with np.load(save) as saved:
                ex.load_params(dict(saved))
    seconds = time.perf_counter() - start
    say(f"{steps} steps in {seconds:.2f} s ({seconds / max(steps, 1) * 1e3:.2f} ms/step)")
    return losses, accuracy(ex, digits, batch)


def accuracy(ex, digits, batch: int) -> float:
    """Test accuracy by the training executor's evaluate() (no second plan or build, no copy
    of the parameters), one training-sized batch at a time; the last one padded with zeros,
    whose predictions are not counted."""
    n = len(digits.test_labels)
    images = np.zeros((batch, 1, 8, 8), np.float32)
    labels = np.zeros(batch, np.int64)
    right = 0
    for at in range(0, n, batch):
        take = min(batch, n - at)
        images[:take], labels[:take] = digits.test_images[at:at + take], \
            digits.test_labels[at:at + take]
        images[take:], labels[take:] = 0, 0
        logits = ex.evaluate({"images": images, "labels": labels})["logits"]
        right += int(np.sum(np.argmax(logits[:take], axis=1) == labels[:take]))
    return right / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="sgd")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: sgd 0.1, momentum 0.05, adam 0.01)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=25, help="print the loss every N steps")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the generated executors (default: a temporary one)")
    parser.add_argument("--save", type=Path, default=None,
                        help="parameters .npz written halfway (default: in --out)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="precision policy of the training step (default: fp32); the test "
                             "accuracy is measured by its evaluation (the same precision)")
    parser.add_argument("--check", action="store_true",
                        help="also train with the reference interpreter and compare the curves")
    args = parser.parse_args(argv)
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    optimizer = Optimizer.parse(args.optimizer, lr=lr)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        save = args.save or out / "lenet_digits.npz"
        losses, acc = train(args.steps, args.batch, optimizer, args.seed, out, save, args.every,
                            precision=args.precision)
    first, last = losses[0], float(np.mean(losses[-10:]))
    print(f"loss {first:.4f} -> {last:.4f} ({last / first:.0%} of the start); "
          f"test accuracy {acc:.1%}")
    ok = acc > 0.95
    if args.check:
        ref = reference_example().train(args.steps, args.batch, optimizer, args.seed,
                                        precision=args.precision)
        gap = float(np.max(np.abs(np.array(losses) - np.array(ref.losses))))
        print(f"reference interpreter: test accuracy {ref.test_accuracy:.1%}; largest loss "
              f"difference over {len(losses)} steps {gap:.2e}")
        if args.precision in ("fp32", "tf32"):
            ok = ok and gap < 1e-3
        else:
            ok = ok and abs(acc - ref.test_accuracy) <= 0.02
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
