"""The PyTorch baseline of the benches: one SGD training step of a forward graph translated
node by node to torch calls (tests/graph/test_train_vs_torch.py), with torch.autograd and
torch.optim.SGD, eagerly or under torch.compile (inductor)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.graph.interpret import init_params, random_feeds  # noqa: E402


def torch_trainer(forward, lr: float, threads: int, compiled: bool = False) -> Callable[[], None]:
    """A function running one training step of `forward`'s loss on `threads` threads; warmed
    up (and compiled) before it is returned."""
    import torch

    from tests.graph.test_train_vs_torch import torch_forward

    torch.set_num_threads(threads)
    state = init_params(forward, seed=0)
    feeds = random_feeds(forward, seed=1)
    params = {t.name: torch.tensor(state[t.name], requires_grad=True)
              for t in forward.by_role("param")}
    values = {**{k: torch.tensor(v) for k, v in state.items()},
              **{k: torch.tensor(v) for k, v in feeds.items()}, **params}
    opt = torch.optim.SGD(list(params.values()), lr=lr)

    def loss(vals):
        return torch_forward(forward, vals)["loss"]

    fn = torch.compile(loss, dynamic=False) if compiled else loss

    def step() -> None:
        opt.zero_grad()
        fn(values).backward()
        opt.step()

    step()
    step()
    return step
