"""Empty tensors on the CPU executor (issue 86): a module through torch.compile(
backend="planner") on a batch of 0 (planned at that shape, and run on the build of a larger
batch) gives PyTorch's empty output and its gradients, which are zeros: an avg_pool1d, a
conv2d and a group norm whose gradient ops were written for positive batches, and a cumprod
(scans of an empty axis)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


class Pools(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 8))
        self.conv = torch.nn.Conv1d(3, 4, 3, padding=1)
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x):
        y = F.avg_pool1d(x * self.w, 2)
        return torch.cumprod(self.norm(self.conv(y)), -1)


def _eager(m, x):
    out = m(x)
    out.square().sum().backward()
    grads = {k: p.grad.clone() for k, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    return out.detach(), grads


@pytest.mark.parametrize("batches", [(0,), (2, 0)], ids=["planned-empty", "larger-build"])
def test_empty_batch_forward_and_backward_match_eager(batches):
    torch.manual_seed(0)
    m = Pools()
    compiled = torch.compile(m, backend="planner", dynamic=False,
                             options={"fallback": False})
    for n in batches:
        x = torch.randn(n, 3, 8)
        want, grads = _eager(m, x)
        out = compiled(x)
        out.square().sum().backward()
        assert out.shape == want.shape
        torch.testing.assert_close(out.detach(), want, rtol=1e-5, atol=1e-5)
        for k, p in m.named_parameters():
            torch.testing.assert_close(p.grad, grads[k], rtol=1e-4, atol=1e-5)
        if n == 0:
            assert all(not g.any() for g in grads.values())
        m.zero_grad(set_to_none=True)
