"""nn.Modules the CPU benches train both ways: as PyTorch runs them (eager, torch.compile) and
as planner.torch imports, plans and builds them. torchvision does not load beside this
project's CPU build of torch, so MobileNetV2 (its inverted-residual table, ReLU6, depthwise
convolutions, BatchNorm, dropout head) and ResNet-18 are written here after torchvision's, at a
width and an image size a 2-core step takes tens of milliseconds on; the encoder is torch's own
nn.TransformerEncoder. FRESH are the seven models of tests/importers/fresh_models.py (issue 46:
a top-2 MoE, a GNN, a DLRM, a masked autoencoder, a stochastic-depth ResNet, focal loss, a GPT
with label smoothing) at their bench sizes, each with its own inputs and loss. STRATEGIES are
the CPU strategies table's zoo models (bench/bench_cpu_strategies.py) as their nn.Module twins
(bench/zoo_modules.py).

MODULES maps a name to (constructor, input shape, classes); `example(name)` gives any of
MODULES, FRESH or STRATEGIES as a module with its inputs, labels and loss.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.importers.fresh_models


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             act: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6()) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        layers = [_conv_bn(cin, hidden, 1)] if expand != 1 else []
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   _conv_bn(hidden, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2(nn.Module):
    # torchvision's (expansion, channels, repeats, first stride) rows
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, width: float = 0.5, classes: int = 100) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return max(8, int(c * width + 4) // 8 * 8)

        cin = ch(32)
        layers = [_conv_bn(3, cin, 3, 2)]
        for expand, c, repeats, stride in self.SETTINGS:
            for k in range(repeats):
                layers.append(InvertedResidual(cin, ch(c), stride if k == 0 else 1, expand))
                cin = ch(c)
        last = ch(1280)
        layers.append(_conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.short = (nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x):
        return torch.relu(self.body(x) + self.short(x))


class ResNet18(nn.Module):
    """torchvision's resnet18 (two BasicBlocks per stage, 7x7 stem, max pool), `width` times
    its channels."""

    def __init__(self, width: float = 0.5, classes: int = 100) -> None:
        super().__init__()
        c = [int(64 * width * 2 ** k) for k in range(4)]
        layers = [nn.Conv2d(3, c[0], 7, 2, 3, bias=False), nn.BatchNorm2d(c[0]), nn.ReLU(),
                  nn.MaxPool2d(3, 2, 1)]
        cin = c[0]
        for k, cout in enumerate(c):
            layers += [BasicBlock(cin, cout, 1 if k == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.fc(torch.flatten(x, 1))


class Encoder(nn.Module):
    """nn.TransformerEncoder (2 layers, d_model 128, 4 heads) over (N, T, 128) features,
    mean-pooled into a linear head."""

    def __init__(self, dim: int = 128, classes: int = 100) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, 4, dim_feedforward=4 * dim, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


MODULES = {
    "mobilenet_v2": (MobileNetV2, (8, 3, 64, 64), 100),
    "resnet18": (ResNet18, (8, 3, 64, 64), 100),
    "transformer_encoder": (Encoder, (8, 64, 128), 100),
}


FRESH = ("moe", "gnn", "dlrm", "mae", "stochastic_depth", "focal", "gpt")
# The CPU strategies table's zoo models (bench/bench_cpu_strategies.py, at its sizes) as their
# nn.Module twins (bench/zoo_modules.py), each named by its label there.
STRATEGIES = ("lstm", "dcgan", "resnet-50", "wide_deep")


def example(name: str, seed: int = 0) -> tuple[nn.Module, tuple, torch.Tensor, Callable]:
    """The module `name` (of MODULES, FRESH or STRATEGIES) in train() mode, one batch of its
    inputs, the labels, and the loss (called as loss(module(*inputs), labels))."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    if name in STRATEGIES:
        from bench_cpu_strategies import MODELS as SIZES
        from zoo_modules import twin

        module, inputs, labels, loss = twin(name, SIZES[name])
        return module.train(), inputs, labels, loss
    if name in FRESH:
        from tests.importers.fresh_models import MODELS as FRESH_MODELS

        fresh = FRESH_MODELS[name]
        module = fresh.make(True).train()
        *inputs, labels = fresh.batch(g, True)
        return module, tuple(inputs), labels, fresh.loss
    make, shape, classes = MODULES[name]
    module = make().train()
    return (module, (torch.randn(*shape, generator=g),),
            torch.randint(0, classes, (shape[0],), generator=g), nn.functional.cross_entropy)


def eager_step(module: nn.Module, inputs: tuple, y: torch.Tensor, loss_fn: Callable, lr: float,
               compiled: bool = False, backend: str = "inductor", warm: int = 2,
               compiled_step: bool = False, options: dict | None = None):
    """One SGD step of `module` on (inputs, y) as PyTorch runs it (torch.compile of the
    forward and loss with `compiled`, by `backend`: Inductor, or "planner", planner.torch's;
    with `compiled_step`, of `opt.step` too, by the same backend, given `options`), after
    `warm` steps."""
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    update = (torch.compile(opt.step, backend=backend, options=options) if compiled_step
              else opt.step)
    def loss():
        return loss_fn(module(*inputs), y)

    fn = torch.compile(loss, backend=backend, options=options) if compiled else loss

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        fn().backward()
        update()

    for _ in range(warm):
        step()
    return step
