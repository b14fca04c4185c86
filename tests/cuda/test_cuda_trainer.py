"""planner.torch.trainer for `target="gpu"`: a user's PyTorch module trained on the CUDA
executor equals PyTorch's run. A ResNet (convolutions through cuDNN, BatchNorm's batch
statistics and running buffers) and a transformer, each for a few AdamW steps with
clip_grad_norm_ on fresh batches; every parameter and buffer, and the last loss, within 10x
PyTorch's own float32 error against float64 plus 16 ulps (tests/importers/torch_step.py's
`mismatches`), PyTorch's runs on the CPU as the reference. Needs a GPU (marked `gpu`)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.torch import trainer  # noqa: E402
from tests.importers.torch_models import CLASSES, model_case  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

STEPS, LR, DECAY, CLIP = 4, 3e-3, 0.05, 1.0


def _batches(x: np.ndarray, seed: int) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*x.shape, generator=g), torch.randint(0, CLASSES, (x.shape[0],),
                                                                  generator=g))
            for _ in range(STEPS)]


def _torch_run(model, batches, dtype) -> Step:
    model = copy.deepcopy(model).to(dtype).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=DECAY)
    for x, y in batches:
        opt.zero_grad()
        value = F.cross_entropy(model(x.to(dtype)), y)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    return Step(float(value.detach()), {k: v.detach().numpy().copy()
                                        for k, v in model.state_dict().items()})


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["resnet", "transformer"])
def test_a_torch_module_trained_on_the_gpu_equals_pytorchs_run(name, tmp_path):
    model, x, _ = model_case(name)
    batches = _batches(x, seed=1)
    x0, y0 = batches[0]
    t = trainer(copy.deepcopy(model), (x0,), loss=F.cross_entropy, labels=y0,
                optimizer="adamw", lr=LR, weight_decay=DECAY, clip_grad_norm=CLIP,
                out_dir=tmp_path, target="gpu")
    for xb, yb in batches:
        loss = t.step(xb, yb)
    ours = Step(float(loss), t.params())
    f32 = _torch_run(model, batches, torch.float32)
    f64 = _torch_run(model, batches, torch.float64)
    assert set(f64.state) <= set(ours.state)
    assert mismatches(ours, f32, f64) == []
