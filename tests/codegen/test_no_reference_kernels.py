"""No op of a common model's step runs oneDNN's reference implementation (`ref:...` in the
executor's stats()): a loop computing every element's offsets, tens of ns an element, which
oneDNN picks without a word where it has no jit kernel for a shape. A transformer encoder's
attention-mask add ((B, H, L, L) + (B, H, 1, L)) ran it at 2.1 ms a call, a sixth of the step
(templates/cpu/runtime/kernels/binary.cpp, RowBroadcastLoop)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from planner.torch import trainer  # noqa: E402


class Classifier(nn.Module):
    """A padded-batch text classifier as fine-tuning scripts write it."""

    def __init__(self, vocab: int = 50, d: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, tokens, keep):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=~keep)
        return self.head((h * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True))


def test_a_padded_transformer_step_runs_no_reference_kernel():
    torch.manual_seed(0)
    tokens = torch.randint(1, 50, (4, 12))
    keep = torch.arange(12)[None, :] < torch.tensor([12, 9, 5, 12])[:, None]
    y = torch.tensor([0, 1, 1, 0])
    model = Classifier()
    t = trainer(model, (tokens, keep), loss=F.cross_entropy, labels=y, optimizer="adamw",
                lr=1e-3, costs="analytical")
    t.step(tokens, keep, y)
    ops = t.executor.stats()["ops"]
    assert any(o.get("impl") == "direct:broadcast rows" for o in ops), \
        "no masked add in the step: the test no longer sees the pattern it guards"
    reference = [(o["name"], o["op"], o["impl"]) for o in ops
                 if o.get("impl", "").startswith("ref:") or " + ref:" in o.get("impl", "")]
    assert not reference, reference
