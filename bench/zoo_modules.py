"""The CPU benches' zoo models written as nn.Modules, as a PyTorch user writes them, for the
PyTorch columns (eager and torch.compile): what a user runs, rather than the node-by-node
translation of the planner's graph (bench/torch_baseline.py), under which torch.compile
recompiles the translator's per-op helpers for every new shape and falls back to eager.

    step = module_trainer("resnet-50", dict(depth=50, batch=32, image=64, width=0.25,
                                           classes=100), lr=0.01, threads=2, compiled=True)

Each twin has the zoo graph's layers, sizes and loss (`zoo_twin_params` checks the parameter
counts against the zoo graph's); where PyTorch's own layer differs in a detail, the twin keeps
PyTorch's (nn.LSTM's two bias vectors per layer, where the zoo cell has one). The zoo's
inception_v3 at a width multiplier has no twin: torchvision's blocks fix their channel counts.
"""

from __future__ import annotations

from collections.abc import Callable

TWINS = ("lstm", "dcgan", "resnet-50", "wide_deep")


def _lstm(batch: int, seq: int, hidden: int, layers: int, vocab: int, dropout: float = 0.5):
    import torch
    from torch import nn

    class LSTMLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, hidden)
            self.drop = nn.Dropout(dropout)
            self.lstm = nn.LSTM(hidden, hidden, layers, dropout=dropout, batch_first=True)
            self.softmax = nn.Linear(hidden, vocab)

        def forward(self, tokens):
            y, _ = self.lstm(self.drop(self.embedding(tokens)))
            return self.softmax(self.drop(y).reshape(-1, hidden))

    inputs = (torch.randint(0, vocab, (batch, seq)),)
    labels = torch.randint(0, vocab, (batch * seq,))
    return LSTMLM(), inputs, labels, nn.functional.cross_entropy, layers * 4 * hidden


def _dcgan(batch: int, image: int = 64, nz: int = 100, channels: int = 3, width: float = 1.0):
    import torch
    from torch import nn

    from planner.zoo.common import scaled
    from planner.zoo.dcgan import upsamplings

    k = upsamplings(image)
    ngf = ndf = scaled(64, width)
    gen: list[nn.Module] = []
    c_in = nz
    for i in range(1, k + 1):
        stride, pad = (1, 0) if i == 1 else (2, 1)
        c_out = ngf * 2 ** (k - i)
        gen += [nn.ConvTranspose2d(c_in, c_out, 4, stride, pad, bias=False),
                nn.BatchNorm2d(c_out), nn.ReLU()]
        c_in = c_out
    gen += [nn.ConvTranspose2d(c_in, channels, 4, 2, 1, bias=False), nn.Tanh()]
    disc: list[nn.Module] = []
    c_in = channels
    for i in range(1, k + 1):
        c_out = ndf * 2 ** (i - 1)
        disc += [nn.Conv2d(c_in, c_out, 4, 2, 1, bias=False)]
        disc += [nn.BatchNorm2d(c_out)] if i > 1 else []
        disc += [nn.LeakyReLU(0.2)]
        c_in = c_out
    disc += [nn.Conv2d(c_in, 1, 4, 1, 0, bias=False), nn.Flatten()]

    class DCGAN(nn.Module):
        """One graph scoring real and generated images together, as the zoo's."""

        def __init__(self) -> None:
            super().__init__()
            self.generator, self.discriminator = nn.Sequential(*gen), nn.Sequential(*disc)

        def forward(self, z, real):
            return self.discriminator(torch.cat([real, self.generator(z)], 0))

    inputs = (torch.randn(batch, nz, 1, 1), torch.randn(batch, channels, image, image))
    labels = torch.randint(0, 2, (2 * batch, 1)).float()
    return DCGAN(), inputs, labels, nn.functional.binary_cross_entropy_with_logits, 0


def _resnet(batch: int, image: int, width: float, classes: int, depth: int = 50):
    """torchvision's ResNet-50 (v1.5) with every channel count scaled by `width`, as the zoo."""
    import torch
    from torch import nn

    from planner.zoo.common import scaled
    from planner.zoo.resnet import PLANES, blocks_per_layer

    def conv_bn(c_in, c_out, kernel, stride=1):
        return [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False),
                nn.BatchNorm2d(c_out)]

    class Bottleneck(nn.Module):
        def __init__(self, c_in: int, planes: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(*conv_bn(c_in, planes, 1), nn.ReLU(),
                                      *conv_bn(planes, planes, 3, stride), nn.ReLU(),
                                      *conv_bn(planes, 4 * planes, 1))
            self.down = (nn.Sequential(*conv_bn(c_in, 4 * planes, 1, stride))
                         if stride != 1 or c_in != 4 * planes else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    stem = scaled(64, width)
    layers: list[nn.Module] = [*conv_bn(3, stem, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    c_in = stem
    for k, (planes, blocks) in enumerate(zip(PLANES, blocks_per_layer(depth), strict=True)):
        planes = scaled(planes, width)
        for j in range(blocks):
            layers.append(Bottleneck(c_in, planes, 2 if k > 0 and j == 0 else 1))
            c_in = 4 * planes
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(c_in, classes))
    inputs = (torch.randn(batch, 3, image, image),)
    return model, inputs, torch.randint(0, classes, (batch,)), nn.functional.cross_entropy, 0


def _wide_deep(batch: int = 256, tables: int = 26, vocab=(1000,), dim: int = 16,
               dense: int = 13, hidden=(1024, 512, 256)):
    import torch
    from torch import nn

    sizes = list(vocab) * tables if len(vocab) == 1 else list(vocab)
    features = tables * dim + dense

    class WideDeep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = nn.ModuleList(nn.Embedding(v, dim) for v in sizes)
            deep: list[nn.Module] = []
            width = features
            for h in hidden:
                deep += [nn.Linear(width, h), nn.ReLU()]
                width = h
            self.deep = nn.Sequential(*deep, nn.Linear(width, 1, bias=False))
            self.wide = nn.Linear(features, 1, bias=False)
            self.bias = nn.Parameter(torch.zeros(1))

        def forward(self, ids, dense_x):
            x = torch.cat([e(ids[:, k]) for k, e in enumerate(self.embeddings)] + [dense_x], 1)
            return self.deep(x) + self.wide(x) + self.bias

    ids = torch.stack([torch.randint(0, v, (batch,)) for v in sizes], 1)
    inputs = (ids, torch.randn(batch, dense))
    labels = torch.randint(0, 2, (batch, 1)).float()
    return WideDeep(), inputs, labels, nn.functional.binary_cross_entropy_with_logits, 0


_MAKERS = {"lstm": _lstm, "dcgan": _dcgan, "resnet-50": _resnet, "wide_deep": _wide_deep}


def zoo_twin_params(label: str, params: dict) -> tuple[int, int]:
    """(the twin's parameter count less what PyTorch's layers add, the zoo graph's): equal
    for a faithful twin."""
    from planner.zoo import build

    model, _, _, _, extra = _MAKERS[label](**params)
    graph = build("resnet" if label.startswith("resnet") else label, **params)
    ours = sum(t.size for t in graph.by_role("param"))
    return sum(p.numel() for p in model.parameters()) - extra, ours


def twin(label: str, params: dict) -> tuple:
    """The twin of `label` at `params`: (module, inputs, labels, loss), called as
    loss(module(*inputs), labels)."""
    model, inputs, labels, loss, _ = _MAKERS[label](**params)
    return model, inputs, labels, loss


def module_trainer(label: str, params: dict, lr: float, threads: int,
                   compiled: bool = False) -> Callable[[], None]:
    """One SGD training step of the twin on `threads` threads, eager or under torch.compile;
    warmed up (and compiled) before it is returned."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, inputs, labels, loss = twin(label, params)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    forward = torch.compile(model) if compiled else model

    def step() -> None:
        opt.zero_grad()
        loss(forward(*inputs), labels).backward()
        opt.step()

    for _ in range(2):
        step()
    return step
