"""Refusals name what the user wrote (issue 46, deliverable 6; issue 49, deliverable 4): the
function a refused ATen op was decomposed from (`mish`, `logit`), a place for ops of the
top-level forward (file and line) and of the loss; a torch.autograd.Function of the user's is
refused (torch.export would drop its backward); torch.export's own failures are one line
naming the module path, the op and what to do."""

from __future__ import annotations

import inspect
import re

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import planner.torch  # noqa: E402
from planner.importers.torch.context import RULES, TorchImportError  # noqa: E402
from planner.importers.torch.convert import convert, decompose  # noqa: E402
from planner.importers.torch.origin import location  # noqa: E402
from planner.torch.training import export  # noqa: E402

F = nn.functional


class Mish(nn.Module):
    # (a function torch decomposes: softplus, tanh, mul; logsumexp and hardsigmoid, once the
    # example, are now imported whole)
    def forward(self, x):
        return F.mish(x)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.randn(3, 4))
        self.inner = Mish()

    def forward(self, y):
        h = torch.logit(y.float())[:, None]  # LOGIT_LINE (one_hot, once the example, is kept whole)
        return self.inner(self.p).sum(1) + (h * self.p).sum(1)


def _line(marker: str) -> int:
    lines = inspect.getsource(inspect.getmodule(_line)).splitlines()
    return next(k + 1 for k, text in enumerate(lines) if marker in text and "_line(" not in text)


def _nodes(module, inputs, loss=None, labels=None):
    program = decompose(export(module, inputs, loss, labels))
    return {n.name: n for n in program.graph.nodes if n.op == "call_function"}


def test_a_decomposed_op_names_the_function_and_the_place():
    nodes = _nodes(Model(), (torch.tensor([0, 1, 3]),))
    inner = [n for n in nodes.values() if n.meta.get("nn_module_stack", {})
             and list(n.meta["nn_module_stack"].values())[-1][0] == "model.inner"]
    assert inner and {location(n, "model") for n in inner} == {"inner, from mish"}
    (gt,) = [n for n in nodes.values() if str(n.target) == "aten.gt.Scalar"]
    here = f"test_torch_refusal_origin.py:{_line('LOGIT_LINE')}"
    assert location(gt, "model") == f"from logit at {here}"
    (mul,) = [n for n in nodes.values() if str(n.target) == "aten.mul.Tensor" and n not in inner]
    assert location(mul, "model") == f"at test_torch_refusal_origin.py:{_line('(h * self.p)')}"


def test_an_op_of_the_loss_is_placed_in_the_loss():
    nodes = _nodes(nn.Linear(4, 3), (torch.randn(2, 4),),
                   lambda out, y: F.mish(out).mean() + F.mse_loss(out, y),
                   torch.randn(2, 3))
    places = {location(n, "model") for n in nodes.values()}
    assert "the loss, from mish" in places


def test_the_refusal_line_carries_the_origin(monkeypatch):
    # softplus has a rule; without it the import refuses the softplus inside F.mish (the
    # first op of its decomposition without a rule: nothing after it is converted).
    monkeypatch.delitem(RULES, "aten.softplus.default")
    model = nn.Sequential(nn.Linear(4, 4), Mish())
    with pytest.raises(TorchImportError) as e:
        convert(export(model, (torch.randn(3, 4),), None, None), module_root="model")
    assert str(e.value) == ("unsupported ATen ops: aten.softplus.default (node 'softplus' in 1, "
                            "from mish)")


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class UsesFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4))
        self.act = ApplyDoubled()

    def forward(self, x):
        return self.act(self.block(x))


class ApplyDoubled(nn.Module):
    def forward(self, x):
        return Doubled.apply(x)


def test_a_custom_autograd_function_is_refused_naming_it_and_its_module():
    with pytest.raises(TorchImportError) as e:
        planner.torch.trainer(UsesFunction(), (torch.randn(2, 4),), loss=F.mse_loss,
                              labels=torch.randn(2, 4))
    assert str(e.value).startswith("UsesFunction: torch.autograd.Function Doubled in act: "
                                   "torch.export traces its forward and drops its backward")
    # torch's own Functions pass, and the patched apply is restored.
    assert torch.autograd.Function.__dict__["apply"].__func__.__qualname__ == "Function.apply"


class Emissions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 5)

    def forward(self, x):
        return self.proj(x).log_softmax(-1)


def _ctc(out, targets):
    return F.ctc_loss(out, targets, torch.full((2,), 6, dtype=torch.long),
                      torch.full((2,), 3, dtype=torch.long))


def test_ctc_loss_says_torch_export_cannot_trace_it():
    with pytest.raises(TorchImportError) as e:
        export(Emissions(), (torch.randn(6, 2, 4),), _ctc, torch.randint(1, 5, (2, 3)))
    assert re.fullmatch(r"torch\.export could not trace Emissions in the loss \(ctc_loss\): "
                        r"aten\._ctc_loss\.\w+ has an output shape that depends on the data; "
                        r".*outside the module.*", str(e.value))


class Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.GRU(4, 3, batch_first=True))

    def forward(self, x):
        packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 3]), batch_first=True)
        _, h = self.encoder(packed)
        return h.sum()


def test_pack_padded_sequence_says_to_pad_instead():
    with pytest.raises(TorchImportError) as e:
        export(Packed(), (torch.randn(2, 5, 4),), None, None)
    message = str(e.value)
    assert message.startswith("torch.export could not trace Packed in encoder.0")
    assert message.endswith("pad the sequences instead of packing them (run the RNN on the "
                            "padded batch and mask its outputs)") and "\n" not in message
