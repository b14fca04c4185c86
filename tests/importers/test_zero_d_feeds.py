"""0-d tensors through both doors: a module whose step input and label are 0-d tensors (and
one of whose parameters is 0-d), its loss a sum of terms each one op of a family (pointwise,
reductions over the 0-d input's one dim, losses of a 0-d input: margin losses included),
trained by `planner.torch.trainer` and by `torch.compile(..., backend="planner")`, held to
eager PyTorch: every term's value, the loss, and the parameters after the steps.

The feeds keep their shape (a 0-d array stays 0-d on its way to the executor: numpy's
ascontiguousarray would make it [1]), and the margin losses of one sample follow eager's 0-d
shape where torch.export's metadata says [1] (planner/importers/torch/convert.py, _check)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch import trainer  # noqa: E402
from planner.torch.piece import PlannerFallback  # noqa: E402

# name -> the term of (z, x, t): z = w * x (0-d, a parameter's product), x the 0-d input,
# t the 0-d integer label
TERMS = {
    "sin": lambda z, x, t: torch.sin(z),
    "exp_square": lambda z, x, t: torch.exp(-z * z),
    "where_abs": lambda z, x, t: torch.where(z > 0, z, -z),
    "sum_dim0": lambda z, x, t: z.sum(0),
    "mean": lambda z, x, t: z.mean(),
    "amax_dim0": lambda z, x, t: torch.amax(z, 0),
    "logsumexp": lambda z, x, t: torch.logsumexp(z, 0),
    "cumsum": lambda z, x, t: torch.cumsum(z, 0),
    "int_floor_div": lambda z, x, t: torch.div(t + 7, 2, rounding_mode="floor").float() * z,
    "mse": lambda z, x, t: F.mse_loss(z, x),
    "smooth_l1": lambda z, x, t: F.smooth_l1_loss(z, x * 3),
    "bce_logits": lambda z, x, t: F.binary_cross_entropy_with_logits(z, t.float()),
    "multi_margin": lambda z, x, t: F.multi_margin_loss(z, t),
    "multilabel_margin": lambda z, x, t: F.multilabel_margin_loss(z, t),
    "multi_margin_none_sum": lambda z, x, t: F.multi_margin_loss(z + 1, t,
                                                                 reduction="none").sum(),
}
LR, STEPS = 0.1, 3
STEP_INPUTS = [(0.75, 0), (-0.5, 0), (1.25, 0)]


class ZeroD(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(0.8))  # a 0-d parameter
        self.v = torch.nn.Parameter(torch.tensor([0.3, -0.2]))

    def forward(self, x, t):
        z = self.w * x
        terms = torch.stack([term(z, x, t) for term in TERMS.values()])
        return terms.sum() + (self.v * x).pow(2).sum(), terms


def _inputs(k: int):
    x, t = STEP_INPUTS[k]
    return torch.tensor(x), torch.tensor(t)


def _eager() -> tuple[list[float], list[np.ndarray], dict[str, np.ndarray]]:
    """(losses, every step's terms, parameters after) of torch.optim.SGD on eager PyTorch."""
    model = ZeroD()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, terms = [], []
    for k in range(STEPS):
        opt.zero_grad()
        loss, each = model(*_inputs(k))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        terms.append(each.detach().numpy())
    return losses, terms, {n: p.detach().numpy() for n, p in model.named_parameters()}


def _close(got, want, what: str) -> None:
    # float32 values of size ~1 through a handful of ops: a few ulps
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-6, atol=2e-6,
                               err_msg=what)


def test_the_reference_interpreter_keeps_0d_values_0d():
    """The imported graph's forward on the numpy reference interpreter: every term as eager
    (a reference that made its 0-d result [1] is refused by the interpreter's shape check)."""
    from planner.graph.interpret import run
    from planner.importers.torch.convert import convert

    model = ZeroD()
    imp = convert(torch.export.export(model, _inputs(0)), name="zero_d")
    x, t = (a.numpy() for a in _inputs(0))
    feeds = dict(zip(imp.inputs, (x, t), strict=True))
    got = run(imp.graph, feeds, imp.params(), keep="outputs")
    terms = got[imp.outputs[1]]
    _, want = model(*_inputs(0))
    for name, g, w in zip(TERMS, terms, want.detach().numpy(), strict=True):
        _close(g, w, name)


def test_zero_d_feeds_train_as_pytorch_through_the_trainer(tmp_path):
    want_losses, want_terms, want_params = _eager()
    model = ZeroD()
    t = trainer(model, _inputs(0), loss=None, optimizer="sgd", lr=LR, costs="analytical",
                out_dir=tmp_path)
    assert [f.shape for f in t._feeds] == [(), ()]
    for k in range(STEPS):
        loss, outs = t.step(*_inputs(k), outputs=True)
        _close(loss, want_losses[k], f"step {k}: loss")
        assert np.asarray(outs[-1]).shape == (len(TERMS),)
        for name, got, want in zip(TERMS, outs[-1], want_terms[k], strict=True):
            _close(got, want, f"step {k}: {name}")
    t.load_into(model)
    for name, want in want_params.items():
        got = dict(model.named_parameters())[name].detach().numpy()
        assert got.shape == want.shape, name
        _close(got, want, name)


def test_zero_d_feeds_train_as_pytorch_through_the_backend():
    want_losses, want_terms, want_params = _eager()
    model = ZeroD()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="planner", options={"costs": "analytical"})
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlannerFallback)  # planned, not run eagerly
        for k in range(STEPS):
            opt.zero_grad()
            loss, terms = compiled(*_inputs(k))
            assert loss.shape == () and terms.shape == (len(TERMS),)
            loss.backward()
            opt.step()
            _close(loss.item(), want_losses[k], f"step {k}: loss")
            for name, got, want in zip(TERMS, terms.detach().numpy(), want_terms[k],
                                       strict=True):
                _close(got, want, f"step {k}: {name}")
    for name, p in model.named_parameters():
        _close(p.detach().numpy(), want_params[name], name)
