"""Small PyTorch models of common families that no other planner.torch test uses: a Conv1d
audio net that reads time both ways (torch.flip), a GRU language model, a MobileNetV3 block
(Hardswish, squeeze-and-excitation with Hardsigmoid), a ConvNeXt block (depthwise conv, LayerNorm
over channels-last permutes, a layer-scale parameter) and a ViT with a class token and learned
position embeddings. Tiny sizes: each trains in seconds.

MODELS maps a name to (module class, input maker, loss, labels maker); inputs and labels are
drawn from a torch.Generator.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class FlipAudio(nn.Module):
    """Conv1d features read forwards and backwards in time (torch.flip), pooled over time."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 6, 5, stride=2, padding=2)
        self.bn = nn.BatchNorm1d(6)
        self.back = nn.Conv1d(6, 6, 3, padding=1)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))
        h = h + torch.flip(self.back(torch.flip(h, [2])), [-1])
        return self.head(h.mean(-1))


class GRULM(nn.Module):
    VOCAB = 11

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(self.VOCAB, 8)
        self.rnn = nn.GRU(8, 10, batch_first=True)
        self.out = nn.Linear(10, self.VOCAB)

    def forward(self, ids):
        h, _ = self.rnn(self.embed(ids))
        return self.out(h)


class MobileNetV3Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Conv2d(4, 12, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(12)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12, bias=False)
        self.bn2 = nn.BatchNorm2d(12)
        self.se_reduce = nn.Conv2d(12, 4, 1)
        self.se_expand = nn.Conv2d(4, 12, 1)
        self.project = nn.Conv2d(12, 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 5)

    def forward(self, x):
        h = F.hardswish(self.bn1(self.expand(x)))
        h = F.hardswish(self.bn2(self.dw(h)))
        s = F.adaptive_avg_pool2d(h, 1)
        h = h * F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(s))))
        h = x + self.bn3(self.project(h))
        return self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))


class ConvNeXtBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 2, stride=2)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.norm = nn.LayerNorm(8, eps=1e-6)
        self.pw1 = nn.Linear(8, 16)
        self.pw2 = nn.Linear(16, 8)
        self.gamma = nn.Parameter(0.5 * torch.ones(8))
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = self.stem(x)
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.gamma * self.pw2(F.gelu(self.pw1(self.norm(h))))
        x = x + h.permute(0, 3, 1, 2)
        return self.head(x.mean((2, 3)))


class TinyViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, stride=4)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, 16))
        self.pos = nn.Parameter(0.02 * torch.randn(1, 5, 16))
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                                activation="gelu", norm_first=True)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        p = torch.cat([self.cls_token.expand(p.shape[0], -1, -1), p], dim=1) + self.pos
        return self.head(self.norm(self.block(p))[:, 0])


def _image(shape):
    return lambda g: torch.randn(*shape, generator=g)


def _classes(n: int, shape: tuple[int, ...]):
    return lambda g: torch.randint(0, n, shape, generator=g)


def _lm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, GRULM.VOCAB), labels.reshape(-1))


MODELS = {
    "flip_audio": (FlipAudio, _image((3, 2, 16)), F.cross_entropy, _classes(4, (3,))),
    "gru_lm": (GRULM, _classes(GRULM.VOCAB, (2, 5)), _lm_loss, _classes(GRULM.VOCAB, (2, 5))),
    "mobilenetv3": (MobileNetV3Block, _image((2, 4, 6, 6)), F.cross_entropy, _classes(5, (2,))),
    "convnext": (ConvNeXtBlock, _image((2, 3, 8, 8)), F.cross_entropy, _classes(5, (2,))),
    "vit": (TinyViT, _image((2, 3, 8, 8)), F.cross_entropy, _classes(3, (2,))),
}
