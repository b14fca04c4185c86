"""Channel-shuffle CNNs as the executor gradient tests take them (tests/codegen/
test_channel_shuffle_gradients.py, also in a subprocess limited to another instruction set):
ShuffleNet v1 and v2 patterns, grouped and depthwise convolutions between Reshape -> Transpose ->
Reshape, Split, Slice and Concat, exported through each front end (ONNX and torch.export) as a
(training graph, start state, feeds) case."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer

BATCH, CLASSES = 2, 5


def channel_shuffle(x, groups: int):
    """As torchvision writes it: view, transpose, contiguous, view."""
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    return torch.transpose(x, 1, 2).contiguous().view(b, -1, h, w)


def conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1,
            relu: bool = True) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), *([nn.ReLU()] if relu else []))


class Unit(nn.Module):
    """ShuffleNet v2's unit: stride 1 splits the channels (chunk) and transforms one half,
    stride 2 transforms the whole input on two branches; concat, then shuffle."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        half = cout // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, cin, relu=False),
                                         conv_bn(cin, half))
        inner = cin if stride > 1 else half
        self.branch2 = nn.Sequential(conv_bn(inner, half), conv_bn(half, half, 3, stride, half,
                                                                   relu=False),
                                     conv_bn(half, half))

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch2(b)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNets(nn.Module):
    """ShuffleNet v2's stem, a downsampling unit and a unit, then ShuffleNet v1's grouped 1x1
    convolution with a shuffle before its depthwise one, a narrow Slice concatenated back, and a
    linear head: every view chain around grouped and depthwise convolutions at once."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn(3, 8, 3, 2)
        self.units = nn.Sequential(Unit(8, 16, 2), Unit(16, 16, 1))
        self.grouped = conv_bn(16, 16, 1, groups=4)
        self.depthwise = conv_bn(16, 16, 3, 1, 16, relu=False)
        self.fc = nn.Linear(20, CLASSES)

    def forward(self, x):
        x = self.units(F.max_pool2d(self.stem(x), 3, 2, 1))
        y = self.depthwise(channel_shuffle(self.grouped(x), 4))
        y = torch.cat((y, x[:, 2:6]), dim=1)
        return self.fc(y.mean([2, 3]))


def shuffle_case(seed: int = 0):
    """(model, x, labels): ShuffleNets, seeded, its parameters moved off their init, a batch."""
    torch.manual_seed(seed)
    model = ShuffleNets()
    with torch.no_grad():  # BatchNorm's ones and zeros moved off their constants
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(BATCH, 3, 16, 16)
    labels = torch.randint(0, CLASSES, (BATCH,))
    return model, x, labels


def onnx_case():
    from tests.importers.torch_step import export, feeds_of, training_graph

    model, x, labels = shuffle_case()
    graph, start = training_graph(export(model, x))
    return graph, start, feeds_of(graph, x.numpy(), labels.numpy())


def torch_export_case():
    from planner.graph import init_params
    from planner.importers.torch.convert import convert
    from planner.torch.training import export

    model, x, labels = shuffle_case()
    imported = convert(export(model, (x,), F.cross_entropy, labels))
    graph = make_training_graph(imported.graph, Optimizer(kind="sgd", lr=0.1))
    feeds = dict(zip(imported.inputs, (x.numpy(), labels.numpy()), strict=True))
    return graph, {**init_params(graph), **imported.params()}, feeds


CASES = {"onnx": onnx_case, "torch.export": torch_export_case}
