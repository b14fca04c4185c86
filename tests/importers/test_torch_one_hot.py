"""F.one_hot through planner.torch (planner/importers/torch/rules_onehot.py): kept whole instead of
torch.export's decomposition, whose `_assert_async` range checks no planner op takes. Values
equal torch's; a class index out of [0, num_classes) is refused as PyTorch refuses it (on the
reference interpreter and when the CPU executor's step runs); a Switch-style mixture of
experts whose load-balancing loss counts routes by one_hot trains as PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from planner.graph import run  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.ops.base import OpError  # noqa: E402
from planner.torch.training import export  # noqa: E402
from tests.helpers.fresh_models import equal_to_torch  # noqa: E402


class OneHot(nn.Module):
    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.classes = classes

    def extra_repr(self) -> str:
        return f"classes={self.classes}"

    def forward(self, x, i):
        return x * F.one_hot(i, self.classes).to(x.dtype)


def test_one_hot_equals_torchs_and_refuses_what_torch_refuses():
    x, i = torch.randn(2, 3, 4), torch.tensor([[0, 3, 2], [1, 1, 3]])
    imp = convert(export(OneHot(), (x, i), None, None))
    assert "Equal" in {n.op for n in imp.graph.nodes}
    feeds = dict(zip(imp.inputs, (x.numpy(), i.numpy()), strict=True))
    y = run(imp.graph, feeds, imp.params())[imp.graph.outputs[0]]
    np.testing.assert_array_equal(y, OneHot()(x, i).numpy())
    for bad in (4, -1):  # torch: "Class values must be smaller than num_classes" / ">= 0"
        with pytest.raises(OpError, match=rf"index {bad} out of range \[0, 4\)"):
            run(imp.graph, {**feeds, imp.inputs[1]: np.full((2, 3), bad)}, imp.params())


class SwitchMoE(nn.Module):
    """Top-1 (Switch Transformer) routing over 3 experts; the load-balancing term counts each
    expert's tokens by one_hot of the argmax. Returns (logits, aux)."""

    def __init__(self, dim: int = 6, experts: int = 3, classes: int = 4) -> None:
        super().__init__()
        self.experts = experts
        self.gate = nn.Linear(dim, experts)
        self.w = nn.Parameter(torch.randn(experts, dim, dim) / dim ** 0.5)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        probs = self.gate(x).softmax(-1)
        weight, expert = probs.max(-1)
        routed = F.one_hot(expert, self.experts).to(x.dtype)
        y = torch.einsum("nd,ndf->nf", x, self.w.index_select(0, expert))
        aux = self.experts * (routed.mean(0) * probs.mean(0)).sum()
        return self.head(x + weight.unsqueeze(1) * y), aux


def _switch_loss(out, labels):
    logits, aux = out
    return F.cross_entropy(logits, labels) + 0.1 * aux


def test_a_switch_moe_with_one_hot_trains_like_pytorch(tmp_path):
    from planner.torch.training import trainer

    torch.manual_seed(0)
    model = SwitchMoE().train()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(12, 6, generator=g), torch.randint(0, 4, (12,), generator=g))
               for _ in range(3)]
    t = trainer(model, (batches[0][0],), loss=_switch_loss, labels=batches[0][1],
                optimizer="sgd", lr=0.05, out_dir=tmp_path, costs="analytical")
    losses = [t.step(*b) for b in batches]
    equal_to_torch(losses, t.params(), model, _switch_loss, batches, "sgd")
    # a computed class out of range stops the step naming the node, as torch's one_hot raises
    t = trainer(_Argmax(OneHot(2)), (torch.randn(3, 3),), loss=F.mse_loss, labels=torch.randn(3, 2),
                optimizer="sgd", lr=0.05, out_dir=tmp_path / "argmax", costs="analytical")
    t.step(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]), torch.randn(3, 2))
    with pytest.raises(RuntimeError, match=r"one_hot.*index 2 out of range \[0, 2\)"):
        t.step(torch.tensor([[0.0, 0.0, 1.0]] * 3), torch.randn(3, 2))


class _Argmax(nn.Module):
    """one_hot of a computed index (argmax over 3 columns) into 2 classes, scaling a trained
    weight."""

    def __init__(self, inner: OneHot) -> None:
        super().__init__()
        self.inner = inner
        self.scale = nn.Parameter(torch.ones(2))

    def forward(self, x):
        return self.scale * self.inner(torch.ones(x.shape[0], 2), x.argmax(-1))
