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
from tests.importers.torch_step import Step, mismatches  # noqa: E402

STEPS = 5


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def _model():
    torch.manual_seed(0)
    return MLP()


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g))
            for _ in range(STEPS)]


# name -> (optimizer of a module, scheduler of that optimizer or None)
def _groups(m, **second):
    return [{"params": m.fc1.parameters()}, {"params": m.fc2.parameters(), **second}]


CONFIGS = {
    "sgd-weight-decay": (lambda m: torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=0.05),
                         None),
    "sgd-nesterov": (lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.8,
                                               nesterov=True, weight_decay=0.01), None),
    "sgd-dampening-maximize": (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.8,
                                                         dampening=0.3, maximize=True), None),
    "adam-steplr": (lambda m: torch.optim.Adam(m.parameters(), lr=0.02, betas=(0.8, 0.99),
                                               eps=1e-6, weight_decay=0.01),
                    lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3)),
    # lr=0 for fc1 (the first group: the optimizer's own lr), 0.02 and decay for fc2
    "adamw-amsgrad-groups": (lambda m: torch.optim.AdamW(_groups(m, lr=0.02, weight_decay=0.1),
                                                         lr=0.0, amsgrad=True), None),
    "sgd-cosine-groups": (lambda m: torch.optim.SGD(_groups(m, lr=0.2, weight_decay=0.02),
                                                    lr=0.1, momentum=0.5),
                          lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4)),
}
# The configuration without the setting under test (optimizer, scheduler), which the
# comparison must tell apart.
NEIGHBOURS = {
    "sgd-weight-decay": (lambda m: torch.optim.SGD(m.parameters(), lr=0.1), None),
    "sgd-nesterov": (lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.8,
                                               weight_decay=0.01), None),
    "sgd-dampening-maximize": (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.8,
                                                         maximize=True), None),
    "adam-steplr": (CONFIGS["adam-steplr"][0], None),
    "adamw-amsgrad-groups": (lambda m: torch.optim.AdamW(_groups(m, lr=0.02, weight_decay=0.1),
                                                         lr=0.0), None),
    "sgd-cosine-groups": (CONFIGS["sgd-cosine-groups"][0], None),
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


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_trains_as_torch_optim(name, tmp_path):
    make, schedule = CONFIGS[name]
    model, batches = _model(), _batches()
    f32 = torch_run(model, make, schedule, batches, torch.float32)
    f64 = torch_run(model, make, schedule, batches, torch.float64)
    other = torch_run(model, *NEIGHBOURS[name], batches, torch.float64)
    assert mismatches(other, f32, f64), f"{name}: the setting under test changes nothing"
    got = ours(model, make(model), schedule, batches, tmp_path)
    assert mismatches(got, f32, f64) == []
    if name == "adamw-amsgrad-groups":  # lr 0: fc1 exactly as it started
        for key in ("fc1.weight", "fc1.bias"):
            np.testing.assert_array_equal(got.state[key], model.state_dict()[key].numpy())


@pytest.mark.slow
def test_the_string_form_is_torch_optim(tmp_path):
    # optimizer="sgd", momentum=0.9 is torch.optim.SGD(momentum=0.9): momentum SGD
    model, batches = _model(), _batches()
    make = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)  # noqa: E731
    f32 = torch_run(model, make, None, batches, torch.float32)
    f64 = torch_run(model, make, None, batches, torch.float64)
    plain = torch_run(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), None, batches,
                      torch.float64)
    assert mismatches(plain, f32, f64)
    got = ours(model, "sgd", None, batches, tmp_path, lr=0.1, momentum=0.9)
    assert mismatches(got, f32, f64) == []


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
    assert "'fc2.bias' trains" in _refusal(torch.optim.SGD(
        [m.fc1.weight, m.fc1.bias, m.fc2.weight], lr=0.1), m)
    assert "differentiable=True" in _refusal(torch.optim.Adam(m.parameters(),
                                                              differentiable=True), m)
    assert "setting lr" in _refusal(torch.optim.Adam(m.parameters()), m, lr=0.1)


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
    # OneCycleLR cycles Adam's betas by default: the plan compiled them in (the same build as
    # adam-steplr's, cached by content)
    model, batches = _model(), _batches()
    opt = CONFIGS["adam-steplr"][0](model)
    x, y = batches[0]
    t = trainer(model, (x,), loss=F.mse_loss, labels=y, optimizer=opt, costs="analytical",
                out_dir=tmp_path)
    t.step(x, y)
    torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10)  # writes betas
    with pytest.raises(ValueError, match=r"param_groups\[0\] betas changed from .* "
                                         r"cycle_momentum=False"):
        t.step(x, y)


@pytest.mark.slow
def test_data_parallel_under_torchrun(tmp_path):
    # Two ranks (torchrun's environment), ZeRO-1, AdamW with a StepLR: every rank ends with
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
