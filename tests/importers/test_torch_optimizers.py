"""torch.optim's settings through planner.torch.trainer, against torch.optim itself: each
configuration trains one tiny MLP for STEPS steps on the CPU executor, and every parameter
must end within float32 noise of PyTorch's float32 run, with PyTorch's float64 run as the
exact answer (tests/importers/torch_step.py, `mismatches`: 10x PyTorch's own float32 error
plus 16 ulps). Each configuration also differs from its nearest neighbour (the same without
the setting under test) by far more than that tolerance, so a setting dropped on the way
fails the comparison. Settings the planner cannot honour are refused in one line.
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

STEPS = 5


def _model():
    torch.manual_seed(0)
    return MLP()


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g))
            for _ in range(STEPS)]


def _groups(m, **second):
    return [{"params": m.fc1.parameters()}, {"params": m.fc2.parameters(), **second}]


def _sgd(**settings):
    return lambda m: torch.optim.SGD(m.parameters(), **settings)


def _adamw_groups(**settings):  # fc1 in the first group (the optimizer's own lr), fc2 its own
    return lambda m: torch.optim.AdamW(_groups(m, lr=0.02, weight_decay=0.1), **settings)


def _sgd_groups(**settings):
    return lambda m: torch.optim.SGD(_groups(m, lr=0.2, weight_decay=0.02), **settings)


def _cosine(o):
    return torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4)


def _steplr(o):
    return torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3)


NESTEROV = dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.01)
DAMPED = dict(lr=0.05, momentum=0.8, dampening=0.3, maximize=True)
ADAM = dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01)
# Each build is one configuration of several settings (builds are what costs time);
# name -> (torch's optimizer of a module, its scheduler or None, the trainer's `optimizer`
# settings: None for the torch instance itself, else the string form's keywords), then the
# configurations with one setting under test left out, each of which the comparison must tell
# apart from it.
CONFIGS = {
    # the string form, with PyTorch's names: "sgd" with momentum is momentum SGD
    "sgd-nesterov-string": (_sgd(**NESTEROV), None, {"optimizer": "sgd", **NESTEROV}),
    "sgd-dampening-maximize-groups-cosine": (_sgd_groups(**DAMPED), _cosine, None),
    "adam-steplr": (lambda m: torch.optim.Adam(m.parameters(), **ADAM), _steplr, None),
    # lr=0 for fc1 (the first group), 0.02 and decay 0.1 for fc2
    "adamw-amsgrad-lr0-groups": (_adamw_groups(lr=0.0, amsgrad=True), None, None),
}
NEIGHBOURS = {
    "sgd-nesterov-string": [(_sgd(**{**NESTEROV, "nesterov": False}), None),
                            (_sgd(**{**NESTEROV, "weight_decay": 0.0}), None),
                            (_sgd(lr=0.1, weight_decay=0.01), None)],
    "sgd-dampening-maximize-groups-cosine": [
        (_sgd_groups(**{**DAMPED, "dampening": 0.0}), _cosine),
        (_sgd_groups(**{**DAMPED, "maximize": False}), _cosine),
        (_sgd(**DAMPED), _cosine), (_sgd_groups(**DAMPED), None)],
    "adam-steplr": [(lambda m: torch.optim.Adam(m.parameters(), **ADAM), None),
                    (lambda m: torch.optim.Adam(m.parameters(), lr=0.02, weight_decay=0.01),
                     _steplr)],
    "adamw-amsgrad-lr0-groups": [(_adamw_groups(lr=0.0), None),
                                 (_adamw_groups(lr=0.02, amsgrad=True), None)],
}


def torch_run(model, make, schedule, batches, dtype) -> Step:
    model = copy.deepcopy(model).to(dtype)
    opt = make(model)
    sched = schedule(opt) if schedule else None
    for x, y in batches:
        opt.zero_grad()
        value = F.mse_loss(model(x.to(dtype)), y.to(dtype))
        value.backward()
        opt.step()
        if sched:
            sched.step()
    return Step(value.item(), {k: v.detach().numpy().copy()
                               for k, v in model.state_dict().items()})


def ours(model, optimizer, schedule, batches, tmp_path, **settings) -> Step:
    x0, y0 = batches[0]
    t = trainer(model, (x0,), loss=F.mse_loss, labels=y0, optimizer=optimizer,
                costs="analytical", out_dir=tmp_path, **settings)
    sched = schedule(optimizer) if schedule else None
    for x, y in batches:
        value = t.step(x, y)
        if sched:
            sched.step()
    return Step(value, t.params())


# The trainer's matrix of torch.optim configurations: SAMPLE in CI, the rest with -m slow.
SAMPLE = "adam-steplr"


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.ci_sample) if n == SAMPLE else
    pytest.param(n, marks=pytest.mark.slow) for n in sorted(CONFIGS)])
def test_trains_as_torch_optim(name, tmp_path):
    make, schedule, string_form = CONFIGS[name]
    model, batches = _model(), _batches()
    f32 = torch_run(model, make, schedule, batches, torch.float32)
    f64 = torch_run(model, make, schedule, batches, torch.float64)
    for k, neighbour in enumerate(NEIGHBOURS[name]):
        other = torch_run(model, *neighbour, batches, torch.float64)
        assert mismatches(other, f32, f64), f"{name}: neighbour {k} is no different"
    if string_form is None:
        got = ours(model, make(model), schedule, batches, tmp_path)
    else:
        got = ours(model, string_form["optimizer"], None, batches, tmp_path,
                   **{k: v for k, v in string_form.items() if k != "optimizer"})
    assert mismatches(got, f32, f64) == []
    if name == "adamw-amsgrad-lr0-groups":  # lr 0: fc1 exactly as it started
        for key in ("fc1.weight", "fc1.bias"):
            np.testing.assert_array_equal(got.state[key], model.state_dict()[key].numpy())


def test_the_string_form_is_the_instance():
    # optimizer="sgd", momentum=0.9 is torch.optim.SGD(momentum=0.9): momentum SGD, the same
    # record (and so the same plan) as the instance's, which the runs above check
    from planner.torch.optimizers import from_settings, from_torch

    m = _model()
    for kind, settings, instance in [
            ("sgd", dict(lr=0.1, momentum=0.9), torch.optim.SGD(m.parameters(), lr=0.1,
                                                                 momentum=0.9)),
            ("sgd", dict(lr=0.1), torch.optim.SGD(m.parameters(), lr=0.1)),
            ("adamw", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, amsgrad=True, maximize=True),
             torch.optim.AdamW(m.parameters(), lr=0.01, betas=(0.8, 0.9), eps=1e-6,
                               amsgrad=True, maximize=True)),
            ("adamw", dict(lr=0.001, weight_decay=0.0),
             torch.optim.Adam(m.parameters(), decoupled_weight_decay=True))]:
        assert from_settings(kind, **settings) == from_torch(instance, m, "model.")
    assert from_settings("sgd", lr=0.1, momentum=0.9).update_op == "ApplyMomentum"


def _refusal(optimizer, model=None, **settings) -> str:
    model, (x, y) = model or _model(), _batches()[0]
    with pytest.raises(UserError) as e:
        trainer(model, (x,), loss=F.mse_loss, labels=y, optimizer=optimizer, **settings)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_what_cannot_be_honoured_is_refused_by_name():
    m = _model()
    assert "RMSprop: the trainer runs" in _refusal(torch.optim.RMSprop(m.parameters()), m)
    assert "param_groups[1] momentum=0.9 differs" in _refusal(torch.optim.SGD(
        [{"params": m.fc1.parameters(), "momentum": 0.5}, {"params": m.fc2.parameters()}],
        lr=0.1, momentum=0.9), m)
    other = torch.nn.Linear(2, 2)
    assert "not a parameter of the module" in _refusal(
        torch.optim.SGD([*m.parameters(), other.weight], lr=0.1), m)
    assert "'fc2.bias' gets a gradient" in _refusal(torch.optim.SGD(
        [m.fc1.weight, m.fc1.bias, m.fc2.weight], lr=0.1), m)
    assert "differentiable=True" in _refusal(torch.optim.Adam(m.parameters(),
                                                              differentiable=True), m)
    assert "setting lr" in _refusal(torch.optim.Adam(m.parameters()), m, lr=0.1)


def test_a_scheduler_cycling_momentum_plans_it_as_a_run_time_scalar():
    # OneCycleLR's and CyclicLR's default cycle_momentum=True writes betas[0] (Adam) or
    # momentum (SGD) every step: the record reads it each step, as lr (the trained result:
    # tests/importers/test_cycled_momentum.py); without one the record is as before
    from planner.torch.optimizers import from_torch

    for make in (lambda m: torch.optim.AdamW(m.parameters(), lr=0.01),
                 lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)):
        m = _model()
        opt = make(m)
        assert not from_torch(opt, m, "model.").cycle_momentum
        torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10)
        record = from_torch(opt, m, "model.")
        assert record.cycle_momentum and record.update_attrs()["momentum_input"]
        assert "cycle_momentum" not in from_torch(make(m), m, "model.").model_dump_json()
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.01, max_lr=0.1)
    assert from_torch(opt, m, "model.").cycle_momentum


def test_pytorch_names_and_their_errors():
    assert "betas=(beta1, beta2)" in _refusal("adam", beta1=0.9)
    assert _refusal("adam", betas=(0.9, 1.5)).startswith("optimizer setting betas[1] = 1.5:")
    assert _refusal("adam", eps=0).startswith("optimizer setting eps = 0")
    assert "expected a number" in _refusal("sgd", lr="fast")
    assert "nesterov" in _refusal("sgd", lr=0.1, nesterov=True)  # momentum 0, as torch refuses
    assert "amsgrad: not one of torch.optim's names for sgd" in _refusal("sgd", amsgrad=True)
    assert "expected one of sgd" in _refusal("rmsprop")


@pytest.mark.slow
def test_a_scheduler_writing_compiled_settings_is_refused(tmp_path):
    # OneCycleLR cycles Adam's betas by default; made after the trainer, whose plan compiled
    # them in (the same build as adam-steplr's, cached by content), it is refused
    model, batches = _model(), _batches()
    opt = CONFIGS["adam-steplr"][0](model)
    x, y = batches[0]
    t = trainer(model, (x,), loss=F.mse_loss, labels=y, optimizer=opt, costs="analytical",
                out_dir=tmp_path)
    t.step(x, y)
    torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10)  # writes betas
    with pytest.raises(ValueError, match=r"a scheduler made after the trainer cycles its "
                                         r"betas\[0\] .* or pass cycle_momentum=False"):
        t.step(x, y)
    # without cycling (its documented remedy) the same scheduler drives the step's lr
    for group in opt.param_groups:
        group["betas"] = ADAM["betas"]
        group.pop("max_momentum"), group.pop("base_momentum")
    torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10,
                                        cycle_momentum=False)
    t.step(x, y)


@pytest.mark.slow
def test_data_parallel_under_torchrun(tmp_path):
    # Two ranks (torchrun's environment), ZeRO-3, AdamW with a StepLR: every rank ends with
    # the same bits, PyTorch's on the global batch within float32 noise.
    from tests.codegen.dp_harness import launch_ranks

    batches = [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g))
               for g in [torch.Generator().manual_seed(2)] for _ in range(STEPS)]
    np.savez(tmp_path / "data.npz", x=torch.stack([x for x, _ in batches]).numpy(),
             y=torch.stack([y for _, y in batches]).numpy())
    outs = [tmp_path / f"rank{r}.npz" for r in range(2)]
    runs = launch_ranks(["-", "-"], tmp_path / "data.npz", outs, timeout_s=300,
                        local=[{"LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"} for r in range(2)],
                        worker="tests.importers.dp_trainer_worker")
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:]
    got = [dict(np.load(o)) for o in outs]
    assert all(np.array_equal(got[0][k], got[1][k]) for k in got[0])
    torch.manual_seed(100)  # rank 0's module, which the trainer broadcast
    model = MLP()
    make = lambda m: torch.optim.AdamW(m.parameters(), lr=0.02, weight_decay=0.05)  # noqa: E731
    sched = lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)  # noqa: E731
    f32 = torch_run(model, make, sched, batches, torch.float32)
    f64 = torch_run(model, make, sched, batches, torch.float64)
    assert mismatches(Step(f32.loss, got[0]), f32, f64) == []
