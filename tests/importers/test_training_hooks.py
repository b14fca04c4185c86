"""The user's hooks and autograd.Functions: applied as PyTorch applies them, or refused in one
line naming the hook and the parameter or module, never ignored.

The trainer: forward hooks and pre-hooks run while torch.export traces (honoured: the
training-semantics matrix's `forward_hooks` and `pruned` cases step them against PyTorch,
tests/importers/test_training_semantics.py); backward hooks, which PyTorch runs inside
`loss.backward()` and torch.export never sees, are refused before the trace (planner/torch/
hooks.py), and a gradient hook registered inside forward when the trace meets it. The backend:
autograd runs parameter and module backward hooks around the planned graphs as it does around
eager ops (gradients equal to eager's), and a graph holding a torch.autograd.Function with its
own backward runs eagerly after one line (the planner's gradient rules would replace it).

Tolerance of the backend's gradients: float32 sums in another order, a few ulps of the largest
value over the few terms summed here: 1e-5 of it (a hook not applied is off by the hook's
factor), as tests/test_torch_compile.py.
"""

from __future__ import annotations

import copy
import re
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch import TorchImportError, trainer  # noqa: E402
from planner.torch.piece import PlannerFallback  # noqa: E402
from planner.torch.training import export  # noqa: E402

OPTIONS = {"costs": "analytical"}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.head = nn.Linear(4, 6), nn.Linear(6, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.lin(x)))


def _mask(g):
    return g * (torch.arange(g.numel()).reshape(g.shape) % 2)


def param_hook(m):
    m.lin.weight.register_hook(_mask)


def post_accumulate(m):
    m.head.bias.register_post_accumulate_grad_hook(lambda p: None)


def full_backward(m):
    m.head.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 2,))


def old_backward(m):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.head.register_backward_hook(lambda mod, gi, go: None)


def backward_pre(m):
    m.lin.register_full_backward_pre_hook(lambda mod, go: (go[0] * 0.5,))


def root_backward(m):
    m.register_full_backward_hook(lambda mod, gi, go: None)


@pytest.mark.parametrize(("hook", "says"), [
    (param_hook, r"parameter 'lin\.weight' has a gradient hook \(Tensor\.register_hook\)"),
    (post_accumulate, r"parameter 'head\.bias' has a post-accumulate-grad hook "
                      r"\(Tensor\.register_post_accumulate_grad_hook\)"),
    (full_backward, r"module 'head' \(Linear\) has a backward hook "
                    r"\(register_full_backward_hook\)"),
    (old_backward, r"module 'head' \(Linear\) has a backward hook \(register_backward_hook\)"),
    (backward_pre, r"module 'lin' \(Linear\) has a backward pre-hook "
                   r"\(register_full_backward_pre_hook\)"),
    (root_backward, r"the module Net has a backward hook \(register_full_backward_hook\)"),
], ids=lambda v: getattr(v, "__name__", "says"))
def test_a_backward_hook_is_refused_at_trainer_construction(hook, says):
    model = Net()
    hook(model)
    x, y = torch.randn(2, 4), torch.randint(0, 3, (2,))
    with pytest.raises(TorchImportError, match=rf"^Net: {says}: torch\.export traces the "
                                               rf"forward only.*backend=\"planner\"\), which "
                                               rf"applies it$") as e:
        trainer(model, (x,), loss=F.cross_entropy, labels=y, costs="analytical")
    assert "\n" not in str(e.value)


def test_a_global_module_backward_hook_is_refused():
    from torch.nn.modules.module import register_module_full_backward_hook

    handle = register_module_full_backward_hook(lambda mod, gi, go: None)
    try:
        with pytest.raises(TorchImportError, match=r"^Net: a global module backward hook "
                                                   r"\(torch\.nn\.modules\.module\."
                                                   r"register_module_full_backward_hook\)"):
            export(Net(), (torch.randn(2, 4),), F.cross_entropy, torch.randint(0, 3, (2,)))
    finally:
        handle.remove()


def test_a_hook_of_a_frozen_parameter_is_no_refusal():
    """PyTorch runs no hook of a tensor that gets no gradient."""
    model = Net()
    param_hook(model)
    model.lin.requires_grad_(False)
    export(model, (torch.randn(2, 4),), F.cross_entropy, torch.randint(0, 3, (2,)))


class HookedActivation(Net):
    def forward(self, x):
        h = torch.tanh(self.lin(x))
        h.register_hook(_mask)
        return self.head(h)


def test_a_gradient_hook_registered_in_forward_is_refused_naming_the_line():
    with pytest.raises(TorchImportError, match=r"^HookedActivation: a gradient hook "
                                               r"\(Tensor\.register_hook\) at "
                                               r".*test_training_hooks\.py:\d+: ") as e:
        export(HookedActivation(), (torch.randn(2, 4),), F.cross_entropy,
               torch.randint(0, 3, (2,)))
    line = int(str(e.value).split(".py:")[1].split(":")[0])
    with open(__file__) as f:
        assert "h.register_hook(" in f.read().splitlines()[line - 1]


def assert_close(got, want, what: str) -> None:
    scale = max(float(want.abs().max()), 1e-3)
    err = float((got.double() - want.double()).abs().max())
    assert err <= 1e-5 * scale, f"{what}: |diff| {err:.3g} > 1e-5 x {scale:.3g}"


def test_the_backend_applies_the_backward_hooks_the_trainer_refuses():
    torch.manual_seed(0)
    eager = Net()
    model = copy.deepcopy(eager)
    for m in (eager, model):
        param_hook(m)
        full_backward(m)
        backward_pre(m)
    x = torch.randn(5, 4)
    eager(x).pow(2).sum().backward()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's own on full backward hooks
        warnings.simplefilter("error", PlannerFallback)
        torch.compile(model, backend="planner", options=OPTIONS)(x).pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        assert_close(p.grad, q.grad, name)


class Rounded(torch.autograd.Function):
    """A straight-through estimator with a scaled gradient: not its forward's derivative."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g * 3


class WithFunction(Net):
    def forward(self, x):
        h = self.lin(x)
        return self.head(Rounded.apply(h) + h)


def test_the_backend_runs_a_custom_autograd_function_eagerly_named_in_one_line():
    torch.manual_seed(0)
    eager = WithFunction()
    model = copy.deepcopy(eager)
    x = torch.randn(5, 4)
    eager(x).pow(2).sum().backward()
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(model, backend="planner", options=OPTIONS)(x).pow(2).sum().backward()
    said = [str(w.message) for w in caught if w.category is PlannerFallback]
    assert len(said) == 1 and "\n" not in said[0], said
    assert re.match(r"graph planner_\d+ runs eagerly: node 'autograd_function_apply' at "
                    r"test_training_hooks\.py:\d+: ", said[0]), said[0]
    assert "torch.autograd.Function with its own backward" in said[0]
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        assert_close(p.grad, q.grad, name)
