"""One engine running one user's training script, for bench/bench_first_step.py: started in a
fresh process, it prints one JSON line of what it saw (the first step's end and every step's
time as time.time(), so the parent measures from before the process started).

    python bench/first_step_loop.py --workload cnn|text --engine ENGINE [--steps N] [--quick]
        [--device cpu|cuda]

ENGINE: eager | inductor | inductor-dynamic | planner (torch.compile(model, backend="planner"))
| trainer (planner.torch.trainer).

`--device cuda`: PyTorch's engines run the module and its batches on the GPU (each step's end
waits for the GPU); the trainer keeps the module where users make it and plans for
`target="gpu"` (the CUDA executor: batches copied in, the loss copied back). The backend runs
on the host only: `planner` is refused there.

Workloads, written as users write them:

- cnn: a ResNet-ish CNN of its own on CIFAR-sized images (3x32x32, 10 classes: random images
  with a learnable rule, since no data set can be downloaded here), AdamW with two
  weight-decay groups, a cosine schedule, clip_grad_norm_, `eval()` + `no_grad` validation
  every 4 steps, a DataLoader whose last batch holds 8 of 32 rows, 2 epochs, then a
  checkpoint written, loaded into a fresh model and optimizer and 2 more steps (the resume).
- text: a small transformer classifier fine-tuned with dynamic padding: each batch padded to
  its longest sequence, the lengths those of paragraphs of real English text (the docstrings
  of Python's standard library, in words, clipped to 8-96: 20+ distinct lengths), 200 steps
  (fewer with --steps), AdamW, a padding mask.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def paragraph_lengths(count: int, seed: int) -> list[int]:
    """Word counts of paragraphs of the standard library's docstrings (real English text,
    shipped with every Python), clipped to [8, 96], `count` of them drawn with `seed`."""
    import ast
    import random
    import sysconfig

    lengths = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:200]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)):
                doc = ast.get_docstring(node) or ""
                lengths += [len(p.split()) for p in doc.split("\n\n") if len(p.split()) >= 4]
    rng = random.Random(seed)
    return [min(96, max(8, rng.choice(lengths))) for _ in range(count)]


def cnn_model():
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            h = self.bn1(self.conv1(x)).relu()
            return (self.bn2(self.conv2(h)) + self.skip(x)).relu()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False),
                                      nn.BatchNorm2d(32), nn.ReLU())
            self.blocks = nn.Sequential(Block(32, 32, 1), Block(32, 64, 2), Block(64, 128, 2))
            self.head = nn.Linear(128, 10)

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)).mean((2, 3)))

    return Net()


def text_model(vocab: int = 2000, d: int = 128):
    import torch
    import torch.nn as nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.position = nn.Parameter(torch.randn(128, d) * 0.02)
            layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(d, 2)

        def forward(self, tokens, keep):
            h = self.embed(tokens) + self.position[: tokens.shape[1]]
            h = self.encoder(h, src_key_padding_mask=~keep)
            pooled = (h * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
            return self.head(pooled)

    return Classifier()


def adamw(model, lr):
    import torch

    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    rest = [p for n, p in model.named_parameters() if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                              {"params": rest, "weight_decay": 0.0}], lr=lr)


def cnn_data(quick: bool):
    import torch

    g = torch.Generator().manual_seed(0)
    rows = 32 * (2 if quick else 6) + 8  # the last batch: 8 of 32
    x = torch.randn(rows, 3, 32, 32, generator=g)
    y = (x[:, 0, :16].mean((1, 2)) > 0).long() * 5 + torch.randint(0, 5, (rows,), generator=g)
    vx, vy = torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g)
    data = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.DataLoader(data, batch_size=32, shuffle=False), (vx, vy)


def text_batches(steps: int, quick: bool):
    import torch

    g = torch.Generator().manual_seed(1)
    out = []
    lengths = paragraph_lengths(steps * 8, seed=2)
    for k in range(steps):
        rows = lengths[k * 8:(k + 1) * 8]
        longest = max(rows)
        tokens = torch.randint(1, 2000, (8, longest), generator=g)
        keep = torch.arange(longest)[None, :] < torch.tensor(rows)[:, None]
        tokens = tokens * keep
        y = (tokens[:, 0] % 2).long()
        out.append((tokens, keep, y))
    return out


class Clock:
    """Each step's end (time.time()); on a GPU after the work queued so far has ended."""

    def __init__(self, device: str = "cpu"):
        self.ends: list[float] = []
        self.device = device

    def tick(self):
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
        self.ends.append(time.time())


def run_eager_like(args, clock) -> dict:
    """eager, inductor, inductor-dynamic and planner: the script as users write it, with only
    the torch.compile line differing."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = args.device
    model = (cnn_model() if args.workload == "cnn" else text_model()).to(dev)

    def compiled(m):
        if args.engine == "eager":
            return m
        if args.engine == "planner":
            import planner.torch  # noqa: F401  (registers the backend)

            return torch.compile(m, backend="planner")
        return torch.compile(m, dynamic=True if args.engine == "inductor-dynamic" else None)

    net = compiled(model)
    if args.workload == "cnn":
        loader, (vx, vy) = cnn_data(args.quick)
        opt = adamw(model, 1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2 * len(loader))
        step = 0
        for _ in range(2):
            for x, y in loader:
                model.train()
                x, y = x.to(dev), y.to(dev)
                loss = F.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                clock.tick()
                step += 1
                if step % 4 == 0:
                    model.eval()
                    with torch.no_grad():
                        float(F.cross_entropy(net(vx.to(dev)), vy.to(dev)))
        # The checkpoint, and a resume in a fresh model and optimizer.
        path = Path(tempfile.mkdtemp()) / "ckpt.pt"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
        again = cnn_model().to(dev)
        opt2 = adamw(again, 1e-3)
        saved = torch.load(path)
        again.load_state_dict(saved["model"])
        opt2.load_state_dict(saved["opt"])
        net2 = compiled(again)
        for x, y in list(loader)[:2]:
            loss = F.cross_entropy(net2(x.to(dev)), y.to(dev))
            opt2.zero_grad()
            loss.backward()
            opt2.step()
            clock.tick()
        return {"loss": float(loss)}
    opt = adamw(model, 3e-4)
    batches = text_batches(args.steps, args.quick)
    longest = max(b[0].shape[1] for b in batches)
    for tokens, keep, y in batches:
        tokens, keep, y = tokens.to(dev), keep.to(dev), y.to(dev)
        for t in (tokens, keep) if args.declare and args.engine != "eager" else ():
            # The range declared as Dynamo users do (the trainer's shapes= twin): the longest.
            torch._dynamo.mark_dynamic(t, 1, min=2, max=longest)
        loss = F.cross_entropy(net(tokens, keep), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        clock.tick()
    return {"loss": float(loss)}


def run_trainer(args, clock) -> dict:
    """planner.torch.trainer: the same loops through its step (validation through evaluate,
    the checkpoint through the executor's state_dict)."""
    import torch
    import torch.nn.functional as F

    from planner.torch import trainer

    torch.manual_seed(0)
    target = "gpu" if args.device == "cuda" else "host"
    if args.workload == "cnn":
        model = cnn_model()
        loader, (vx, vy) = cnn_data(args.quick)
        opt = adamw(model, 1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2 * len(loader))
        x0, y0 = next(iter(loader))
        t = trainer(model, (x0,), loss=F.cross_entropy, labels=y0, optimizer=opt,
                    clip_grad_norm=1.0, target=target)
        step = 0
        for _ in range(2):
            for x, y in loader:
                loss = t.step(x, y)
                sched.step()
                clock.tick()
                step += 1
                if step % 4 == 0:
                    t.evaluate(vx, vy)
        ckpt = t.executor.state_dict()
        again = cnn_model()
        opt2 = adamw(again, 1e-3)
        t2 = trainer(again, (x0,), loss=F.cross_entropy, labels=y0, optimizer=opt2,
                     clip_grad_norm=1.0, target=target)
        t2.executor.load_state_dict(ckpt)
        for x, y in list(loader)[:2]:
            loss = t2.step(x, y)
            clock.tick()
        return {"loss": float(loss)}
    model = text_model()
    opt = adamw(model, 3e-4)
    batches = text_batches(args.steps, args.quick)
    longest = max(b[0].shape[1] for b in batches)
    tokens, keep, y = batches[0]
    # The range declared up front: the longest sequence a batch may bring.
    t = trainer(model, (tokens, keep), loss=F.cross_entropy, labels=y, optimizer=opt,
                shapes=[(tokens.new_ones(8, longest), keep.new_ones(8, longest), y)],
                target=target)
    for tokens, keep, y in batches:
        loss = t.step(tokens, keep, y)
        clock.tick()
    return {"loss": float(loss)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=("cnn", "text"), required=True)
    parser.add_argument("--engine", required=True,
                        choices=("eager", "inductor", "inductor-dynamic", "planner", "trainer"))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--declare", action="store_true",
                        help="text: torch.compile's engines get the length range declared "
                             "(torch._dynamo.mark_dynamic up to the longest batch), as the "
                             "trainer gets shapes=")
    args = parser.parse_args()
    if args.device == "cuda" and args.engine == "planner":
        parser.error("--device cuda: the planner backend runs on the host only")
    # The engine's imports, timed apart: issue 83's "first step <= 2 s after import".
    import torch  # noqa: F401

    if args.engine in ("planner", "trainer"):
        import planner.torch  # noqa: F401
    imported = time.time()
    clock = Clock(args.device)
    run = run_trainer if args.engine == "trainer" else run_eager_like
    out = run(args, clock)
    steps = [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    steady = sorted(steps[len(steps) // 2:])
    out.update({"imported": imported, "first_step_end": clock.ends[0], "end": time.time(),
                "steps": len(clock.ends),
                "steady_ms": 1e3 * steady[len(steady) // 2] if steady else math.nan,
                # the slowest step after the first: a new shape's worst (issue 83 (b))
                "slowest_ms": 1e3 * max(steps) if steps else math.nan,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "pid": os.getpid()})
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
