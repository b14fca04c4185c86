"""A volumetric net written for this test (3-D convolutions, a 3-D max pool, an adaptive 3-D
average pool to a size that divides nothing, logsumexp, a 3-norm and amax features) trains
through `trainer` (its plan priced, built for this host and stepped) as through PyTorch: three
SGD steps leave every parameter within the float32 noise torch_training_check.py measures."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from tests.importers.torch_training_check import STEPS, trains_like_pytorch  # noqa: E402


class VolumeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv3d(2, 4, 3, padding=1)
        self.pool = nn.MaxPool3d(2)
        self.conv2 = nn.Conv3d(4, 6, (2, 3, 3), stride=(1, 2, 2), padding=1)
        self.head = nn.Linear(6 * 3 * 2 + 3 * 6, 3)

    def forward(self, x):
        h = F.relu(self.pool(F.relu(self.conv1(x))))
        h = self.conv2(h)                                        # (N, 6, 4, 2, 2)
        features = [F.adaptive_avg_pool3d(h, (3, 2, 1)).flatten(1),
                    torch.logsumexp(h, dim=(2, 3, 4)),
                    torch.linalg.vector_norm(h, 3, dim=(2, 3, 4)),
                    h.amax(dim=(2, 3, 4))]
        return self.head(torch.cat(features, 1))


def test_volume_net_trains_like_pytorch(tmp_path):
    torch.manual_seed(0)
    model = VolumeNet().train()
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(4, 2, 6, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g))
               for _ in range(STEPS)]
    t, _, _, _ = trains_like_pytorch(model, F.cross_entropy, batches, "sgd", tmp_path)
    ops = {n.op for n in t.graph.nodes}
    assert {"Conv2D", "MaxPoolND", "PoolScatter", "AvgPoolNDGrad", "ReduceLogSumExp",
            "ReduceNorm", "ReduceMax", "ReduceGrad"} <= ops, sorted(ops)
