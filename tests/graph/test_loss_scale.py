"""fp16-mixed dynamic loss scaling in the reference interpreter: an overflowing step changes no
parameter or optimizer state (bit for bit) and halves the scale; after `growth_interval` clean
steps the scale doubles. The scale sequence is checked against PyTorch's own update rule
(torch._amp_update_scale_, what torch.amp.GradScaler.update runs) fed the same overflow flags.

Normal steps against fp16-mixed without loss scaling, from the same state and feeds: scaling by
a power of two is exact in float16 except where an unscaled gradient is subnormal (below 2^-14)
or underflows to zero, which the scaled one keeps; those bits are what loss scaling buys. So the
two runs agree where gradients are normal and differ by at most float16's subnormal spacing
(2^-24) per gradient element, times the learning rate: a bound far below float16's unit
roundoff u = 2^-11 of the updates. We hold each parameter's difference to u of the step's
largest update (measured here: SGD bit-identical, Adam within 2e-6 of it, its division
by sqrt(v) amplifying the subnormal bits).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import FOUND_INF, LOSS_SCALE, make_training_graph
from planner.graph.interpret import INIT_LOSS_SCALE, init_params, random_feeds, run
from planner.graph.optimizer import LossScaling, Optimizer
from planner.zoo import build
from tests.graph.loss_scale_cases import (
    GROWTH_INTERVAL,
    OVERFLOW_STEP,
    STEPS,
    feeds_for,
    loss_scaled_mlp,
    params,
    torch_scales,
)
from tests.zoo.small_configs import SMALL_TRAINING

U16 = 2.0 ** -11


def train(g, steps: list[int], state):
    """The per-step (found_inf, scale after, state before, state after) of `g`."""
    history = []
    for step in steps:
        values = run(g, feeds_for(g, step), state)
        new = dict(state)
        for t in g.tensors:
            if t.updates is not None:
                new[t.updates] = values[t.name]
        history.append((float(values.get(FOUND_INF, 0.0)), state, new))
        state = new
    return history


# the forced overflow warns in numpy (float16 casts; the skipped update computes NaN)
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_overflow_skips_the_step_and_the_scale_follows_torch(kind):
    g = loss_scaled_mlp(kind)
    history = train(g, list(range(STEPS)), init_params(g, seed=1))
    flags = [found == 1.0 for found, _, _ in history]
    assert flags == [s == OVERFLOW_STEP for s in range(STEPS)]
    scales = [float(after[LOSS_SCALE]) for _, _, after in history]
    assert scales == torch_scales(flags, GROWTH_INTERVAL)
    # halved at the overflow, grown back after GROWTH_INTERVAL clean steps
    assert scales[OVERFLOW_STEP] == INIT_LOSS_SCALE / 2
    assert scales[OVERFLOW_STEP + GROWTH_INTERVAL] == INIT_LOSS_SCALE
    _, before, after = history[OVERFLOW_STEP]
    skipped = [t.updates for t in g.tensors if t.updates and not t.updates.startswith(LOSS_SCALE)]
    assert len(skipped) >= 4
    for name in skipped:
        assert np.array_equal(after[name].view(np.uint32), before[name].view(np.uint32)), name
    _, before, after = history[OVERFLOW_STEP - 1]   # a clean step does update
    assert all(not np.array_equal(after[p], before[p]) for p in params(g))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_clean_steps_match_unscaled_fp16_mixed(kind):
    g, plain = loss_scaled_mlp(kind), loss_scaled_mlp(kind, LossScaling(enabled=False))
    assert not any(n.op == "UnscaleGrads" for n in plain.nodes)
    state = init_params(g, seed=1)
    clean = [s for s in range(STEPS) if s != OVERFLOW_STEP]
    scaled = [h for h, s in zip(train(g, list(range(STEPS)), state), range(STEPS), strict=True)
              if s != OVERFLOW_STEP]
    unscaled = train(plain, clean, {k: v for k, v in state.items()
                                    if not k.startswith(LOSS_SCALE)})
    for (_, before, got), (_, _, want) in zip(scaled, unscaled, strict=True):
        for p in params(g):
            update = np.max(np.abs(want[p].astype(np.float64) - before[p]))
            gap = np.max(np.abs(got[p].astype(np.float64) - want[p]))
            assert gap <= U16 * update, (p, gap, update)


def test_shape_rules_name_the_bad_input():
    from planner.ops import OpError, TensorType, get_op

    scalar, vec = TensorType(()), TensorType((3,))
    with pytest.raises(OpError, match="UnscaleGrads: scale"):
        get_op("UnscaleGrads").infer([vec, vec], {})
    with pytest.raises(OpError, match="gradient 0 must be float32"):
        get_op("UnscaleGrads").infer([TensorType((3,), "float16"), scalar], {})
    with pytest.raises(OpError, match="growth_interval must be >= 1"):
        get_op("UpdateLossScale").infer([scalar] * 3, {"growth_interval": 0})
    with pytest.raises(OpError, match="SkipOnOverflow: next value"):
        get_op("SkipOnOverflow").infer([scalar, TensorType((2,)), vec], {})


ZOO = {"lenet": dict(batch=4, image=12),
       "resnet": dict(batch=4, image=16, depth=18, width=0.125, classes=4)}


@pytest.mark.parametrize("model", sorted(ZOO))
def test_zoo_models_skip_overflowing_steps(model):
    """Convolutions and BatchNorm: every step that overflows (the forced one, and any the first
    scale of 2^16 overflows on its own) leaves params and optimizer state bit-identical, every
    other step updates them, and the scales follow PyTorch's rule over the same flags. BatchNorm
    running statistics are forward state: they move on a skipped step, as in PyTorch (its
    forward ran before GradScaler saw the gradients)."""
    g = make_training_graph(build(model, **ZOO[model]), Optimizer(kind="momentum", lr=0.01),
                            precision="fp16-mixed", loss_scaling=LossScaling(growth_interval=2))
    state = init_params(g, seed=1)
    x = next(t for t in g.by_role("input") if t.dtype == "float32")
    kept = [t.updates for t in g.tensors
            if t.updates and t.role in ("param", "optimizer-state")
            and not t.updates.startswith(LOSS_SCALE)]
    flags, scales = [], []
    for step in range(10):   # the small ResNet backs off from 2^16 to 2^10 in its first steps
        f = random_feeds(g, seed=step)
        if step == 8:
            f[x.name] = (f[x.name] * 1e4).astype(np.float32)
        values = run(g, f, state)
        new = {**state, **{t.updates: values[t.name] for t in g.tensors if t.updates}}
        flags.append(bool(values[FOUND_INF]))
        same = [np.array_equal(new[k].view(np.uint32), state[k].view(np.uint32)) for k in kept]
        assert all(same) if flags[-1] else not all(same), (step, flags)
        scales.append(float(new[LOSS_SCALE]))
        state = new
    assert flags[8] and not flags[7] and not all(flags)
    assert scales == torch_scales(flags, 2)


@pytest.mark.parametrize("model", sorted(SMALL_TRAINING))
def test_every_zoo_model_skips_a_step_forced_to_overflow(model):
    """Every zoo model (small sizes): a loss scale of 2^40 set before step 1 overflows float16
    (any gradient element above 2^-24 scales past 65504); that step keeps params and optimizer
    state bit-identical and halves the scale; every step keeps them exactly when it is flagged.
    (Models whose inputs are token ids take no large input: the scale forces the overflow.)"""
    g = make_training_graph(build(model, **SMALL_TRAINING[model]),
                            Optimizer(kind="momentum", lr=0.01), precision="fp16-mixed")
    state = init_params(g, seed=1)
    kept = [t.updates for t in g.tensors
            if t.updates and t.role in ("param", "optimizer-state")
            and not t.updates.startswith(LOSS_SCALE)]
    for step in range(3):
        if step == 1:
            state = {**state, LOSS_SCALE: np.array(2.0 ** 40, np.float32)}
        values = run(g, random_feeds(g, seed=step), state)
        new = {**state, **{t.updates: values[t.name] for t in g.tensors if t.updates}}
        found = bool(values[FOUND_INF])
        same = [np.array_equal(new[k].view(np.uint32), state[k].view(np.uint32)) for k in kept]
        assert all(same) if found else not all(same), (step, found)
        want = state[LOSS_SCALE] * (np.float32(0.5) if found else np.float32(1))
        assert new[LOSS_SCALE] == want
        assert found or step != 1
        state = new
