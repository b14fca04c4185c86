"""Small torch nn.Modules for the thread-count harness (tests/helpers/thread_bits.py): each a
function giving (module, inputs, loss, labels), seeded."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def bn_mlp():
    """Dense layers with BatchNorm1d (BatchNorm over (N, C): oneDNN's batch norm)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(48, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))
    return m, (torch.randn(32, 48),), F.cross_entropy, torch.randint(0, 10, (32,))


def convnet():
    """Convolutions with BatchNorm2d, max pooling, a global average pool."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.c2, self.b2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            h = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
            h = F.relu(self.b2(self.c2(h)))
            return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))

    return Net(), (torch.randn(8, 3, 16, 16),), F.cross_entropy, torch.randint(0, 10, (8,))


def encoder():
    """A transformer encoder layer (attention, LayerNorm, softmax, GELU) and a mean-pooled head."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.head = nn.Linear(32, 5)

        def forward(self, x):
            return self.head(self.layer(x).mean(1))

    return Net(), (torch.randn(4, 12, 32),), F.cross_entropy, torch.randint(0, 5, (4,))


def torch_lstm():
    """An embedding, a 2-layer nn.LSTM and a vocabulary head, cross-entropy over positions."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
            self.head = nn.Linear(32, 50)

        def forward(self, ids):
            return self.head(self.lstm(self.emb(ids))[0]).flatten(0, 1)

    return (Net(), (torch.randint(0, 50, (4, 6)),), F.cross_entropy,
            torch.randint(0, 50, (24,)))


MODULES = {f.__name__: f for f in (bn_mlp, convnet, encoder, torch_lstm)}
