"""planner.torch's Trainer.evaluate: the module in eval() mode from the training build equals
PyTorch's model.eval() on the same parameters (BatchNorm on its running statistics, Dropout
the identity), and changes nothing of the run."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.torch import trainer  # noqa: E402


def test_evaluate_equals_torch_eval_mode_after_steps(tmp_path):
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(8, 3)).train()
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    t = trainer(model, [x], F.cross_entropy, y, optimizer="sgd", lr=0.1, out_dir=tmp_path)
    for _ in range(3):  # running statistics and weights away from their start
        t.step(x, y)
    before = t.executor.params()
    loss, (logits,) = t.evaluate(x, y)
    after = t.executor.params()
    assert all(after[k].tobytes() == v.tobytes() for k, v in before.items())
    t.load_into(model, copy=True)
    model.eval()
    with torch.no_grad():
        want = model(x)
    # float32, a few sums of 5-8 products: agreement to rounding of the largest value.
    scale = float(want.abs().max())
    np.testing.assert_allclose(logits, want.numpy(), rtol=0, atol=1e-5 * scale)
    assert loss == pytest.approx(float(F.cross_entropy(want, y)), rel=1e-5)
    # Dropout in train() mode would differ from the eval-mode result: the test can fail.
    model.train()
    with torch.no_grad():
        assert float((model(x) - want).abs().max()) > 1e-3 * scale
