"""Small PyTorch modules built like the torchvision models (and the two sequence layers) that
issue 12 exports to ONNX: the same layer patterns, a fraction of the width, so that one training
step runs in well under a second on the numpy reference.

torchvision's own wheel does not load beside this project's CPU build of torch (its compiled
ops are built for the CUDA one), so these stand in for it:

| model       | what it exercises in the export                                              |
| ----------- | ---------------------------------------------------------------------------- |
| resnet      | Conv + BatchNorm + ReLU, identity and strided 1x1 projection shortcuts, Add  |
| mobilenet   | ReLU6 (Clip), depthwise convolution, inverted residual, Dropout              |
| squeezenet  | Fire modules (Concat of 1x1 and 3x3 expands), MaxPool ceil_mode, conv head   |
| shufflenet  | chunk (Split), channel shuffle (Shape arithmetic: integer Div, Reshape)      |
| googlenet   | four-branch inception Concat, MaxPool ceil_mode=True stride 1 and 2          |
| densenet    | BN-ReLU-Conv dense layers concatenating features, AvgPool transition         |
| vgg_bn      | Conv + BatchNorm stacks, MaxPool, Linear-ReLU-Dropout classifier             |
| transformer | nn.TransformerEncoderLayer: attention (batched MatMul, Softmax), LayerNorm   |
| lstm        | nn.LSTM (ONNX LSTM), its last step into a Linear                             |

MODELS maps a name to (constructor, input shape); every model returns (N, CLASSES) logits.
model_case builds one, seeded, with a batch of inputs and labels.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

CLASSES = 5
IMAGE = (4, 3, 16, 16)


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, act=None))
        self.short = (nn.Identity() if stride == 1 and cin == cout
                      else conv_bn(cin, cout, 1, stride, act=None))

    def forward(self, x):
        return torch.relu(self.body(x) + self.short(x))


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn(3, 8)
        self.blocks = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, c: int, expand: int) -> None:
        super().__init__()
        hidden = c * expand
        self.body = nn.Sequential(conv_bn(c, hidden, 1, act=nn.ReLU6),
                                  conv_bn(hidden, hidden, 3, groups=hidden, act=nn.ReLU6),
                                  conv_bn(hidden, c, 1, act=None))

    def forward(self, x):
        return x + self.body(x)


class MobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 8, stride=2, act=nn.ReLU6),
                                      InvertedResidual(8, 2), conv_bn(8, 16, 1, act=nn.ReLU6))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(16, CLASSES))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x):
        x = self.squeeze(x)
        return torch.cat([self.e1(x), self.e3(x)], 1)


class SqueezeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, ceil_mode=True), Fire(8, 4, 8))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(16, CLASSES, 1), nn.ReLU(),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    # As torchvision writes it: the sizes are read from the tensor, so the export computes them.
    batch, channels, height, width = x.size()
    per_group = channels // groups
    x = x.view(batch, groups, per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batch, -1, height, width)


class ShuffleUnit(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        half = c // 2
        self.branch = nn.Sequential(conv_bn(half, half, 1), conv_bn(half, half, 3, groups=half,
                                                                    act=None),
                                    conv_bn(half, half, 1))

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((a, self.branch(b)), dim=1), 2)


class ShuffleNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn(3, 8, stride=2)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.units = nn.Sequential(ShuffleUnit(8), ShuffleUnit(8))
        self.fc = nn.Linear(8, CLASSES)

    def forward(self, x):
        x = self.units(self.pool(self.stem(x)))
        return self.fc(x.mean([2, 3]))


class Inception(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b1 = conv_bn(cin, 4, 1)
        self.b2 = nn.Sequential(conv_bn(cin, 4, 1), conv_bn(4, 6, 3))
        self.b3 = nn.Sequential(conv_bn(cin, 2, 1), conv_bn(2, 4, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, 4, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class GoogLeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 8), nn.MaxPool2d(3, 2, ceil_mode=True))
        self.inception = Inception(8)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(18, CLASSES)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.inception(self.stem(x)), (1, 1))
        return self.fc(self.dropout(torch.flatten(x, 1)))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 8, 1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, growth, 3, padding=1, bias=False))

    def forward(self, features):
        return self.body(torch.cat(features, 1))


class DenseNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn(3, 8)
        self.layers = nn.ModuleList([DenseLayer(8, 4), DenseLayer(12, 4)])
        self.transition = nn.Sequential(nn.BatchNorm2d(16), nn.ReLU(),
                                        nn.Conv2d(16, 8, 1, bias=False), nn.AvgPool2d(2, 2))
        self.fc = nn.Linear(8, CLASSES)

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(features))
        x = torch.relu(self.transition(torch.cat(features, 1)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, (1, 1)), 1))


class VggBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 8), conv_bn(8, 8), nn.MaxPool2d(2, 2),
                                      conv_bn(8, 16), nn.MaxPool2d(2, 2))
        self.classifier = nn.Sequential(nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Dropout(0.5),
                                        nn.Linear(32, CLASSES))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class Transformer(nn.Module):
    """One encoder layer over (N, T, 16) features, mean-pooled into a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


class LSTM(nn.Module):
    """One LSTM layer over (N, T, 6) features; the last step's output into a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 12, batch_first=True)
        self.head = nn.Linear(12, CLASSES)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


SEQUENCE = (3, 5, 16)

MODELS = {
    "resnet": (ResNet, IMAGE),
    "mobilenet": (MobileNet, IMAGE),
    "squeezenet": (SqueezeNet, IMAGE),
    "shufflenet": (ShuffleNet, IMAGE),
    "googlenet": (GoogLeNet, IMAGE),
    "densenet": (DenseNet, IMAGE),
    "vgg_bn": (VggBN, IMAGE),
    "transformer": (Transformer, SEQUENCE),
    "lstm": (LSTM, (3, 4, 6)),
}


def model_case(name: str, seed: int = 0):
    """(model, x, labels): the MODELS model `name`, seeded, and a batch for it (numpy)."""
    make, shape = MODELS[name]
    torch.manual_seed(seed)
    model = make()
    with torch.no_grad():
        # Moved off their initial constants (LayerNorm's ones and zeros): the dynamo exporter
        # merges initializers of equal value, which would tie fresh norm layers' weights.
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    labels = rng.integers(0, CLASSES, shape[0]).astype(np.int64)
    return model, x, labels
