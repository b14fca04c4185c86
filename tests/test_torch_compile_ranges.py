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
from tests.helpers.compile_cases import ConvNet, assert_same_state, batches, compiled  # noqa: E402,E501


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


def test_many_batch_sizes_plan_a_few_ranges_keep_a_bounded_set_and_are_told_once():
    """24 distinct batch sizes in a shuffled order (ragged batches): every call matches eager,
    the sizes past those planned plan the next power of two once (a handful of ranges, not
    24 plans), the executors kept stay within kept_calls, and one line says what to do."""
    import gc
    import random
    import warnings

    import planner.torch.piece as piece

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    sizes = list(range(3, 27))
    random.Random(0).shuffle(sizes)
    executors._PACKAGES.clear()
    executors._RANGES.clear()
    piece._LARGEST.clear()
    piece._DISTINCT.clear()
    piece._KEPT.clear()
    piece._LET_GO.clear()
    net = compiled(model, lanes=False, kept_calls=4)
    before = set(executors._POOLS)  # (other tests' pools, alive while their models are)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for n in sizes:
            x, y = batches(1, (n, 6), 3, seed=n)[0]
            F.cross_entropy(net(x), y).backward()
            F.cross_entropy(ref(x), y).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, rtol=0, atol=1e-5 * float(q.grad.abs().max())), name
    # Ranges up to the first size, then 32 at most (powers of two past it): forward and
    # backward each.
    assert planned() <= 2 * 3
    # Executors for the 4 most recent signatures (and each range's arena owners); the plans
    # of 4 x 4 more kept, their executors let go; the rest let go whole.
    assert len(piece._KEPT) <= 4 and len(piece._LET_GO) <= piece.PLANS_PER_CALL * 4
    gc.collect()
    pools = [p for k, p in executors._POOLS.items() if k not in before]
    assert len(pools) <= 2 * 4 * (1 + piece.PLANS_PER_CALL)
    slots = {id(p._slots): p._slots for p in pools if p._slots is not None}
    owners = {id(s.owner) for r in slots.values() for s in r.idle()}
    held = {id(e) for p in pools for e in p.idle()}
    assert len(held - owners) <= 2 * 4
    churn = [w for w in said if issubclass(w.category, piece.ShapeChurn)]
    assert len(churn) == 1 and "call it first with the largest shapes" in str(churn[0].message)


class Tokens(nn.Module):
    """Token embeddings and positions (a slice of a parameter, to the length), a padding mask,
    attention-like mixing scaled by the length, a masked mean, a head."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.position = nn.Parameter(torch.randn(32, 8) * 0.1)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, tokens, keep):
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        scores = (h @ self.mix(h).transpose(1, 2)) * tokens.shape[1] ** -0.5
        h = scores.masked_fill(~keep[:, None, :], -1e4).softmax(-1) @ h
        pooled = (h * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
        return self.head(pooled)


def train_lengths(model, ref, net, lengths, declared=None, after=lambda step: None):
    """SGD steps of `net` (compiled `model`) and of `ref` over token batches of `lengths`,
    the states equal after each; `declared`: each batch's length dimension marked dynamic up
    to it (torch._dynamo.mark_dynamic) first."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step, length in enumerate(lengths):
        g = torch.Generator().manual_seed(step)
        tokens = torch.randint(0, 50, (4, length), generator=g)
        keep = torch.arange(length)[None, :] < torch.tensor([length, length - 1, 3, 2])[:, None]
        for t in (tokens, keep) if declared else ():
            torch._dynamo.mark_dynamic(t, 1, min=2, max=declared)
        y = torch.randint(0, 3, (4,), generator=g)
        for m, o in ((net, opt), (ref, ref_opt)):
            o.zero_grad()
            F.cross_entropy(m(tokens, keep), y).backward()
            o.step()
        assert_same_state(model, ref)
        after(step)


def test_every_length_of_a_range_runs_on_a_few_shared_arenas_as_eager():
    """Lengths in an order that comes back to earlier ones: each call matches eager (each
    length's own constants are its own, whichever length ran last on the arena), and the
    range's signatures share one arena per call in flight, not one per length."""
    torch.manual_seed(3)
    model = Tokens()
    ref = copy.deepcopy(model)
    executors._RANGES.clear()
    before = set(executors._POOLS)  # (other tests' pools, alive while their models are)
    net = compiled(model, lanes=False)
    train_lengths(model, ref, net, (16, 9, 12, 9, 5, 16, 12, 7, 5))
    pools = [p for k, p in executors._POOLS.items() if k not in before]
    ranges = {id(p._slots): p._slots for p in pools if p._slots is not None}
    assert len(pools) == 2 * 5  # forward and backward of each length, planned once: 16
    assert len(ranges) == 2  # every length on the range of 16's arenas
    # The last backward's gradients are still views of its arena: the forward's is idle.
    assert sum(len(r.idle()) for r in ranges.values()) == 1


def test_an_evaluation_over_many_lengths_runs_on_one_arena_as_eager():
    """no_grad calls of a range's lengths (an evaluation loop over dynamic padding): each
    matches eager, whichever length ran last on the arena, and all run on the range's one."""
    torch.manual_seed(4)
    model = Tokens().eval()
    executors._RANGES.clear()
    before = set(executors._EXECUTORS)
    net = compiled(model, lanes=False)
    with torch.no_grad():
        for step, length in enumerate((16, 9, 12, 9, 5, 16, 7)):
            g = torch.Generator().manual_seed(step)
            tokens = torch.randint(0, 50, (4, length), generator=g)
            keep = torch.arange(length)[None, :] < torch.tensor([length, 3, 2, 1])[:, None]
            got, want = net(tokens, keep), model(tokens, keep)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), length
    calls = [e for k, e in executors._EXECUTORS.items() if k not in before]
    assert len(calls) == 5  # a call signature per length
    assert len({id(c.arena) for c in calls}) == 1


def test_a_length_bounded_by_mark_dynamic_plans_one_range_at_its_maximum(monkeypatch):
    """`torch._dynamo.mark_dynamic(x, 1, max=24)` before the first call: that call plans the
    range up to 24 at once, and every later length runs in it (nothing more planned), each as
    eager; the graph is traced once, symbolically, and no size as it is."""
    from planner.torch import dynamo_import

    traces = []  # "_exported" with no sizes: a size traced as it is

    def counted(kind, real):
        def call(*args):
            traces.append(kind if kind != "_exported" or len(args) == 3 else "within")
            return real(*args)
        return call

    for kind in ("_exported", "_symbolic_trace"):
        monkeypatch.setattr(dynamo_import, kind, counted(kind, getattr(dynamo_import, kind)))
    torch.manual_seed(5)
    model = Tokens()
    ref = copy.deepcopy(model)
    executors._PACKAGES.clear()
    executors._RANGES.clear()
    net = compiled(model, lanes=False)
    counts = []
    train_lengths(model, ref, net, (9, 16, 12, 23, 5, 24), declared=24,
                  after=lambda step: counts.append(planned()))
    # the forward and backward at the declared 24, then every later length in that range
    assert counts == [2] * 6
    assert any((4, 24) in r.largest for rs in executors._RANGES.values() for r in rs)
    assert traces == ["_symbolic_trace", "within"]


def test_a_range_at_the_position_tables_length_is_planned_one_shorter(capsys, monkeypatch):
    """Lengths 12, then 20: the next power of two past 20 is 32, the position table's own
    length, where torch's graph has no slice of the table (another graph, which no call of 20
    could run in). The range is planned up to 31 instead, and 20 and every later length up to
    31 run in it as eager: the 12's and the range's forward and backward, nothing more built.
    The 12 is traced as it is, the 20 (past it: a range) from the one symbolic trace."""
    import planner.torch.piece as piece
    from planner.torch import dynamo_import

    traces = []
    for kind in ("_exported", "_symbolic_trace"):
        real = getattr(dynamo_import, kind)
        monkeypatch.setattr(dynamo_import, kind, lambda *a, kind=kind, real=real: (
            traces.append(kind if kind != "_exported" or len(a) == 3 else "within"), real(*a))[1])
    torch.manual_seed(6)
    model = Tokens()
    ref = copy.deepcopy(model)
    executors._PACKAGES.clear()
    executors._RANGES.clear()
    piece._LARGEST.clear()
    net = compiled(model, lanes=False)
    counts = []
    train_lengths(model, ref, net, (12, 20, 31, 17, 25),
                  after=lambda step: counts.append(planned()))
    assert counts == [2, 4, 4, 4, 4]
    assert any((4, 31) in r.largest for rs in executors._RANGES.values() for r in rs)
    assert "its range is up to [50, 8], [4, 31]" in capsys.readouterr().err
    assert traces == ["_exported", "_symbolic_trace", "within"]


def test_the_doors_plan_with_the_cyclic_collector_paused(monkeypatch):
    """A new shape's planning (the trainer's and the backend's) runs with Python's cyclic
    collector off (planner/collection.py: a fifth of a dynamic-padding run was its
    scans of torch's heap), and the collector is back on after each call; a user's own
    disabled collector stays disabled."""
    import gc

    import planner.torch.piece as piece
    import planner.torch.training as training
    from planner.torch import trainer

    seen = []
    for module, name in ((piece, "_plan"), (training, "_shape_within"),
                         (training, "_build_shape")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name, **k: (
            seen.append((name, gc.isenabled())), real(*a, **k))[1])
    torch.manual_seed(7)
    model = Tokens()
    net = compiled(copy.deepcopy(model), lanes=False)
    t = trainer(model, (torch.randint(0, 50, (4, 12)), torch.ones(4, 12, dtype=torch.bool)),
                loss=F.cross_entropy, labels=torch.zeros(4, dtype=torch.long), optimizer="sgd",
                lr=0.1, costs="analytical")
    for length in (12, 9):
        tokens, keep = torch.randint(0, 50, (4, length)), torch.ones(4, length, dtype=torch.bool)
        net(tokens, keep).sum().backward()
        t.step(tokens, keep, torch.zeros(4, dtype=torch.long))
        assert gc.isenabled()
    assert {name for name, _ in seen} == {"_plan", "_shape_within", "_build_shape"}
    assert not any(enabled for _, enabled in seen)
    gc.disable()
    try:
        t.step(*(torch.randint(0, 50, (4, 7)), torch.ones(4, 7, dtype=torch.bool),
                 torch.zeros(4, dtype=torch.long)))
        assert not gc.isenabled()
    finally:
        gc.enable()
