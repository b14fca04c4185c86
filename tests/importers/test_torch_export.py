"""planner.torch: nn.Modules written here (none of them seen by the importer's authors'
other tests) train through torch.export, the planner and a built executor as through PyTorch.

For each module, `trainer` builds the executor for this host; three SGD steps and, separately,
three Adam steps on fixed batches must leave every parameter and buffer (keyed by
state_dict() names; BatchNorm's running statistics and num_batches_tracked included) where
PyTorch's own optimizer leaves them, within the float32 noise that
tests/importers/torch_training_check.py measures.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from planner.importers.torch.convert import convert  # noqa: E402
from planner.torch import TorchImportError, load_pt2  # noqa: E402
from planner.torch.training import export, trainer  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402
from tests.importers.torch_training_check import (  # noqa: E402
    LR,
    STEPS,
    torch_run,
    trains_like_pytorch,
)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8, momentum=0.3)
        self.fc = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 16), nn.GELU(),
                                 nn.LayerNorm(16), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class EncoderBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.block = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                                activation="gelu")
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.block(self.embed(x)))


class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(5, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class DepthwiseSeparable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.pw = nn.Conv2d(4, 8, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = F.relu6(self.bn1(self.dw(x)))
        x = F.relu6(self.bn2(self.pw(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ResidualSegmenter(nn.Module):
    """A residual block with a 1x1 head: per-pixel logits (N, C, H, W), the loss on axis 1."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(6)
        self.skip = nn.Conv2d(3, 6, 1)
        self.head = nn.Conv2d(6, 6, 1)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.head(F.relu(y + self.skip(x)))


def _classes(n: int, shape: tuple[int, ...]):
    return lambda g: torch.randint(0, n, shape, generator=g)


# name -> (module, input shape, loss, labels maker)
MODELS = {
    "cnn_bn": (SmallCNN, (4, 3, 8, 8), F.cross_entropy, _classes(5, (4,))),
    "mlp": (MLP, (6, 12), F.mse_loss, lambda g: torch.randn(6, 4, generator=g)),
    "encoder": (EncoderBlock, (2, 5, 6), F.mse_loss, lambda g: torch.randn(2, 5, 3, generator=g)),
    "gru": (GRUNet, (3, 4, 5), F.cross_entropy, _classes(3, (3,))),
    "depthwise": (DepthwiseSeparable, (4, 4, 6, 6), F.cross_entropy, _classes(5, (4,))),
    # 6 classes on 6x6 images: a loss over the wrong axis would have the same shapes.
    "residual_seg": (ResidualSegmenter, (2, 3, 6, 6), F.cross_entropy, _classes(6, (2, 6, 6))),
}


def _case(name: str):
    make, shape, loss, labels = MODELS[name]
    torch.manual_seed(0)
    model = make().train()
    with torch.no_grad():  # off the init constants (BN's ones and zeros), as trained weights are
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(*shape, generator=g), labels(g)) for _ in range(STEPS)]
    return model, loss, batches


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_trains_like_pytorch(name, optimizer, tmp_path):
    model, loss, batches = _case(name)
    t, ours, f32, f64 = trains_like_pytorch(model, loss, batches, optimizer, tmp_path)
    for key in ours.state:
        if key.endswith("num_batches_tracked"):
            assert int(ours.state[key]) == int(f64.state[key]) == STEPS
    # Written back without copies: the module now computes with the trained weights.
    fresh = copy.deepcopy(model)
    t.load_into(fresh)
    trained = fresh.state_dict()
    for key in f32.state:
        np.testing.assert_allclose(trained[key].numpy(), ours.state[key])
    weight = next(k for k, v in trained.items() if v.dtype == torch.float32)
    view = t.params(copy=False)[weight]
    assert np.shares_memory(trained[weight].numpy(), view)


def test_class_axis_is_pytorchs():
    """Per-pixel logits take classes on axis 1: the loss node reads them transposed."""
    model, loss, batches = _case("residual_seg")
    imported = convert(export(model, (batches[0][0],), loss, batches[0][1]))
    ops = [n.op for n in imported.graph.nodes]
    assert ops[-4:] == ["Transpose", "Reshape", "Reshape", "SoftmaxCrossEntropy"]
    transpose = next(n for n in imported.graph.nodes if n.op == "Transpose")
    assert transpose.attrs["perm"] == [0, 2, 3, 1]


def test_dropout_follows_train_and_eval():
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Linear(8, 2))
    x, y = torch.randn(3, 4), torch.randint(0, 2, (3,))
    trained = convert(export(model.train(), (x,), F.cross_entropy, y)).graph
    (drop,) = [n for n in trained.nodes if n.op == "Dropout"]
    assert drop.attrs["rate"] == pytest.approx(0.3)
    evaluated = convert(export(model.eval(), (x,), F.cross_entropy, y)).graph
    assert "Dropout" not in {n.op for n in evaluated.nodes}


def test_batchnorm_eval_mode_uses_running_statistics():
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3)).eval()
    graph = convert(export(model, (torch.randn(2, 2, 3, 3),), None, None)).graph
    (bn,) = [n for n in graph.nodes if n.op == "BatchNorm"]
    assert bn.attrs["training"] is False
    assert graph.tensor("model.1.running_mean").role == "state"


def test_unsupported_op_is_one_line_naming_the_node():
    class Hashed(nn.Module):  # (eigvalsh, matrix_exp, then eig, were the refused examples)
        def forward(self, x):
            return torch.hash_tensor(x)

    with pytest.raises(TorchImportError) as e:
        convert(export(Hashed(), (torch.randn(2, 3),), None, None), module_root="model")
    # The top-level forward has no module path: the user's file and line place the op.
    assert re.fullmatch(r"unsupported ATen ops: aten\.hash_tensor\.default \(node "
                        r"'hash_tensor' at test_torch_export\.py:\d+\)", str(e.value)), \
        str(e.value)


def test_cross_entropy_ignore_index_inside_classes_is_the_losss_own():
    """(Its values and gradient against torch: tests/importers/test_torch_losses.py.)"""
    x, y = torch.randn(3, 4), torch.randint(0, 4, (3,))
    graph = convert(export(nn.Linear(4, 4), (x,), lambda z, t: F.cross_entropy(
        z, t, ignore_index=2), y)).graph
    (loss,) = [n for n in graph.nodes if n.op == "SoftmaxCrossEntropy"]
    assert loss.attrs["ignore_index"] == 2


def test_planner_graph_reads_a_saved_program(tmp_path):
    model, loss, batches = _case("cnn_bn")
    path = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, (batches[0][0],)), str(path))
    graph = load_pt2(path)
    assert graph.tensor("conv1.weight").role == "param"
    assert graph.tensor("bn2.running_var").role == "state"
    out = subprocess.run([sys.executable, "-m", "planner.cli", "graph", str(path), "--train",
                          "adam", "--loss", "cross-entropy", "--json"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert '"kind": "training"' in out.stdout or '"training"' in out.stdout


def test_planner_graph_refuses_a_broken_program(tmp_path):
    path = tmp_path / "broken.pt2"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    out = subprocess.run([sys.executable, "-m", "planner.cli", "graph", str(path)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert "not a saved torch.export program" in out.stderr


def test_eval_mode_module_keeps_its_buffers(tmp_path):
    """A module in eval() trains with frozen BatchNorm statistics, as PyTorch's eval() does;
    buffers no op updates come back unchanged under their state_dict names."""
    model, loss, batches = _case("depthwise")
    model.eval()
    _, ours, _, _ = trains_like_pytorch(model, loss, batches, "sgd", tmp_path)
    np.testing.assert_array_equal(ours.state["bn1.running_mean"],
                                  model.state_dict()["bn1.running_mean"].numpy())


class TiedLM(nn.Module):
    """An embedding tied to the output layer: one tensor under two state_dict keys."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 6)
        self.mix = nn.Linear(6, 6)
        self.out = nn.Linear(6, 7, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        return self.out(torch.tanh(self.mix(self.embed(ids))))


def test_tied_weights_train_as_one(tmp_path):
    torch.manual_seed(0)
    model = TiedLM().train()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 7, (3, 4), generator=g), torch.randint(0, 7, (3, 4), generator=g))
               for _ in range(STEPS)]
    loss = lambda z, y: F.cross_entropy(z.reshape(-1, 7), y.reshape(-1))  # noqa: E731
    t = trainer(model, (batches[0][0],), loss=loss, labels=batches[0][1], optimizer="sgd",
                lr=LR["sgd"], out_dir=tmp_path)
    losses = [t.step(x, y) for x, y in batches]
    ours = Step(losses[-1], t.params())
    f32 = torch_run(model, loss, batches, "sgd", torch.float32)
    f64 = torch_run(model, loss, batches, "sgd", torch.float64)
    assert set(ours.state) == set(model.state_dict())
    assert mismatches(ours, f32, f64) == []
    np.testing.assert_array_equal(ours.state["out.weight"], ours.state["embed.weight"])


class RankAndShift(nn.Module):
    """torch.roll (over two dims, and flattened), torch.cumsum, torch.topk and PyTorch's type
    promotion (an int64 buffer and topk's int64 indices added to float tensors, an int tensor
    plus and times a float number) in one module."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(4, 3)
        self.register_buffer("pos", torch.arange(8))

    def forward(self, x):
        h = torch.roll(self.fc1(x), shifts=(1, 3), dims=(0, 1)) + self.pos
        h = torch.roll(h, -5)
        values, indices = torch.topk(torch.cumsum(h, dim=1), 4, dim=1)
        return self.fc2(values + (indices + 0.5) * 0.5 - indices)


def test_roll_cumsum_topk_and_int_promotion_train_like_pytorch(tmp_path):
    model, loss = RankAndShift().train(), F.cross_entropy
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g))
               for _ in range(STEPS)]
    t, _, _, _ = trains_like_pytorch(model, loss, batches, "sgd", tmp_path)
    ops = {n.op for n in t.graph.nodes}
    assert {"CumSum", "TopK", "TopKGrad", "Cast", "Concat"} <= ops, sorted(ops)


def test_int_tensor_plus_float_number_is_promoted_not_truncated():
    """An int tensor plus 1.5 is a float tensor in PyTorch; the number was once made an int64
    constant (1) and the sum stayed int64, silently."""
    from planner.graph.interpret import run

    class Shifted(nn.Module):
        def forward(self, ids):
            return ids + 1.5

    x = torch.arange(6).reshape(2, 3)
    imported = convert(export(Shifted(), (x,), None, None))
    g = imported.graph
    (out,) = g.outputs
    got = run(g, {imported.inputs[0]: x.numpy()}, imported.params(), keep="outputs")[out]
    want = Shifted()(x).numpy()
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
