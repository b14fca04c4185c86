"""The index, embedding and batch-statistics patterns of issue 86 train as PyTorch through
planner.torch.trainer and torch.compile(backend="planner"): CLIP's end-of-text pooling
`x[torch.arange(B), text.argmax(-1)]` (an int64 argmax, then advanced indexing on two axes),
nn.Embedding(padding_idx=0) (no gradient into the padding row) and
nn.BatchNorm2d(track_running_stats=False) (aten._native_batch_norm_legit.no_stats: batch
statistics in training and evaluation alike).

The trainer runs SGD steps on the generated CPU executor; PyTorch runs the same steps in float32
and float64, and each parameter after them must be within 10x PyTorch's own float32 error plus
16 ulps of its scale (torch_step.mismatches). The backend's forward and gradients are compared
with eager's the same way.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.torch import trainer  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

LR, STEPS, BATCH, SEQ, VOCAB, WIDTH, CLASSES = 0.1, 4, 4, 6, 11, 8, 3


class ClipPool(torch.nn.Module):
    """CLIP's text tower, shrunk: token embeddings, a position-wise layer, then the features at
    each sequence's end-of-text token (the largest id) projected to the classes."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.proj = torch.nn.Linear(WIDTH, CLASSES)

    def forward(self, text):
        x = torch.tanh(self.mix(self.embed(text)))
        return self.proj(x[torch.arange(x.shape[0]), text.argmax(dim=-1)])


class PaddedBag(torch.nn.Module):
    """Token embeddings with padding id 0, mean-pooled: the padding row's embedding is
    read (zeros at start, as PyTorch initialises it) but never trained."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH, padding_idx=0)
        self.proj = torch.nn.Linear(WIDTH, CLASSES)

    def forward(self, text):
        return self.proj(self.embed(text).mean(dim=1))


class BatchStats(torch.nn.Module):
    """Convolution, BatchNorm2d without running statistics, a ReLU and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4, track_running_stats=False)
        self.head = torch.nn.Linear(4 * 5 * 5, CLASSES)

    def forward(self, x):
        return self.head(F.relu(self.norm(self.conv(x))).flatten(1))


def _tokens(g):
    # padding (id 0) in every row; the largest id, the end-of-text token, once per row
    text = torch.randint(1, VOCAB - 1, (BATCH, SEQ), generator=g)
    text[:, -2:] = 0
    text[torch.arange(BATCH), torch.randint(0, SEQ - 2, (BATCH,), generator=g)] = VOCAB - 1
    return text


def _images(g):
    return torch.randn(BATCH, 2, 5, 5, generator=g)


CASES = {"clip_pool": (ClipPool, _tokens), "padding_idx": (PaddedBag, _tokens),
         "batch_stats": (BatchStats, _images)}


def _case(name):
    make, inputs = CASES[name]
    torch.manual_seed(0)
    model = make()
    with torch.no_grad():  # the padding row too: its value must stay whatever it is
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    batches = [(inputs(g), torch.randint(0, CLASSES, (BATCH,), generator=g))
               for _ in range(STEPS)]
    return model, batches


def _as(x, dtype):
    return x.to(dtype) if x.is_floating_point() else x


def _eager(model, batches, dtype) -> Step:
    model = copy.deepcopy(model).to(dtype).train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in batches:
        opt.zero_grad()
        value = F.cross_entropy(model(_as(x, dtype)), y)
        value.backward()
        opt.step()
    return Step(float(value.detach()), {k: v.detach().numpy().copy()
                                        for k, v in model.state_dict().items()})


@pytest.mark.parametrize("name", sorted(CASES))
def test_trainer_trains_the_pattern_as_pytorch(name, tmp_path):
    model, batches = _case(name)
    x0, y0 = batches[0]
    t = trainer(copy.deepcopy(model), (x0,), loss=F.cross_entropy, labels=y0, optimizer="sgd",
                lr=LR, out_dir=tmp_path)
    for x, y in batches:
        value = t.step(x, y)
    ours = Step(value, {k: np.asarray(v) for k, v in t.params().items()})
    f32, f64 = _eager(model, batches, torch.float32), _eager(model, batches, torch.float64)
    assert not mismatches(ours, f32, f64, set(f64.state))
    if name == "padding_idx":  # the padding row never moved, exactly
        assert np.array_equal(ours.state["embed.weight"][0],
                              model.embed.weight.detach().numpy()[0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_forward_and_gradients_match_eager(name):
    model, batches = _case(name)
    x, y = batches[0]
    grads = {}
    for dtype in (torch.float32, torch.float64):
        m = copy.deepcopy(model).to(dtype)
        F.cross_entropy(m(_as(x, dtype)), y).backward()
        grads[dtype] = {k: p.grad.numpy().copy() for k, p in m.named_parameters()}
    m = copy.deepcopy(model)
    compiled = torch.compile(m, backend="planner", options={"fallback": False})
    value = F.cross_entropy(compiled(x), y)
    value.backward()
    ours = Step(float(value.detach()), {k: p.grad.numpy() for k, p in m.named_parameters()})
    f32 = Step(float(F.cross_entropy(model(x), y).detach()), grads[torch.float32])
    assert not mismatches(ours, f32, Step(f32.loss, grads[torch.float64]))


class PickAt(torch.nn.Module):
    def forward(self, x, ids):
        return x[torch.arange(x.shape[0]), ids.argmax(-1)] + ids.argmin(-1, keepdim=True)


def _imported(ids):
    from planner.importers.torch.convert import convert

    x = torch.randn(3, 5, 2)
    imported = convert(torch.export.export(PickAt(), (x, ids)), name="pick")
    return imported, {imported.inputs[0]: x.numpy(), imported.inputs[1]: ids.numpy()}, x


def test_integer_argmax_is_exact_past_float32s_integers():
    """Ids 2^40 and 2^40 + 1 are one float32: the integer argmax tells them apart, and gives
    the first of equal ones, as torch."""
    from planner.graph.interpret import run

    big = 2 ** 40
    ids = torch.tensor([[3, big + 1, big + 1, 0, big], [big, 1, 2, 3, big + 1],
                        [7, 7, 7, 7, 7]])
    imported, feeds, x = _imported(ids)
    got = run(imported.graph, feeds, imported.params())[imported.graph.outputs[0]]
    np.testing.assert_array_equal(got, PickAt()(x, ids).numpy())


def test_an_index_past_its_axis_is_refused_at_run_time_not_read_elsewhere():
    """x[rows, cols] with computed cols: in range, torch's values; one past its axis (which
    torch refuses) must not read the next row's element as a merged index would: it becomes
    -1, which IndexGather refuses."""
    from planner.graph.interpret import run
    from planner.importers.torch.convert import convert
    from planner.ops.base import OpError

    class Shifted(torch.nn.Module):
        def forward(self, x, ids):
            return x[torch.arange(x.shape[0]), ids.argmax(-1) + 3]

    x = torch.randn(3, 5)
    ids = torch.tensor([[0, 9], [9, 0], [0, 9]])  # columns 4, 3, 4 of 5
    imported = convert(torch.export.export(Shifted(), (x, ids)), name="shifted")
    feeds = {imported.inputs[0]: x.numpy(), imported.inputs[1]: ids.numpy()}
    got = run(imported.graph, feeds, imported.params())[imported.graph.outputs[0]]
    np.testing.assert_array_equal(got, Shifted()(x, ids).numpy())
    narrow = x[:, :4].contiguous()  # 4 columns: column 4 of row 0 would be row 1's first
    imported = convert(torch.export.export(Shifted(), (narrow, ids)), name="narrow")
    with pytest.raises(OpError, match="out of range"):
        run(imported.graph, {imported.inputs[0]: narrow.numpy(),
                             imported.inputs[1]: ids.numpy()}, imported.params())


def test_evaluation_without_running_statistics_normalises_by_the_batch(tmp_path):
    """BatchNorm2d(track_running_stats=False) in eval() still normalises by the batch: the
    trainer's evaluate (its inference-mode graph) must not switch to running statistics."""
    model, batches = _case("batch_stats")
    x, y = batches[0]
    t = trainer(copy.deepcopy(model), (x,), loss=F.cross_entropy, labels=y, optimizer="sgd",
                lr=LR, out_dir=tmp_path)
    t.step(x, y)
    trained = copy.deepcopy(model)
    opt = torch.optim.SGD(trained.parameters(), lr=LR)
    F.cross_entropy(trained(x), y).backward()
    opt.step()
    x2 = 3.0 * batches[1][0] + 1.0  # other statistics than the step's batch
    value, outs = t.evaluate(x2, y)
    with torch.no_grad():
        want = trained.eval()(x2)
    np.testing.assert_allclose(outs[0], want.numpy(), rtol=1e-4, atol=1e-5)
    assert abs(value - float(F.cross_entropy(want, y))) < 1e-4 * abs(value) + 1e-6
