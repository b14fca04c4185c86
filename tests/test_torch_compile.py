"""torch.compile(model, backend="planner") against the same loop run eagerly.

Every case trains a copy of the module eagerly and one through the backend from the same
weights on the same batches, then holds the losses, gradients, parameters and buffers to
eager's. Tolerances: a float32 forward or gradient differs from eager's by the rounding of
sums in another order, a few ulps (2^-24) times the number of terms summed (here at most a few
hundred) of the largest value: 1e-5 of the largest |value| leaves room for that and is far
below any real error (a missing term, a wrong input, a stale parameter all show at percents).
Plans are priced by the analytical model (no measuring) to keep the tests to seconds of
planning; each planned call still builds its executors.
"""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.importers.torch.context import TorchImportError  # noqa: E402
from planner.torch.piece import PlannerFallback  # noqa: E402
from tests.helpers.compile_cases import (  # noqa: E402
    OPTIONS,
    RTOL,
    ConvNet,
    assert_close,
    assert_same_state,
    batches,
    compiled,
    train,
)


def test_trains_as_eager_with_frozen_params_eval_submodule_groups_and_buffers():
    torch.manual_seed(0)
    model = ConvNet()
    model.conv1.bias.requires_grad_(False)  # frozen: no gradient, never updated
    model.bn2.eval()  # an eval submodule: running statistics read, not updated
    ref = copy.deepcopy(model)

    def sgd(m):  # two parameter groups, momentum and weight decay in one
        return torch.optim.SGD([{"params": [m.head.weight, m.head.bias], "lr": 0.05},
                                {"params": [p for n, p in m.named_parameters()
                                            if not n.startswith("head")],
                                 "weight_decay": 1e-3}], lr=0.1, momentum=0.9)

    data = batches(3, (4, 3, 6, 6), 4)
    got = train(compiled(model), data, sgd(model))
    want = train(ref, data, sgd(ref))
    assert got == pytest.approx(want, rel=RTOL)
    assert_same_state(model, ref)
    assert model.bn1.num_batches_tracked.item() == 3 and model.bn2.num_batches_tracked == 0
    assert model.conv1.bias.grad is None


def test_gradients_of_inputs_and_several_outputs():
    """A graph's input that needs a gradient (a piece after a graph break gets its activation
    so), two outputs, one of them an integer that needs none."""
    torch.manual_seed(1)
    lin = nn.Linear(5, 3)

    def f(x):
        h = torch.tanh(lin(x))
        return h, h.argmax(-1), (h * h).sum()

    ref = copy.deepcopy(lin)  # eager runs on an equal copy
    x = torch.randn(4, 5, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    torch._dynamo.reset()
    h, idx, s = torch.compile(f, backend="planner", options=OPTIONS)(x)
    h2 = torch.tanh(ref(x_ref))
    s2 = (h2 * h2).sum()
    (h.sum() * 2 + s).backward()
    (h2.sum() * 2 + s2).backward()
    assert not idx.requires_grad and torch.equal(idx, h2.argmax(-1))
    assert_close(h.detach(), h2.detach(), "h")
    assert_close(x.grad, x_ref.grad, "x.grad")
    assert_close(lin.weight.grad, ref.weight.grad, "weight.grad")
    assert_close(lin.bias.grad, ref.bias.grad, "bias.grad")


class Breaks(nn.Module):
    """A graph break (print) and an op the planner refuses (singular vectors, whose signs are
    LAPACK's choice: the product U S Vh gives the matrix back): three pieces, one eager."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        print("", end="")  # a graph break
        u, sv, vh = torch.linalg.svd(self.b(h).view(-1, 2, 4), full_matrices=False)
        h = (u @ torch.diag_embed(sv) @ vh).reshape(-1, 8)
        return self.c(torch.relu(h))


def test_graph_break_and_unsupported_op_fall_back_in_one_line():
    torch.manual_seed(2)
    model = Breaks()
    ref = copy.deepcopy(model)
    data = batches(2, (4, 8), 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = train(compiled(model), data, torch.optim.SGD(model.parameters(), lr=0.1))
    want = train(ref, data, torch.optim.SGD(ref.parameters(), lr=0.1))
    fallbacks = [str(w.message) for w in caught if w.category is PlannerFallback]
    assert len(fallbacks) == 1, fallbacks  # once per graph and call signature
    assert "aten._linalg_svd" in fallbacks[0] and "\n" not in fallbacks[0]
    assert got == pytest.approx(want, rel=RTOL)
    assert_same_state(model, ref)


def test_fallback_false_raises_the_refusal():
    model = Breaks()
    with pytest.raises(TorchImportError, match="_linalg_svd"):
        compiled(model, fallback=False)(torch.randn(2, 8))


def test_unknown_option_is_named():
    with pytest.raises(Exception, match="bogus"):
        compiled(nn.Linear(2, 2), bogus=1)(torch.randn(1, 2))


def test_registered_with_dynamo_and_by_the_entry_point():
    """Registered on import of planner.torch; the entry point Dynamo reads when it is not (an
    installed package's metadata, written from pyproject.toml) names the same function."""
    import importlib
    import tomllib
    from pathlib import Path

    from planner.torch.backend import planner_backend

    assert torch._dynamo.lookup_backend("planner") is planner_backend
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    target = pyproject["project"]["entry-points"]["torch_dynamo_backends"]["planner"]
    module, name = target.split(":")
    assert getattr(importlib.import_module(module), name) is planner_backend


class Block(nn.Module):
    """torchvision's BasicBlock: two 3x3 conv-BN, a projected shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class TinyResNet(nn.Module):
    """ResNet-18's layout (stem, max pool, stages of BasicBlocks, average pool, fc) at test size."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layer1 = nn.Sequential(Block(8, 8, 1), Block(8, 8, 1))
        self.layer2 = nn.Sequential(Block(8, 16, 2), Block(16, 16, 1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        h = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


class TinyEncoder(nn.Module):
    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2,
            enable_nested_tensor=False)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(self.encoder(self.embed(x)).mean(1))


def stock_loop(model, train_set, val_set, epochs: int = 2):
    """A stock PyTorch loop: AdamW, clip_grad_norm_, a StepLR schedule, DataLoaders whose last
    batch is smaller, model.eval() and no_grad for validation. Returns (train losses,
    validation losses)."""
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    train = torch.utils.data.DataLoader(train_set, batch_size=4, shuffle=False)
    val = torch.utils.data.DataLoader(val_set, batch_size=4)
    losses, val_losses = [], []
    for _ in range(epochs):
        model.train()
        for x, y in train:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            val_losses.append(sum(F.cross_entropy(model(x), y, reduction="sum").item()
                                  for x, y in val))
    return losses, val_losses


@pytest.mark.parametrize("make,shape", [
    pytest.param(TinyResNet, (3, 8, 8), id="resnet", marks=pytest.mark.slow),
    pytest.param(TinyEncoder, (5, 6), id="encoder", marks=pytest.mark.ci_sample)])
def test_stock_loop_equals_eager(make, shape):
    """The acceptance loop with only `model = torch.compile(model, backend="planner")` added:
    ten training samples in batches of 4, 4, 2, six validation samples in 4, 2, two epochs.
    AdamW divides each gradient by its own running magnitude, so a weight whose gradient is
    near zero moves by up to lr whatever its rounding; the losses and the outputs are what
    float32 noise leaves alike, and the weights within lr's noise of eager's."""
    torch.manual_seed(3)
    g = torch.Generator().manual_seed(4)
    data = torch.utils.data.TensorDataset(torch.randn(16, *shape, generator=g),
                                          torch.randint(0, 5, (16,), generator=g))
    train_set = torch.utils.data.Subset(data, range(10))
    val_set = torch.utils.data.Subset(data, range(10, 16))
    model = make()
    ref = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlannerFallback)  # every piece planned
        got = stock_loop(compiled(model), train_set, val_set)
    want = stock_loop(ref, train_set, val_set)
    assert got[0] == pytest.approx(want[0], rel=1e-5)
    assert got[1] == pytest.approx(want[1], rel=1e-5)
    state, state_ref = model.state_dict(), ref.state_dict()
    for k, want_k in state_ref.items():
        got_k = state[k]
        if k.endswith("self_attn.in_proj_bias"):
            # The key bias adds one constant to each query's scores, which softmax cancels:
            # its gradient is rounding noise in eager too, and AdamW moves each of its
            # elements by up to lr (3e-3, then 1.5e-3, 7.5e-4) a step whatever that noise is.
            d = want_k.numel() // 3
            assert float((got_k[d:2 * d] - want_k[d:2 * d]).abs().max()) <= 0.015, k
            got_k = torch.cat([got_k[:d], got_k[2 * d:]])
            want_k = torch.cat([want_k[:d], want_k[2 * d:]])
        assert_close(got_k, want_k, k, rtol=1e-4)


def test_dropout_draws_anew_each_call_and_its_gradient_uses_the_forward_mask():
    """The planner's own draws (not torch's bits): about half the elements dropped at p=0.5,
    another mask on the next call, and the gradient the kept elements' 1/(1-p) exactly (the
    backward call redraws the forward call's mask)."""
    def f(x):
        return F.dropout(x, 0.5, training=True) * 3.0

    torch._dynamo.reset()
    fn = torch.compile(f, backend="planner", options=OPTIONS)
    masks = []
    for _ in range(2):
        x = (torch.rand(64, 64) + 0.5).requires_grad_(True)
        y = fn(x)
        y.sum().backward()
        kept = y != 0
        masks.append(kept)
        # 4096 Bernoulli(0.5) draws: the kept fraction within 5 standard deviations (0.039)
        assert abs(float(kept.float().mean()) - 0.5) < 0.04
        assert torch.equal(y.detach(), torch.where(kept, x.detach() * 6.0, 0.0))
        assert torch.equal(x.grad, kept.float() * 6.0)
    assert not torch.equal(masks[0], masks[1])


def test_a_loss_inside_the_compiled_function():
    """The loss compiled with the model (its labels a graph input the backward reads)."""
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    ref = copy.deepcopy(model)
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    torch._dynamo.reset()
    loss = torch.compile(lambda: F.cross_entropy(model(x), y), backend="planner",
                         options=OPTIONS)()
    loss.backward()
    F.cross_entropy(ref(x), y).backward()
    for (k, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert_close(p.grad, q.grad, k)


def test_the_encoder_layers_eval_fast_path_is_planned(norm_first=True, activation="gelu"):
    """In eval() under no_grad, nn.TransformerEncoderLayer calls the fused
    aten._transformer_encoder_layer_fwd (planner/importers/torch/fastpath.py spells it out); the
    post-norm ReLU layer's is in the stock loop's validation (test_stock_loop_equals_eager)."""
    torch.manual_seed(6)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                       norm_first=norm_first, activation=activation)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        got = compiled(model, fallback=False)(x)
        want = model(x)
    assert_close(got, want, "encoder output")
