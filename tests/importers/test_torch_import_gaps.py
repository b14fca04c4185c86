"""The PyTorch models that did not import (issue 35): the trainer called more than once, a
loss of several terms, `aten.as_strided` and `aten.index.Tensor`, and errors that name the
module path. PyTorch is the reference throughout."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planner.torch  # noqa: E402
from planner.errors import UserError  # noqa: E402
from planner.frontend.autodiff import AutodiffError, find_loss, gradients, make_training_graph  # noqa: E402
from planner.graph import Graph, Optimizer, init_params, run  # noqa: E402
from planner.graph.interpret import train_step  # noqa: E402
from planner.graph.validate import GraphError, check_graph  # noqa: E402
from planner.importers.torch.convert import convert, decompose  # noqa: E402
from planner.torch.training import export  # noqa: E402
from tests.importers.torch_step import Step, mismatches, planner_step, torch_step  # noqa: E402
from tests.importers.torch_step import export as onnx_export  # noqa: E402

STEPS, LR = 3, 0.05


def test_trainer_can_be_called_again():
    """The package's `trainer` stays the function after its module is imported (a second
    call once raised "'module' object is not callable")."""
    for _ in range(3):
        with pytest.raises(UserError, match="optimizer 'nope': expected one of"):
            planner.torch.trainer(nn.Linear(2, 2), (torch.randn(1, 2),), loss=F.mse_loss,
                                  labels=torch.randn(1, 2), optimizer="nope")
    assert callable(planner.torch.trainer)


class VAE(nn.Module):
    """A tiny VAE; the reparametrization's noise is an input (PyTorch's random stream is not
    the planner's), so both sides see the same z."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(6, 8)
        self.mu, self.logvar = nn.Linear(8, 3), nn.Linear(8, 3)
        self.dec = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 6))

    def forward(self, x, noise):
        h = torch.tanh(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        return self.dec(mu + noise * torch.exp(0.5 * logvar)), mu, logvar


def vae_loss(out, x, beta=0.1):
    recon, mu, logvar = out
    kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1))
    return F.mse_loss(recon, x) + beta * kl


def _vae_torch_run(model, batches, dtype):
    model = copy.deepcopy(model).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, noise in batches:
        opt.zero_grad()
        value = vae_loss(model(x.to(dtype), noise.to(dtype)), x.to(dtype))
        value.backward()
        opt.step()
    return Step(float(value), {k: v.detach().numpy().copy()
                               for k, v in model.state_dict().items()})


def test_vae_loss_of_two_terms_trains_like_pytorch(tmp_path):
    """F.mse_loss + beta * KL: the traced sum is the graph's loss (no loss op writes it)."""
    torch.manual_seed(0)
    model = VAE()
    batches = [(torch.randn(4, 6), torch.randn(4, 3)) for _ in range(STEPS)]
    x0, noise0 = batches[0]
    t = planner.torch.trainer(model, (x0, noise0), loss=vae_loss, labels=x0, lr=LR,
                              out_dir=tmp_path)
    assert t.imported.graph.loss == t.imported.graph.outputs[0]
    losses = [t.step(x, noise, x) for x, noise in batches]
    ours = Step(losses[-1], t.params())
    f32 = _vae_torch_run(model, batches, torch.float32)
    f64 = _vae_torch_run(model, batches, torch.float64)
    assert set(ours.state) == set(model.state_dict())
    assert mismatches(ours, f32, f64) == []


def test_a_marked_loss_must_be_a_float_scalar_output():
    """Graph.loss from a hand-written graph JSON is checked like the rest of the graph."""
    imported = convert(export(VAE(), (torch.randn(4, 6), torch.randn(4, 3)), vae_loss,
                              torch.randn(4, 6)))
    graph = imported.graph
    assert Graph.from_json(graph.to_json()) == graph
    hidden = next(n.outputs[0] for n in graph.nodes if n.op == "MatMul")
    for loss, problem in ((hidden, "is not one of the graph's outputs"),
                          ("nothing", "is not one of the graph's outputs")):
        bad = Graph.model_validate({**graph.model_dump(), "loss": loss})
        with pytest.raises(GraphError, match=f"graph loss {loss!r} {problem}"):
            check_graph(bad)
        with pytest.raises(AutodiffError, match=problem):
            find_loss(bad)
    wide = Graph.model_validate({**graph.model_dump(), "outputs": (*graph.outputs, hidden),
                                 "loss": hidden})
    with pytest.raises(GraphError, match="must be a float scalar"):
        check_graph(wide)


class SelfSupervised(nn.Module):
    """A module returning its own loss (a reconstruction plus an L1 penalty), first."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(5, 3), nn.Linear(3, 5)

    def forward(self, x):
        code = torch.tanh(self.enc(x))
        return ((self.dec(code) - x) ** 2).mean() + 0.01 * code.abs().sum(), code


def test_a_module_returning_its_own_loss_trains_like_pytorch():
    torch.manual_seed(2)
    model = SelfSupervised()
    batches = [torch.randn(4, 5) for _ in range(STEPS)]
    imported = convert(export(model, (batches[0],), None, None), module_root="model")
    assert imported.graph.loss == imported.graph.outputs[0]
    graph = make_training_graph(imported.graph, Optimizer.parse("sgd", lr=LR))
    state = {**init_params(graph), **imported.params()}
    for x in batches:
        out, state = train_step(graph, {imported.inputs[0]: x.numpy()}, state)
    ours = Step(float(out[graph.outputs[0]]), {k: state["model." + k]
                                               for k in model.state_dict()})

    def reference(dtype):
        twin = copy.deepcopy(model).to(dtype)
        opt = torch.optim.SGD(twin.parameters(), lr=LR)
        for x in batches:
            opt.zero_grad()
            value = twin(x.to(dtype))[0]
            value.backward()
            opt.step()
        return Step(float(value), {k: v.detach().numpy() for k, v in twin.state_dict().items()})

    assert mismatches(ours, reference(torch.float32), reference(torch.float64)) == []


class WindowAttention(nn.Module):
    """Swin's relative-position bias: a trained table indexed by a constant index buffer
    (aten.index.Tensor), added to the attention scores."""

    def __init__(self, window: int = 3, heads: int = 2, dim: int = 8) -> None:
        super().__init__()
        self.heads, self.n = heads, window * window
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.5)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                            indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer("index", rel[..., 0] * (2 * window - 1) + rel[..., 1])
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        bias = self.table[self.index.view(-1)].view(n, n, self.heads).permute(2, 0, 1)
        attn = torch.softmax(q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5 + bias, -1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class SwinLike(nn.Module):
    """Window attention, then channels-last features permuted for an adaptive pooling (which
    decomposes to aten.as_strided)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 8), WindowAttention()])
        self.head = nn.Linear(8, 5)

    def forward(self, x):  # x: (batch, 3, 3, 4), channels last
        b, h, w, _ = x.shape
        y = self.layers[1](self.layers[0](x).reshape(b, h * w, 8)).reshape(b, h, w, 8)
        pooled = F.adaptive_avg_pool2d(y.permute(0, 3, 1, 2), 1).flatten(1)
        return self.head(pooled)


def _reference_run(model, batches, dtype):
    model = copy.deepcopy(model).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in batches:
        opt.zero_grad()
        value = F.cross_entropy(model(x.to(dtype)), y)
        value.backward()
        opt.step()
    return Step(float(value), {k: v.detach().numpy().copy()
                               for k, v in model.state_dict().items()})


def test_swin_like_index_and_as_strided_train_like_pytorch():
    """aten.index.Tensor (a gather whose gradient is a scatter-add into the table: the index
    repeats every offset) and aten.as_strided, stepped on the numpy reference interpreter."""
    torch.manual_seed(1)
    model = SwinLike()
    batches = [(torch.randn(2, 3, 3, 4), torch.randint(0, 5, (2,))) for _ in range(STEPS)]
    x0, y0 = batches[0]
    program = export(model, (x0,), F.cross_entropy, y0)
    aten = {str(n.target) for n in program.graph_module.graph.nodes}
    assert "aten.index.Tensor" in aten
    imported = convert(program, module_root="model")
    assert "aten.as_strided.default" in {
        str(n.target) for n in decompose(program).graph_module.graph.nodes}
    graph = make_training_graph(imported.graph, Optimizer.parse("sgd", lr=LR))
    state = {**init_params(graph), **imported.params()}
    for x, y in batches:
        out, state = train_step(graph, {imported.inputs[0]: x.numpy(),
                                        imported.inputs[1]: y.numpy()}, state)
    ours = Step(float(out[graph.outputs[0]]),
                {k: state["model." + k] for k in model.state_dict() if "model." + k in state})
    assert set(ours.state) == {k for k, v in model.state_dict().items()
                               if v.is_floating_point()}
    f32 = _reference_run(model, batches, torch.float32)
    f64 = _reference_run(model, batches, torch.float64)
    assert mismatches(ours, f32, f64) == []


class Strided(nn.Module):
    def __init__(self, size, stride, offset) -> None:
        super().__init__()
        self.view = (size, stride, offset)

    def forward(self, x):
        return torch.as_strided(x.transpose(0, 1), *self.view) * 2.0


@pytest.mark.parametrize(("size", "stride", "offset"), [
    ((4, 3), (1, 4), 0),          # the input itself (x.T in x's storage)
    ((3, 4), (4, 1), 0),          # its transpose
    ((2, 3), (1, 4), 1),          # rows 1 and 2: a Slice
    ((2, 2), (2, 8), 0),          # every other row and column
    ((2, 2), (4, 2), 1),          # rows 1 and 3, columns 0 and 1, transposed
    ((2, 2, 2), (4, 2, 1), 0),    # three axes, out of stride order
    ((), (), 7),                  # one element
    ((3, 3), (1, 1), 0),          # overlapping windows
    ((2, 3), (4, 1), 2),          # rows of x.T read across x's columns
])
def test_as_strided_of_known_strides_reads_what_pytorch_reads(size, stride, offset):
    """Each view of x.T (shape (4, 3), strides (1, 4)) reads what PyTorch's reads, exactly."""
    x = torch.randn(3, 4)
    imported = convert(export(Strided(size, stride, offset), (x,), None, None))
    ops = {n.op for n in imported.graph.nodes}
    # views of the planner's; the last two (overlapping, or not one axis per stride) a
    # gather of the positions they read
    assert ops <= {"Reshape", "Slice", "Transpose", "Scale"} or \
        (size, stride) in (((3, 3), (1, 1)), ((2, 3), (4, 1))) and "IndexGather" in ops
    got = run(imported.graph, {imported.inputs[0]: x.numpy()}, imported.params(),
              keep="outputs")[imported.graph.outputs[0]]
    np.testing.assert_array_equal(got, Strided(size, stride, offset)(x).numpy())


class Indexed(nn.Module):
    """A table indexed on adjacent axes by constant buffers (repeated and negative entries),
    then a computed index."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(3, 4, 5, 2))
        self.register_buffer("rows", torch.tensor([[0, -1], [2, 2]]))
        self.register_buffer("cols", torch.tensor([3, -4]))

    def forward(self, x, pick):
        gathered = self.table[:, self.rows, self.cols]          # (3, 2, 2, 2)
        return (gathered * x).sum() + self.table[pick].pow(2).sum()


def test_index_tensor_matches_pytorchs_values_and_gradient():
    """The gather's values, and its scatter-add gradient into the table (repeated indices
    accumulate), against PyTorch's autograd."""
    torch.manual_seed(4)
    model = Indexed()
    x, pick = torch.randn(3, 2, 2, 2), torch.tensor([2, 0, 2])
    imported = convert(export(model, (x, pick), None, None), module_root="model")
    graph, grads = gradients(imported.graph, ["model.table"])
    feeds = dict(zip(imported.inputs, (x.numpy(), pick.numpy()), strict=True))
    got = run(graph, feeds, imported.params(), keep="outputs")
    loss = model(x, pick)
    loss.backward()
    # float32 sums of at most 144 terms: 144 eps of the sum of |terms|, which the positive
    # squares make about the total, under 1e-5 of it; each gradient element sums at most
    # four gathered terms and 2 * table * count (a few ulps).
    np.testing.assert_allclose(got[graph.outputs[0]], loss.item(), rtol=1e-5)
    np.testing.assert_allclose(got[grads["model.table"]], model.table.grad.numpy(),
                               rtol=1e-5, atol=1e-6)


class Block(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.attn = body

    def forward(self, x):
        return self.attn(x)


class Layers(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Identity(), nn.Identity(), nn.Identity(), Block(body))

    def forward(self, x):
        return self.layers(x)


class Grown(nn.Module):
    def forward(self, x):
        return x.clone().resize_(5, 5)


class Eig(nn.Module):  # (eigvalsh, matrix_exp, a real matrix's eig were refused before)
    def forward(self, x):
        return torch.linalg.eig(torch.complex(x[:2, :2], x[:2, :2])).eigenvalues.abs()


class Apart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(4, 2, 5))
        self.register_buffer("rows", torch.tensor([0, 3]))
        self.register_buffer("cols", torch.tensor([1, 4]))

    def forward(self, x):
        return x[:, :2] + self.table[self.rows, :, self.cols].sum(1)


@pytest.mark.parametrize(("body", "message"), [
    (Eig(), "unsupported ATen ops: aten.linalg_eig.default (of a complex matrix) (node "
            "'linalg_eig' in layers.3.attn)"),
    (Apart(), "unsupported ATen ops: aten.index.Tensor (indices on non-adjacent axes [0, 2]) "
              "(node 'index' in layers.3.attn)"),
    (Grown(), "node 'resize' in layers.3.attn, from resize_ (aten.resize.default): resizing "
              "12 elements to 25: the new ones are uninitialized"),
])
def test_refusals_name_the_module_path_and_the_aten_op(body, message):
    """Through the trainer (it fails before building anything): the path is the user's."""
    with pytest.raises(planner.torch.TorchImportError) as e:
        planner.torch.trainer(Layers(body), (torch.randn(4, 3),), loss=None)
    assert str(e.value) == message


def test_swin_like_onnx_export_trains_like_pytorch():
    """Through ONNX: the bias table's Gather has constant, unevenly spaced indices."""
    torch.manual_seed(3)
    model = SwinLike()
    x, labels = np.asarray(torch.randn(2, 3, 3, 4)), np.array([1, 4])
    exported = onnx_export(model, torch.from_numpy(x))
    ours, start = planner_step(exported, x, labels)
    f32 = torch_step(model, x, labels, torch.float32, start)
    f64 = torch_step(model, x, labels, torch.float64, start)
    assert {"layers.1.table", "head.weight"} <= set(ours.state)
    assert mismatches(ours, f32, f64) == []
