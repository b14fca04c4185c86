"""Small PyTorch models of common families that no other planner.torch test uses: a Conv1d
audio net that reads time both ways (torch.flip), a GRU language model, a MobileNetV3 block
(Hardswish, squeeze-and-excitation with Hardsigmoid), a ConvNeXt block (depthwise conv, LayerNorm
over channels-last permutes, a layer-scale parameter), a ViT with a class token and learned
position embeddings, a UNet (GroupNorm, InstanceNorm, PixelShuffle, nearest and bilinear
upsampling, reflect and replicate padding, per-pixel classes), an EfficientNet-like block
(SiLU, sigmoid squeeze-and-excitation, grouped conv, a global max pool by amax), a causal LM
whose output layer is its embedding, attention written out by hand (a causal mask built in
forward by torch.tril, masked_fill with -inf, a max over time by max(dim).values), and an
x-vector-like speaker net (PReLU, Mish, Softplus, statistics pooling by mean and std over time,
an F.normalize'd embedding). Tiny sizes: each trains in seconds.

MODELS maps a name to (module class, input maker, loss, labels maker); inputs and labels are
drawn from a torch.Generator.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class FlipAudio(nn.Module):
    """Conv1d features read forwards and backwards in time (torch.flip), pooled over time."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 6, 5, stride=2, padding=2)
        self.bn = nn.BatchNorm1d(6)
        self.pool = nn.MaxPool1d(2)
        self.back = nn.Conv1d(6, 6, 3, padding=2, dilation=2)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        h = self.pool(F.leaky_relu(self.bn(self.conv(x)), 0.1))
        h = h + torch.flip(F.elu(self.back(torch.flip(h, [2]))), [-1])
        return self.head(F.adaptive_avg_pool1d(h, 1).squeeze(-1))


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


class UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down1 = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
        self.gn = nn.GroupNorm(2, 4)
        self.down2 = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.shuffle = nn.Sequential(nn.Conv2d(8, 16, 1), nn.PixelShuffle(2))
        self.mix = nn.Conv2d(4 + 8 + 4, 4, 3, padding=1, padding_mode="replicate")
        self.head = nn.Conv2d(4, 5, 1)

    def forward(self, x):
        a = F.silu(self.gn(self.down1(x)))
        b = F.relu(self.inorm(self.down2(a)))
        c = F.interpolate(self.shuffle(b), scale_factor=0.5, mode="nearest")
        c = F.interpolate(c, size=(8, 8), mode="nearest")
        return self.head(F.relu(self.mix(torch.cat([a, self.up(b), c], 1))))


class EfficientBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.se_reduce = nn.Linear(8, 2)
        self.se_expand = nn.Linear(2, 8)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = F.silu(self.bn(self.stem(x)))
        y = F.silu(self.dw(x))
        w = torch.sigmoid(self.se_expand(F.silu(self.se_reduce(y.mean((2, 3))))))
        y = self.grouped(y * w[:, :, None, None]) + x
        return self.head(torch.amax(y, dim=(2, 3)))


class CausalLM(nn.Module):
    VOCAB = 13

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(self.VOCAB, 16)
        self.pos = nn.Parameter(0.02 * torch.randn(6, 16))
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Linear(16, 16)
        self.norm1 = nn.LayerNorm(16)
        self.norm2 = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)

    def forward(self, ids):
        x = self.embed(ids) + self.pos
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 2, 8).transpose(1, 2)
                   for z in self.qkv(self.norm1(x)).split(16, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))
        return x @ self.embed.weight.t()


class MaskedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)
        self.v = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        att = (self.q(x) @ self.k(x).transpose(-2, -1)) / math.sqrt(8)
        mask = torch.tril(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.head((att @ self.v(x)).max(dim=1).values)


class XVector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.frame1 = nn.Conv1d(3, 6, 3, padding=1)
        self.act1 = nn.PReLU(6)
        self.frame2 = nn.Conv1d(6, 6, 3, dilation=2, padding=2)
        self.act2 = nn.PReLU()
        self.segment = nn.Linear(12, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = self.act2(self.frame2(F.mish(self.act1(self.frame1(x)))))
        stats = torch.cat([h.mean(-1), h.std(-1)], dim=1)
        return self.head(F.normalize(F.softplus(self.segment(stats), beta=2.0), dim=1))


def _image(shape):
    return lambda g: torch.randn(*shape, generator=g)


def _classes(n: int, shape: tuple[int, ...]):
    return lambda g: torch.randint(0, n, shape, generator=g)


def _lm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


MODELS = {
    "flip_audio": (FlipAudio, _image((3, 2, 16)), F.cross_entropy, _classes(4, (3,))),
    "gru_lm": (GRULM, _classes(GRULM.VOCAB, (2, 5)), _lm_loss, _classes(GRULM.VOCAB, (2, 5))),
    "mobilenetv3": (MobileNetV3Block, _image((2, 4, 6, 6)), F.cross_entropy, _classes(5, (2,))),
    "convnext": (ConvNeXtBlock, _image((2, 3, 8, 8)), F.cross_entropy, _classes(5, (2,))),
    "vit": (TinyViT, _image((2, 3, 8, 8)), F.cross_entropy, _classes(3, (2,))),
    "unet": (UNet, _image((2, 3, 8, 8)), F.cross_entropy, _classes(5, (2, 8, 8))),
    "efficient": (EfficientBlock, _image((2, 3, 8, 8)), F.cross_entropy, _classes(4, (2,))),
    "masked_attention": (MaskedAttention, _image((2, 5, 8)), F.cross_entropy,
                         _classes(3, (2,))),
    "xvector": (XVector, _image((3, 3, 10)), F.cross_entropy, _classes(4, (3,))),
    "causal_lm": (CausalLM, _classes(CausalLM.VOCAB, (2, 6)), _lm_loss,
                  _classes(CausalLM.VOCAB, (2, 6))),
}
