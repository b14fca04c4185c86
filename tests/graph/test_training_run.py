"""A training run, not one step, of the reference interpreter against PyTorch: AdamW with two
parameter groups (no decay and another learning rate on the biases), clip_grad_norm_ and a
warm-up + cosine schedule, 20 steps, the learning rate set as each step's input as a run sets
it.

In float64 both sides compute the same formulas in a different order, ~1e-15 apart per
operation; Adam's m / (sqrt(v) + eps) has a condition number of about 1 (eps is small beside
sqrt(v) where the gradient is not zero), and 20 steps of a small MLP compound a few hundred
operations per element, so 1e-10 relative leaves a wide margin that a wrong formula (a coupled
decay, a missed group, a schedule off by one step) exceeds by orders of magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import find_loss, make_training_graph
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.optimizer import Optimizer, ParamGroup, hyperparameter_tensor
from planner.runtime.schedules import Schedule
from planner.zoo import build
from tests.torch_translator import as_float64, rel_error, torch_forward

torch = pytest.importorskip("torch")
L = torch.optim.lr_scheduler

STEPS, WARMUP = 20, 5
# a max norm that clips some steps and not others
CLIP = 1.5
OPT = Optimizer(kind="adamw", lr=0.02, beta1=0.85, weight_decay=0.05, clip_grad_norm=CLIP,
                groups=(ParamGroup(params="bias$", lr=0.03, weight_decay=0.0),))
SCHEDULE = Schedule(kind="warmup-cosine", warmup=WARMUP, total=STEPS, start_factor=0.2)


def test_adamw_groups_and_a_schedule_match_pytorch_over_a_run():
    forward = as_float64(build("mlp", batch=4, in_features=6, hidden=[5], classes=3))
    graph = make_training_graph(forward, OPT)
    loss = find_loss(forward)
    state = init_params(graph, seed=1)
    names = [t.name for t in forward.by_role("param")]
    params = {p: torch.tensor(state[p], requires_grad=True) for p in names}
    biases = [p for p in names if p.endswith("bias")]
    assert biases and len(biases) < len(names)
    opt = torch.optim.AdamW(
        [{"params": [params[p] for p in names if p not in biases]},
         {"params": [params[p] for p in biases], "lr": 0.03, "weight_decay": 0.0}],
        # the weight decay as the step reads it: a float32 scalar
        lr=0.02, betas=(0.85, 0.999), weight_decay=float(np.float32(0.05)))
    sched = L.SequentialLR(opt, [L.LinearLR(opt, 0.2, total_iters=WARMUP),
                                 L.CosineAnnealingLR(opt, T_max=STEPS - WARMUP)], [WARMUP])
    start = init_params(graph, seed=1)
    clipped: list[bool] = []
    for step in range(STEPS):
        for group in (0, 1):
            base = OPT.hyperparameters(group)["lr"]
            state[hyperparameter_tensor(group, "lr")] = np.float32(base * SCHEDULE.factor(step))
        feeds = random_feeds(forward, seed=10 + step)
        outputs, state = train_step(graph, feeds, state)
        opt.zero_grad()
        env = torch_forward(forward, {**{k: torch.from_numpy(v) for k, v in feeds.items()},
                                      **params})
        env[loss].backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), CLIP)
        clipped.append(float(norm) > CLIP)
        # the learning rate as the step read it: float32, as the hyperparameter tensor holds it
        for k, group in enumerate(opt.param_groups):
            want = float(np.float32(OPT.hyperparameters(k)["lr"] * SCHEDULE.factor(step)))
            assert group["lr"] == pytest.approx(want, rel=1e-7)
            group["lr"] = want
        opt.step()
        sched.step()
        errors = {p: rel_error(state[p], params[p].detach().numpy()) for p in names}
        errors[loss] = rel_error(outputs[loss], env[loss].item())
        worst = max(errors, key=errors.get)
        assert errors[worst] < 1e-10, f"step {step + 1}: {worst} rel. error {errors[worst]:.2e}"
    assert all(rel_error(state[p], start[p]) > 1e-3 for p in names)  # every group moved
    assert any(clipped) and not all(clipped)
