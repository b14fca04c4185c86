"""One training step of the reference interpreter against PyTorch autograd + torch.optim.

The torch model is built from the same planner Graph (tests/torch_translator.py: planner nodes
to torch functional calls) with the same initial parameters and the same batch; after each
of two steps the loss, every updated parameter and every BatchNorm running statistic must agree
within 1e-4 relative.

Every model and optimizer is compared in float64, where both sides agree to ~1e-12, so any
difference in a gradient or update formula shows. The small ResNet's last BatchNorms normalise
1x1 maps over the batch (4 values per channel), whose variance can come near epsilon; that
amplifies float32 rounding differences between two correct implementations to ~1e-4 (with a
batch of 2, even float64 ones after an Adam step), so the float32 comparison runs on the other
models.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import add_dropout_step, find_loss, make_training_graph
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.optimizer import Optimizer

torch = pytest.importorskip("torch")

from tests.torch_translator import (  # noqa: E402
    as_float64,
    rel_error,
    torch_forward,
    torch_optimizer,
)

MODELS = {
    "mlp": dict(batch=4, in_features=6, hidden=[5, 4], classes=3),
    "lenet": dict(batch=4, image=8, width=0.5),
    "resnet": dict(batch=4, image=32, width=0.0625, depth=18, classes=5),
    "lstm": dict(batch=2, seq=3, hidden=6, vocab=11, layers=2, dropout=0.3),
    "gpt": dict(batch=2, seq=5, dim=8, heads=2, layers=1, vocab=13),
}

OPTIMIZERS = {
    "sgd": Optimizer(kind="sgd", lr=0.1, weight_decay=1e-3),
    "momentum": Optimizer(kind="momentum", lr=0.1, momentum=0.9, weight_decay=1e-3),
    "nesterov": Optimizer(kind="momentum", lr=0.05, momentum=0.8, nesterov=True),
    "adam": Optimizer(kind="adam", lr=1e-2, beta1=0.8, beta2=0.99, weight_decay=1e-3),
}


# ---- planner nodes as torch calls --------------------------------------------------------------

# ---- the comparison ----------------------------------------------------------------------------

CASES = [(model, opt, "float64") for model in sorted(MODELS) for opt in sorted(OPTIMIZERS)]
CASES += [(model, "adam", "float32") for model in ("lenet", "lstm", "mlp")]


@pytest.mark.parametrize("model,opt,dtype", CASES)
def test_training_steps_match_pytorch(model, opt, dtype):
    from planner.zoo import build

    forward = build(model, **MODELS[model])
    forward = as_float64(forward) if dtype == "float64" else forward
    optimizer = OPTIMIZERS[opt]
    graph = make_training_graph(forward, optimizer)
    loss = find_loss(forward)
    state = init_params(graph, seed=1)
    param_names = [t.name for t in forward.by_role("param")]
    stat_names = [t.name for t in forward.by_role("state")]
    params = {p: torch.tensor(state[p], requires_grad=True) for p in param_names}
    stats = {s: torch.tensor(state[s]) for s in stat_names}
    torch_opt = torch_optimizer(optimizer, list(params.values()))
    for step in range(2):
        feeds = random_feeds(forward, seed=10 + step)
        outputs, state = train_step(graph, feeds, state)

        torch_opt.zero_grad()
        # the same dropout masks as the training graph: its forward reads the step counter
        env = torch_forward(add_dropout_step(forward),
                            {**{k: torch.from_numpy(v) for k, v in feeds.items()}, **params,
                             **stats, "rng/step": torch.tensor(step)})
        env[loss].backward()
        torch_opt.step()
        # the new running statistics become the next step's state, as in the planner graph
        stats = {t.updates: env[t.name].detach() for t in graph.tensors
                 if t.role == "state" and t.updates in stat_names}
        stats = {s: stats.get(s, torch.tensor(state[s])) for s in stat_names}

        errors = {loss: rel_error(outputs[loss], env[loss].item())}
        errors.update({p: rel_error(state[p], params[p].detach().numpy()) for p in param_names})
        errors.update({s: rel_error(state[s], stats[s].numpy()) for s in stat_names})
        worst = max(errors, key=errors.get)
        assert errors[worst] < 1e-4, f"step {step + 1}: {worst} rel. error {errors[worst]:.2e}"
        # the parameters did move: the comparison is not between two unchanged copies
        assert any(not np.array_equal(state[p], init_params(graph, seed=1)[p])
                   for p in param_names)
