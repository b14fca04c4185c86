"""PyTorch's losses with every option, imported by the torch front end (rules_losses.py): the
loss value and the gradient the planner's autodiff gives (on the numpy reference) against
torch.autograd in float64.

Each case is a module holding a float parameter w that scales the input (so every loss
input is differentiated through), then the loss (and, for reduction='none', the user's own
arithmetic down to a scalar). Tolerance: every value is a float32 sum of at most a few hundred
terms, each a few roundings from exact; 2e-5 relative to the result's largest magnitude bounds
that with room (float32 eps is 1.2e-7), and a wrong formula or option is off by far more.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from planner.frontend.autodiff import gradients  # noqa: E402
from planner.graph import run  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402

N, C = 6, 5


class Scaled(nn.Module):
    """loss(w * x, *targets): the loss of a learned scaling of x."""

    def __init__(self, loss, shape) -> None:
        super().__init__()
        self.loss = loss
        self.w = nn.Parameter(torch.rand(shape, generator=torch.Generator().manual_seed(3)) + 0.5)

    def forward(self, x, *targets):
        return self.loss(self.w * x, *targets)


def _export(model, args):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model, args)


def check_against_torch(loss, x, *targets):
    """The planner's loss and d(loss)/dw equal torch's float64 ones (module docstring)."""
    model = Scaled(loss, x.shape)
    imported = convert(_export(model, (x, *targets)))
    graph, grads = gradients(imported.graph, ["w"])
    feeds = {name: (v.numpy()) for name, v in zip(imported.inputs, (x, *targets), strict=True)}
    got = run(graph, feeds, imported.params(), keep="outputs")
    twin = Scaled(loss, x.shape).double()
    twin.load_state_dict(model.state_dict())
    want = twin(x.double(), *(t.double() if t.is_floating_point() else t for t in targets))
    want.backward()
    expected = [want.detach().numpy(), twin.w.grad.numpy()]
    for ours, theirs in zip([got[graph.outputs[0]], got[grads["w"]]], expected, strict=True):
        scale = float(np.max(np.abs(theirs))) or 1.0
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5 * scale)
    return graph


def _as(t, z):
    """A constant of the loss in z's dtype (the float64 twin runs in float64)."""
    return None if t is None else t.to(z.dtype)


def _ids(shape, classes=C, seed=1):
    return torch.randint(0, classes, shape, generator=torch.Generator().manual_seed(seed))


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


WEIGHT = torch.tensor([0.5, 2.0, 1.0, 0.25, 3.0])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight", [None, WEIGHT], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("ignore_index", [-100, 2])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_with_class_ids(reduction, weight, ignore_index, label_smoothing):
    def loss(z, y):
        out = F.cross_entropy(z, y, weight=_as(weight, z), ignore_index=ignore_index,
                              reduction=reduction, label_smoothing=label_smoothing)
        return (out * torch.arange(1.0, N + 1, dtype=z.dtype)).sum() if reduction == "none" else out

    graph = check_against_torch(loss, _x(N, C), _ids((N,)))
    ops = {n.op for n in graph.nodes}
    assert ("SoftmaxCrossEntropy" in ops) == (weight is None and reduction == "mean")


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_of_a_segmentation_map(reduction):
    """Logits (N, C, H, W), labels (N, H, W): classes on axis 1."""
    def loss(z, y):
        out = F.cross_entropy(z, y, weight=_as(WEIGHT, z), reduction=reduction, ignore_index=0)
        return out.pow(2).mean() if reduction == "none" else out

    check_against_torch(loss, _x(2, C, 3, 4), _ids((2, 3, 4)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight", [None, WEIGHT], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy_with_class_probabilities(reduction, weight, label_smoothing):
    def loss(z, p):
        out = F.cross_entropy(z, p, weight=_as(weight, z), reduction=reduction,
                              label_smoothing=label_smoothing)
        return out.sum() * 0.5 if reduction == "none" else out

    probs = torch.softmax(_x(N, C, seed=5), 1)
    check_against_torch(loss, _x(N, C), probs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight", [None, WEIGHT], ids=["unweighted", "weighted"])
def test_nll_loss(reduction, weight):
    def loss(z, y):
        out = F.nll_loss(F.log_softmax(z, 1), y, weight=_as(weight, z), reduction=reduction,
                         ignore_index=4)
        return out.sum() if reduction == "none" else out

    check_against_torch(loss, _x(N, C), _ids((N,)))


def test_focal_loss_on_cross_entropy_without_reduction():
    """The focal loss: cross_entropy(reduction='none') weighted by (1 - p_t)^2 by the user."""
    def focal(z, y):
        ce = F.cross_entropy(z, y, reduction="none")
        return ((-torch.exp(-ce) + 1) ** 2 * ce).mean()

    check_against_torch(focal, _x(N, C), _ids((N,)))


def test_sigmoid_focal_loss_on_bce_with_logits_without_reduction():
    """torchvision.ops.sigmoid_focal_loss (alpha 0.25, gamma 2), with 1 - v spelled -v + 1."""
    def focal(z, t):
        p = torch.sigmoid(z)
        ce = F.binary_cross_entropy_with_logits(z, t, reduction="none")
        p_t = p * t + (-p + 1) * (-t + 1)
        alpha_t = 0.25 * t + 0.75 * (-t + 1)
        return (alpha_t * ce * (-p_t + 1) ** 2).mean()

    check_against_torch(focal, _x(N, C) * 2, (torch.rand(N, C) > 0.7).float())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", ["plain", "weight", "pos_weight", "both"])
def test_binary_cross_entropy_with_logits(reduction, weighted):
    weight = torch.linspace(0.5, 2.0, C) if weighted in ("weight", "both") else None
    pos_weight = torch.linspace(3.0, 0.5, C) if weighted in ("pos_weight", "both") else None

    def loss(z, t):
        out = F.binary_cross_entropy_with_logits(z, t, weight=_as(weight, z),
                                                 pos_weight=_as(pos_weight, z),
                                                 reduction=reduction)
        return out.pow(2).sum() if reduction == "none" else out

    graph = check_against_torch(loss, _x(N, C) * 4, torch.rand(N, C))
    plain = weighted == "plain" and reduction == "mean"
    assert ("SigmoidBCE" in {n.op for n in graph.nodes}) == plain


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_of_probabilities(reduction):
    def loss(z, t):
        weight = torch.linspace(0.5, 2, C, dtype=z.dtype)
        out = F.binary_cross_entropy(torch.sigmoid(z), t, weight=weight, reduction=reduction)
        return out.sum() if reduction == "none" else out

    check_against_torch(loss, _x(N, C), torch.rand(N, C))


REGRESSION = {
    "mse": lambda r: lambda p, t: F.mse_loss(p, t, reduction=r),
    "l1": lambda r: lambda p, t: F.l1_loss(p, t, reduction=r),
    "huber": lambda r: lambda p, t: F.huber_loss(p, t, reduction=r, delta=0.7),
    "smooth_l1": lambda r: lambda p, t: F.smooth_l1_loss(p, t, reduction=r, beta=0.5),
    "smooth_l1_beta0": lambda r: lambda p, t: F.smooth_l1_loss(p, t, reduction=r, beta=0.0),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kind", sorted(REGRESSION))
def test_regression_and_margin_losses(kind, reduction):
    made = REGRESSION[kind](reduction)

    def loss(p, t):
        out = made(p, t)
        return (out * out).sum() if reduction == "none" else out

    check_against_torch(loss, _x(N, C), _x(N, C, seed=9))


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    target = torch.softmax(_x(N, C, seed=4) * 3, 1)
    target[0, 1] = 0.0  # a zero probability: torch's xlogy gives 0 there

    def loss(z, t):
        out = F.kl_div(F.log_softmax(z, 1), t.log() if log_target else t,
                       reduction=reduction, log_target=log_target)
        return out.abs().sum() if reduction == "none" else out

    if log_target:
        target[0, 1] = 1e-3
    check_against_torch(loss, _x(N, C), target)


def test_margin_ranking_loss():
    def loss(s, y):
        return F.margin_ranking_loss(s[:, 0], s[:, 1], y, margin=0.3)

    y = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    check_against_torch(loss, _x(N, 2), y)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_soft_margin_loss(reduction):
    def loss(z, y):
        out = F.soft_margin_loss(z, y, reduction=reduction)
        return out.sum() if reduction == "none" else out

    signs = (torch.rand(N, C, generator=torch.Generator().manual_seed(2)) > 0.5).float() * 2 - 1
    check_against_torch(loss, _x(N, C) * 3, signs)


def test_multilabel_soft_margin_by_log_sigmoid():
    """F.multilabel_soft_margin_loss's own formula (F.logsigmoid both ways); the function
    itself spells 1 - t as a scalar minus a tensor, which the front end does not take yet."""
    def loss(z, t):
        return -(t * F.logsigmoid(z) + (-t + 1) * F.logsigmoid(-z)).mean(1).mean()

    check_against_torch(loss, _x(N, C) * 3, (torch.rand(N, C) > 0.5).float())


SIGNS = torch.tensor([1.0, -1.0, 1.0, 0.5, -1.0, 1.0])  # 0.5: neither, as torch allows


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_hinge_embedding_loss(reduction):
    def loss(x, y):
        out = F.hinge_embedding_loss(x, y[:, None].expand(N, C), margin=0.7,
                                     reduction=reduction)
        return out.sum() if reduction == "none" else out

    check_against_torch(loss, _x(N, C), SIGNS)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cosine_embedding_loss(reduction):
    def loss(x, y):
        out = F.cosine_embedding_loss(x[:, :3], x[:, 2:], y, margin=-0.2, reduction=reduction)
        return out.pow(2).sum() if reduction == "none" else out

    check_against_torch(loss, _x(N, C), SIGNS)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("target", ["ids", "probabilities", "nll"])
def test_unbatched_inputs(reduction, target):
    """Logits (C,) with a 0-d label or (C,) probabilities: torch's 0-d loss."""
    def loss(z, t):
        if target == "nll":
            return F.nll_loss(F.log_softmax(z, 0), t, weight=_as(WEIGHT, z), reduction=reduction)
        return F.cross_entropy(z, t, weight=_as(WEIGHT, z), reduction=reduction,
                               label_smoothing=0.1) * 2

    t = torch.softmax(_x(C, seed=3), 0) if target == "probabilities" else torch.tensor(3)
    check_against_torch(loss, _x(C), t)
