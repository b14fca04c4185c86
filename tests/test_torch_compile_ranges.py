"""torch.compile(model, backend="planner") on the shapes a run brings: a smaller batch (the last
of an epoch) runs on the build of the plan made for the first, larger one (its range:
planner/pipeline/ranges.py), nothing planned or built for it, and trains as eager does
(BatchNorm's statistics over the rows the batch has, the loss its mean). A larger batch is
planned apart, and then holds the smaller ones in its range. Tolerances as
tests/test_torch_compile.py's."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import planner.torch.executors as executors  # noqa: E402
from tests.test_torch_compile import ConvNet, assert_same_state, batches, compiled  # noqa: E402


def planned() -> int:
    """Plans made in this process so far (each a build of its own)."""
    return len(executors._PACKAGES)


def test_a_smaller_last_batch_runs_on_the_larger_plan_as_eager():
    torch.manual_seed(0)
    model = ConvNet()
    ref = copy.deepcopy(model)
    data = batches(2, (6, 3, 6, 6), 4) + batches(1, (3, 3, 6, 6), 4, seed=1)

    def train(m, net):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for x, y in data:
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        return losses

    executors._PACKAGES.clear()
    executors._RANGES.clear()
    net = compiled(model, lanes=False)
    got = train(model, net)
    after_first = planned()
    want = train(ref, ref)
    assert got == pytest.approx(want, rel=1e-5)
    assert_same_state(model, ref)
    # The batch of 6 planned its forward and backward; the batch of 3 planned nothing.
    assert after_first == 2
    # A larger batch is planned apart; then a batch between the two runs on the range of 6.
    x, y = batches(1, (8, 3, 6, 6), 4, seed=2)[0]
    F.cross_entropy(net(x), y).backward()
    assert planned() == 4
    x, y = batches(1, (5, 3, 6, 6), 4, seed=3)[0]
    F.cross_entropy(net(x), y).backward()
    assert planned() == 4
