"""A scheduler that cycles momentum (OneCycleLR with its default cycle_momentum=True) through
planner.torch.trainer, against PyTorch: the step reads each group's momentum (SGD) or beta1
(AdamW) as it reads lr (planner/torch/optimizers.py), and Adam's bias correction takes this
step's beta1 to the power of the step count, as torch.optim.Adam's `1 - beta1 ** step`.

Tolerance (tests/importers/torch_step.py, `mismatches`): every parameter within 10x PyTorch's
own float32 error (|torch float32 - torch float64|) plus 16 float32 ulps of its scale, and
the loss within 1e-4 relative. The two runs differ only in float32 rounding: PyTorch's Python
floats (lr, momentum, the bias corrections in double) against the step's float32 scalars,
each a relative 6e-8 per use, and the ops' summation orders; over STEPS steps on a 3-layer
MLP these stay far inside that bound, while a momentum held at its first value (what a plan
with momentum compiled in computes) is off by far more: each case checks that its fixed
-momentum neighbour fails the same comparison, so the test tells the two apart.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.errors import UserError  # noqa: E402
from planner.torch.training import trainer  # noqa: E402
from tests.helpers.optimizer_models import MLP  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

STEPS = 24
CASES = {
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.01),
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05),
}


def _one_cycle(opt, **settings):
    return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=STEPS, **settings)


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g))
            for _ in range(STEPS)]


def _torch(model, make, batches, dtype, **cycle) -> Step:
    model = copy.deepcopy(model).to(dtype)
    opt = make(model.parameters())
    sched = _one_cycle(opt, **cycle)
    for x, y in batches:
        opt.zero_grad()
        value = F.mse_loss(model(x.to(dtype)), y.to(dtype))
        value.backward()
        opt.step()
        sched.step()
    return Step(value.item(), {k: v.detach().numpy().copy()
                               for k, v in model.state_dict().items()})


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_cycle_cycling_momentum_trains_as_torch(name, tmp_path):
    torch.manual_seed(0)
    model, batches, make = MLP(), _batches(), CASES[name]
    f32 = _torch(model, make, batches, torch.float32)
    f64 = _torch(model, make, batches, torch.float64)
    # a plan that kept the first momentum: what the comparison must tell apart
    fixed = _torch(model, make, batches, torch.float64, cycle_momentum=False)
    assert mismatches(fixed, f32, f64), f"{name}: cycling changes nothing measurable"
    opt = make(model.parameters())
    sched = _one_cycle(opt)  # before the trainer, as a training script makes it
    x0, y0 = batches[0]
    t = trainer(model, (x0,), loss=F.mse_loss, labels=y0, optimizer=opt, costs="analytical",
                out_dir=tmp_path)
    key = "beta1" if name == "adamw" else "momentum"
    assert all(n.attrs.get("momentum_input") for n in t.graph.nodes
               if n.op in ("ApplyMomentum", "ApplyAdam"))
    seen = set()
    for x, y in batches:
        value = t.step(x, y)
        seen.add(t.executor.hyperparameters()[0][key])
        sched.step()
    assert len(seen) > STEPS // 2  # it did cycle, and the executor read each value
    assert mismatches(Step(value, t.params()), f32, f64) == []


def test_momentum_set_by_hand(tmp_path):
    # with a cycling scheduler the step reads betas[0] each step: a write by hand is honoured
    # too; a setting still compiled in (betas[1]) is refused in one line before the step
    torch.manual_seed(0)
    model, batches = MLP(), _batches()[:3]
    opt = CASES["adamw"](model.parameters())
    _one_cycle(opt)
    x0, y0 = batches[0]
    t = trainer(model, (x0,), loss=F.mse_loss, labels=y0, optimizer=opt, costs="analytical",
                out_dir=tmp_path)
    t.step(x0, y0)
    opt.param_groups[0]["betas"] = (0.5, opt.param_groups[0]["betas"][1])
    t.step(x0, y0)
    assert t.executor.hyperparameters()[0]["beta1"] == 0.5
    opt.param_groups[0]["betas"] = (0.5, 0.9)
    with pytest.raises(ValueError, match=r"param_groups\[0\] betas\[1\] changed from 0.999 to "
                                         r"0.9: the plan compiled it in") as e:
        t.step(x0, y0)
    assert "\n" not in str(e.value)


def test_what_stays_compiled_in_is_refused_in_one_line(tmp_path):
    # no cycling scheduler: momentum is compiled in, so a write by hand, or a cycling
    # scheduler made after the trainer, is refused before the step that would ignore it
    torch.manual_seed(0)
    model, (x0, y0) = MLP(), _batches()[0]
    opt = CASES["sgd-momentum"](model.parameters())
    t = trainer(model, (x0,), loss=F.mse_loss, labels=y0, optimizer=opt, costs="analytical",
                out_dir=tmp_path)
    assert all("momentum_input" not in n.attrs for n in t.graph.nodes)
    t.step(x0, y0)
    opt.param_groups[0]["momentum"] = 0.5
    with pytest.raises(ValueError, match=r"param_groups\[0\] momentum changed from 0.9 to "
                                         r"0.5: the plan compiled it in"):
        t.step(x0, y0)
    opt.param_groups[0]["momentum"] = 0.9
    _one_cycle(opt)
    with pytest.raises(ValueError, match="a scheduler made after the trainer cycles its "
                                         "momentum"):
        t.step(x0, y0)


def test_sharding_a_cycled_momentum_is_refused():
    from planner.frontend.autodiff import make_training_graph
    from planner.graph import Optimizer
    from planner.step.collectives.data_parallel import buckets, with_sharded_updates
    from planner.zoo import build

    graph = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=3, classes=2),
                                Optimizer(kind="adamw", cycle_momentum=True))
    with pytest.raises(UserError, match="a momentum read each step") as e:
        with_sharded_updates(graph, buckets(graph, 64), ranks=2)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("settings", [dict(kind="momentum", nesterov=True),
                                      dict(kind="momentum", dampening=0.25),
                                      dict(kind="adamw", amsgrad=True)])
def test_a_momentum_read_each_step_is_the_compiled_one_when_it_holds_still(settings):
    # The reference interpreter: a graph reading momentum (or beta1) each step, left at its
    # first value, computes the compiled graph's bits (with a recorded lr schedule, whose
    # ScheduledLR finds lr after the momentum input); a value written between steps is read:
    # the next step equals a graph compiled with that value, not the first one's.
    from planner.frontend.autodiff import make_training_graph
    from planner.graph import Optimizer
    from planner.graph.interpret import init_params, random_feeds, train_step
    from planner.ops.lr_schedule import LRSchedule
    from planner.zoo import build

    forward = build("mlp", batch=4, hidden=[8], in_features=5, classes=3)
    schedule = LRSchedule(kind="step", step_size=1, gamma=0.5)
    key = "beta1" if settings["kind"] == "adamw" else "momentum"

    def graph(**more):
        return make_training_graph(forward, Optimizer(**settings, **more, schedule=schedule))

    read, fixed, other = graph(cycle_momentum=True), graph(), graph(**{key: 0.5})
    feeds = random_feeds(read)
    states = {name: init_params(g, seed=1) for name, g in (("read", read), ("fixed", fixed))}
    for _ in range(2):
        for name, g in (("read", read), ("fixed", fixed)):
            states[name] = train_step(g, feeds, states[name])[1]
    params = [t.name for t in fixed.by_role("param") if not t.updates]
    for p in params:
        np.testing.assert_array_equal(states["read"][p], states["fixed"][p], err_msg=p)
    # the next step from the same state with 0.5 written: the compiled-0.5 graph's bits,
    # not the compiled first value's
    written = {**states["read"], f"optim/group/0/{key}": np.float32(0.5)}
    stepped = train_step(read, feeds, written)[1]
    want = train_step(other, feeds, states["fixed"])[1]
    moved = train_step(fixed, feeds, states["fixed"])[1]
    for p in params:
        np.testing.assert_array_equal(stepped[p], want[p], err_msg=p)
    assert any(not np.array_equal(stepped[p], moved[p]) for p in params)


def test_a_checkpoint_carries_the_cycled_momentum(tmp_path):
    torch.manual_seed(0)
    model, batches = MLP(), _batches()[:2]
    opt = CASES["sgd-nesterov"](model.parameters())
    _one_cycle(opt)
    x0, y0 = batches[0]
    t = trainer(model, (x0,), loss=F.mse_loss, labels=y0, optimizer=opt, costs="analytical",
                out_dir=tmp_path)
    t.step(x0, y0)
    saved = t.executor.state_dict()
    assert saved["optimizer"]["param_groups"][0]["momentum"] == np.float32(
        opt.param_groups[0]["momentum"])
    saved["optimizer"]["param_groups"][0]["momentum"] = 0.5
    t.executor.load_state_dict(saved)
    assert t.executor.hyperparameters()[0]["momentum"] == 0.5
