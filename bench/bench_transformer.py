"""zoo:gpt and zoo:bert training steps: the generated CPU executor against PyTorch eager (issue 12).

    python bench/bench_transformer.py [--rounds 15] [--threads N]

One SGD step (forward, backward, update) of each model at the size below, the executor on a
uniform plan (every op on every core, or the first N logical CPUs with --threads) against the
same model in PyTorch eager (float32, torch.optim.SGD, as many threads): gpt as a GPT-2 style
module (pre-LN, causal attention, GELU MLP, tied head), bert as nn.TransformerEncoder over
nn.TransformerEncoderLayer (post-LN, GELU) with embeddings and a tied head. The numerics of the
two are checked against each other in tests/codegen/test_transformer_vs_torch.py. Rounds
alternate (an executor step, then a torch step) so load changes hit both alike; the table gives
medians over rounds.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.build import build  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.graph.autodiff import make_training_graph  # noqa: E402
from planner.graph.interpret import random_feeds  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

CONFIG = dict(batch=8, seq=64, dim=128, heads=4, layers=2, vocab=512)
LR = 0.01


def torch_model(kind: str):
    import torch
    from torch import nn

    c = CONFIG
    dim, heads, seq, vocab = c["dim"], c["heads"], c["seq"], c["vocab"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.register_buffer("future", torch.ones(seq, seq, dtype=torch.bool).triu(1))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(dim, dim=2)
            q, k, v = (z.view(b, t, heads, dim // heads).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-1, -2) / math.sqrt(dim // heads))
            y = (s.masked_fill(self.future, float("-inf")).softmax(-1) @ v)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, dim))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocab, dim)
            self.positions = nn.Parameter(torch.randn(seq, dim) * 0.02)
            if kind == "gpt":
                self.blocks = nn.Sequential(*(Block() for _ in range(c["layers"])))
                self.norm = nn.LayerNorm(dim)
            else:
                self.norm = nn.LayerNorm(dim)  # BERT's embedding LayerNorm
                layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0,
                                                   activation="gelu", batch_first=True)
                self.blocks = nn.TransformerEncoder(layer, c["layers"],
                                                    enable_nested_tensor=False)

        def forward(self, tokens, labels):
            x = self.tokens(tokens) + self.positions
            x = self.norm(self.blocks(x)) if kind == "gpt" else self.blocks(self.norm(x))
            logits = (x @ self.tokens.weight.T).reshape(-1, vocab)
            return nn.functional.cross_entropy(logits, labels)

    return Model()


def torch_step(model, opt, tokens, labels) -> None:
    opt.zero_grad()
    model(tokens, labels).backward()
    opt.step()


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="0: every logical CPU")
    args = parser.parse_args()
    target = detect()
    if args.threads:
        target = target.model_copy(update={"logical_cpus": target.logical_cpus[:args.threads]})
    threads = len(target.logical_cpus)
    torch.set_num_threads(threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("gpt", "bert"):
            graph = make_training_graph(zoo(kind, **CONFIG), Optimizer(kind="sgd", lr=LR))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = plan(graph, target,
                         options=PlanOptions(schedule=ScheduleOptions(strategy="uniform")))
            ex = load(build(render(p, Path(tmp) / kind)).dir).Executor(init=True)
            feeds = random_feeds(graph, seed=1)
            model = torch_model(kind)
            opt = torch.optim.SGD(model.parameters(), lr=LR)
            tokens = torch.from_numpy(feeds["tokens"])
            labels = torch.from_numpy(feeds["labels"])
            ex.step(feeds)
            torch_step(model, opt, tokens, labels)
            ours, theirs = [], []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                ex.step(feeds)
                t1 = time.perf_counter()
                torch_step(model, opt, tokens, labels)
                t2 = time.perf_counter()
                ours.append(t1 - t0)
                theirs.append(t2 - t1)
            rows.append((kind, len(graph.nodes), float(np.median(ours)),
                         float(np.median(theirs))))
    load_avg = os.getloadavg()[0]
    config = ",".join(f"{k}={v}" for k, v in CONFIG.items())
    print(f"host: {target.name}; {threads} threads; {config}; {args.rounds} alternating rounds; "
          f"load average {load_avg:.2f}")
    print(f"{'model':<8}{'ops':>6}{'executor ms':>13}{'torch ms':>10}{'ratio':>8}")
    for kind, ops, ours, theirs in rows:
        print(f"{kind:<8}{ops:>6}{ours * 1e3:>13.2f}{theirs * 1e3:>10.2f}{ours / theirs:>8.2f}")


if __name__ == "__main__":
    main()
