"""planner.torch's trainer on the shapes a run brings (planner/torch/shapes.py): the last,
smaller batch of a DataLoader with drop_last=False, an evaluation batch of another size, and
a transformer fed three sequence lengths train through one trainer, each smaller shape on the
first plan's build (its range: planner/pipeline/ranges.py), each larger one planned and built
once, and the run's parameters end where PyTorch's own loop leaves them.

Tolerance: tests/importers/torch_step.py's `mismatches`: PyTorch in float64 is the exact
answer to float32 precision, PyTorch's float32 run shows the rounding of this model and
tensor, and ours (other summation orders) may be off by 10x that plus 16 ulps of the
tensor's scale. Every shape's loss is the mean over the rows it has, as PyTorch's."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from planner.torch import trainer  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def loader(rows=100, batch=32):
    """A DataLoader with the default drop_last=False: batches 32, 32, 32 and 4."""
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(rows, 6, generator=g),
                                          torch.randint(0, 3, (rows,), generator=g))
    return torch.utils.data.DataLoader(data, batch_size=batch, shuffle=False)


def torch_loop(model, loss, batches, optimizer, lr, dtype, accumulate=1):
    """PyTorch's own loop over `batches` with a copy of `model` in `dtype`: each micro-batch's
    `(loss / K).backward()`, `optimizer.step()` every K-th."""
    model = copy.deepcopy(model).to(dtype)
    opt = (torch.optim.Adam(model.parameters(), lr=lr) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=lr))
    value = 0.0
    for k, (x, y) in enumerate(batches, 1):
        out = loss(model(x.to(dtype) if x.is_floating_point() else x), y)
        (out / accumulate).backward()
        value = float(out.detach())
        if k % accumulate == 0:
            opt.step()
            opt.zero_grad()
    return Step(value, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def matches_torch(t, model, loss, batches, optimizer, lr, last_loss, accumulate=1):
    f32 = torch_loop(model, loss, batches, optimizer, lr, torch.float32, accumulate)
    f64 = torch_loop(model, loss, batches, optimizer, lr, torch.float64, accumulate)
    return mismatches(Step(last_loss, t.params()), f32, f64)


def test_the_last_smaller_batch_of_an_epoch_trains_as_in_pytorch(tmp_path, capsys):
    # Adam with accumulation over 3 micro-batches: the epoch's 4 batches put the small one at
    # another place of the accumulation each epoch, and its gradient is its own mean / 3.
    model = mlp()
    data = loader()
    x0, y0 = next(iter(data))
    t = trainer(model, (x0,), loss=F.cross_entropy, labels=y0, optimizer="adam", lr=0.01,
                accumulate=3, out_dir=tmp_path)
    capsys.readouterr()
    seen = []
    for epoch in range(2):
        last = 0.0
        for x, y in data:
            last = t.step(x, y)
            seen.append((x, y))
        assert matches_torch(t, model, F.cross_entropy, seen, "adam", 0.01, last, 3) == []
        if epoch == 0:
            err = capsys.readouterr().err
            assert err.count("new input shapes [4, 6], [4]: run on the plan for [32, 6], "
                             "[32] (in its range: nothing planned or built)") == 1
    # The last batch runs on the first plan's build: one plan, one build.
    assert t.shapes.planned == 1 and t.shapes.kept() == [((32, 6), (32,)), ((4, 6), (4,))]
    assert "new input shapes" not in capsys.readouterr().err  # the second epoch: nothing new
    assert t.steps == 8
    # An evaluation batch of a third size, on the parameters as trained, changes nothing.
    before = {k: v.copy() for k, v in t.params().items()}
    x, y = next(iter(loader(rows=10, batch=10)))
    loss, (logits,) = t.evaluate(x, y)
    assert all(np.array_equal(v, before[k]) for k, v in t.params().items())
    trained = copy.deepcopy(model)
    t.load_into(trained, copy=True)
    with torch.no_grad():
        want = trained.eval()(x)
    scale = float(want.abs().max())
    np.testing.assert_allclose(logits, want.numpy(), rtol=0, atol=1e-5 * scale)
    assert loss == pytest.approx(float(F.cross_entropy(want, y)), rel=1e-5)


def test_declared_shapes_are_planned_up_front_and_the_cache_is_bounded(tmp_path, capsys):
    model = mlp()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="sgd", lr=0.1,
                out_dir=tmp_path, shapes=[4], shape_cache=1)
    assert t.shapes.planned == 1 and "new input shapes [4, 6], [4]" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no step has run yet"):
        t.trace(tmp_path / "none.json")
    batches = [(x, y), (x[:4], y[:4]), (x[:5], y[:5]), (x[:4], y[:4]), (x, y)]
    last = [t.step(*b) for b in batches][-1]
    err = capsys.readouterr().err
    # [5] is new; keeping one shape besides the first drops [4], whose executor is made
    # again; all of them on the first plan's build (in its range), none planned apart.
    assert "new input shapes [5, 6], [5]" in err
    assert "dropping the executor of shapes [4, 6], [4]" in err
    assert t.shapes.planned == 1 and t.shapes.kept() == [((8, 6), (8,)), ((4, 6), (4,))]
    # A larger batch is no shape of the range: the next range (up to 16) planned once.
    bigger = torch.cat([x, x[:2]]), torch.cat([y, y[:2]])
    batches.append(bigger)
    last = t.step(*bigger)
    assert t.shapes.planned == 2 and t.shapes.last.within == ((16, 6), (16,))
    assert matches_torch(t, model, F.cross_entropy, batches, "sgd", 0.1, last) == []
    with pytest.raises(ValueError, match="rank 1; the trainer's is rank 2"):
        t.step(x[0], y[:1])
    # The measured trace of the last step (the larger batch's), every op of its plan in it.
    events = json.loads(t.trace(tmp_path / "step.json").read_text())["traceEvents"]
    assert {o.name for o in t.plan.ops} <= {e["name"] for e in events if e.get("ph") == "X"}
    t.step(x[:5], y[:5])  # the trace follows the shapes that ran last
    small = json.loads(t.trace(tmp_path / "small.json").read_text())["traceEvents"]
    assert t.shapes.last.key == ((5, 6), (5,)) and t.shapes.last.within == ((8, 6), (8,))
    stepped = t.shapes.last
    assert {o.name for o in stepped.plan.ops} <= {
        e["name"] for e in small if e.get("ph") == "X"}
    # an evaluate() at a new batch size runs no step: the trace is still the last step's
    t.evaluate(x[:3], y[:3])
    assert t.shapes.last.key == ((3, 6), (3,))
    again = json.loads(t.trace(tmp_path / "again.json").read_text())["traceEvents"]
    assert {o.name for o in stepped.plan.ops} <= {e["name"] for e in again if e.get("ph") == "X"}
    # explain re-plans the first shapes' graph from what priced it.
    said = t.explain(as_dict=True)
    assert said["step_seconds"] == pytest.approx(t.plan.summary.step_seconds)
    assert "step" in t.explain()
    op = t.plan.ops[0]
    assert t.explain(op.name, as_dict=True)["op"]["threads"] == op.threads


class TinyLM(nn.Module):
    """Token and learned position embeddings, one encoder layer (no dropout), a vocabulary
    head: the sequence length flows from the input into every shape but the weights'."""

    def __init__(self, vocab=11, d=8, longest=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.position = nn.Parameter(torch.randn(longest, d) * 0.1)
        self.block = nn.TransformerEncoderLayer(d, 2, 16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.block(h))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@pytest.mark.slow
def test_a_transformer_fed_three_sequence_lengths_trains_as_in_pytorch(tmp_path):
    torch.manual_seed(0)
    model = TinyLM()
    g = torch.Generator().manual_seed(3)

    def batch(length):
        tokens = torch.randint(0, 11, (2, length + 1), generator=g)
        return tokens[:, :-1], tokens[:, 1:]

    batches = [batch(n) for n in (8, 5, 3, 8, 3, 5)]
    t = trainer(model, (batches[0][0],), loss=lm_loss, labels=batches[0][1],
                optimizer="adam", lr=0.01, out_dir=tmp_path)
    last = [t.step(*b) for b in batches][-1]
    # At the longest length torch.export drops the position table's slice (a no-op there), so
    # length 5's graph is not one of 8's range: planned apart; length 3 runs on length 5's.
    assert t.shapes.planned == 2
    assert matches_torch(t, model, lm_loss, batches, "adam", 0.01, last) == []


# What a clean run may print on stderr: progress, each line saying what it waits for.
PROGRESS = (
    r"trainer: \w+: tracing \(torch.export\) and planning for inputs \[.*\] on \S+",
    r"trainer: new input shapes \[.*\] \(planned for \[.*\]\): planning and building them "
    r"once, kept for later steps",
    r"trainer: dropping the executor of shapes .*",
    r"trainer: new input shapes \[.*\]: run on the plan for \[.*\] \(in its range: nothing "
    r"planned or built\)",
    r"trainer: new input shapes \[.*\] are larger than those planned \(.*\): planning and "
    r"building shapes up to \[.*\] once, and running these in their range",
    r"trainer: shapes \[.*\] are not in the range of the plan for \[.*\] \(.*\): planned "
    r"apart",
    r"trainer: \d+ distinct input shapes so far, \d+ planned apart; give the largest up "
    r"front .*",
    r"measuring costs on this host: signatures \d+-\d+ of \d+ \(batch \d+ of \d+; kept for "
    r"later plans\)",
    r"in-step profile: \d+ ops.*: building and running",
    r"building the planner's kernel library \(CPU runtime\) for this host \(once; about 1-3 "
    r"minutes on 2 cores\) in .* \.\.\.",
    r"built the planner's kernel library \(CPU runtime\) in \d+ s",
    r"waiting for another process building the planner's kernel library \(CPU runtime\) in "
    r".* \.\.\.",
    r"planner cache: removed \d+ least recently used entr(y|ies) \(.*\) to stay under .*",
    r"torch_[0-9a-f]{16}: compiling the schedule",
    r"  (configure|compile): \d+\.\d s",
)

SCRIPT = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from planner.torch import trainer
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
data = DataLoader(TensorDataset(torch.randn(40, 6), torch.randint(0, 3, (40,))), batch_size=16)
x0, y0 = next(iter(data))
t = trainer(model, (x0,), loss=F.cross_entropy, labels=y0, optimizer="adam", lr=0.01)
for epoch in range(2):
    for x, y in data:
        t.step(x, y)
t.load_into(model)              # the module's tensors: views of the executor, to the end
print(t.evaluate(x0, y0)[0] > 0, t.trace(__import__("tempfile").mktemp(suffix=".json")).exists())
print(t.plan.provenance.costs_sha256 != "", t.explain(as_dict=True)["step_seconds"] > 0)
"""


@pytest.mark.slow
def test_a_clean_run_prints_only_progress_on_stderr(tmp_path):
    """A trainer script kept to the interpreter's exit (its module's parameters views of the
    executor): no nanobind leak report, no third-party warning, only progress lines; priced
    the default way (measured on this host)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "PLANNER_COSTS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    # Priced by measured costs (a table, not the model), and explain answers on that plan.
    assert run.stdout.split() == ["True"] * 4
    lines = run.stderr.splitlines()
    noise = [line for line in lines if not any(re.fullmatch(p, line) for p in PROGRESS)]
    assert noise == []
    assert sum("tracing (torch.export) and planning" in line for line in lines) == 1
    # The last batch (8 of 40 rows at 16) is planned once, in the first epoch only.
    assert sum("new input shapes [8, 6], [8]" in line for line in lines) == 1


def test_state_the_step_updates_is_never_dropped_in_a_hand_over(tmp_path):
    """Two plans whose updated parameters differ in shape (an MLP of hidden 4 and of 5): the
    hand-over refuses in one line naming the tensor, rather than leave it behind; plans that
    agree hand every persistent tensor over bit for bit."""
    from codegen.build import build
    from codegen.load import load
    from codegen.render import render
    from planner.errors import UserError
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph import Optimizer, init_params
    from planner.pipeline import plan
    from planner.target.presets import load_target
    from planner.torch.shapes import Built, hand_over

    target = load_target("host")

    def built(batch, hidden, name, seed):
        g = prepare(f"zoo:mlp?batch={batch}&hidden={hidden}&in_features=3&classes=2",
                    GraphOptions(optimizer=Optimizer(kind="adam")))
        p = plan(g, target)
        ex = load(build(render(p, tmp_path / name)).dir).Executor()
        ex.load_params(init_params(p.graph, seed=seed))
        feeds = tuple(t for t in p.graph.tensors if t.role in ("input", "label"))
        return Built(key=tuple(tuple(t.shape) for t in feeds), imported=None, graph=p.graph,
                     plan=p, package=None, executor=ex, target=target, table=None,
                     feeds=feeds)

    a, b, other = built(8, 4, "mlp_a", 1), built(3, 4, "mlp_b", 2), built(8, 5, "mlp_c", 3)
    before = b.executor.params()
    assert not np.array_equal(before["fc1/weight"], a.executor.params()["fc1/weight"])
    hand_over(a, b)
    held_a, held_b = a.executor.params(), b.executor.params()
    assert held_a.keys() == held_b.keys()
    assert all(np.array_equal(held_a[k], held_b[k]) for k in held_a)
    with pytest.raises(UserError, match=r"the run's tensor 'fc1/weight' \(\[3, 4\] float32\) "
                                        r"is state the step updates.*\[3, 5\]"):
        hand_over(a, other)


def test_batches_past_the_range_plan_the_next_one_once_as_in_pytorch(tmp_path, capsys):
    """Batches of 4, then 6, 7, 5, 3: the first larger one plans a range up to 8 (the next
    power of two) once, and every later batch runs in it; the run trains as PyTorch's."""
    model = mlp()
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))
               for n in (4, 6, 7, 5, 3, 8)]
    t = trainer(model, (batches[0][0],), loss=F.cross_entropy, labels=batches[0][1],
                optimizer="sgd", lr=0.1, out_dir=tmp_path)
    capsys.readouterr()
    last = [t.step(*b) for b in batches][-1]
    err = capsys.readouterr().err
    assert "planning and building shapes up to [8, 6], [8] once" in err
    assert t.shapes.planned == 2 and "planning and building them once" not in err
    assert matches_torch(t, model, F.cross_entropy, batches, "sgd", 0.1, last) == []


def test_by_default_a_ranges_shapes_keep_their_executors(tmp_path, capsys):
    """Seven batch sizes in one range, each met twice in turn (dynamic padding's pattern): by
    default every one keeps its executor (a range's shapes are bounded by their arenas' bytes,
    not by the count of 4 that re-made one at nearly every step), none dropped, none made
    twice, and the run is PyTorch's."""
    model = mlp()
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="sgd", lr=0.1,
                out_dir=tmp_path)
    sizes = [1, 2, 3, 4, 5, 6, 7] * 2
    made = []
    batches = [(x[:n], y[:n]) for n in sizes]
    for b in batches:
        last = t.step(*b)
        made.append(id(t.shapes.last.executor))
    assert len(set(made)) == 7 and made[:7] == made[7:]
    assert "dropping the executor" not in capsys.readouterr().err
    assert t.shapes.planned == 1
    assert matches_torch(t, model, F.cross_entropy, batches, "sgd", 0.1, last) == []


class Ramp(nn.Module):
    """A linear layer over a sequence, summed over it and divided by a length built in forward
    (a constant of one shape at every length, whose value follows the batch's: state the step
    never writes, its own at every length)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        lengths = (torch.arange(3, dtype=torch.float32) * x.shape[1]).clamp(min=1)  # 1, T, 2T
        return self.lin(x).sum(1) / lengths


def counting_hand_overs(monkeypatch):
    """The hand-overs the trainer makes from now on, each (source key, target key)."""
    from planner.torch import shapes

    made = []
    real = shapes.hand_over

    def counted(source, target, keep=()):
        made.append((source.key, target.key))
        return real(source, target, keep)

    monkeypatch.setattr(shapes, "hand_over", counted)
    return made


def test_a_ranges_shapes_run_on_its_arena_with_nothing_handed_over(tmp_path, monkeypatch):
    """Lengths 8 (the first, a range), 3 and 5 in turn: the shorter ones run on the first
    plan's arena (one arena for the three, nothing handed over), each with its own length
    constant loaded for its call and the range's back after it, and the run trains as
    PyTorch's."""
    model = Ramp()
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(4, n, 4, generator=g), torch.randint(0, 3, (4,), generator=g))
               for n in (8, 3, 5, 3, 8, 5, 3)]
    t = trainer(model, batches[0][:1], loss=F.cross_entropy, labels=batches[0][1],
                optimizer="adam", lr=0.01, out_dir=tmp_path)
    ramp = [v.name for v in t.graph.tensors if v.role == "state" and v.updates is None
            and not v.name.startswith("optim/")]
    assert len(ramp) == 1, [(v.name, v.shape) for v in t.graph.tensors if v.role == "state"]
    start = t.executor.params()[ramp[0]].copy()
    assert start.tolist() == [1, 8, 16]
    made = counting_hand_overs(monkeypatch)
    last = 0.0
    for x, y in batches:
        last = t.step(x, y)
        # Between calls the range's arena holds the range's ramp, whichever length ran.
        assert np.array_equal(t.executor.params()[ramp[0]], start)
        if x.shape[1] < 8:
            assert t.shapes.last.own[ramp[0]].tolist() == [1, x.shape[1], 2 * x.shape[1]]
    assert made == [] and t.shapes.planned == 1
    assert matches_torch(t, model, F.cross_entropy, batches, "adam", 0.01, last) == []
    stats = [b.executor.stats() for b in (t.shapes.primary, *t.shapes._others.values())]
    assert len({s["arena_address"] for s in stats}) == 1
    assert [s["arena_sharers"] for s in stats] == [3, 3, 3]
    # An evaluation at a fourth length: on the same arena, on the parameters as trained.
    x, y = torch.randn(2, 6, 4, generator=g), torch.randint(0, 3, (2,), generator=g)
    loss, (logits,) = t.evaluate(x, y)
    trained = copy.deepcopy(model)
    t.load_into(trained, copy=True)
    with torch.no_grad():
        want = trained(x)
    np.testing.assert_allclose(logits, want.numpy(), rtol=0,
                               atol=1e-5 * float(want.abs().max()))
    assert made == []


def test_a_range_planned_past_the_first_is_handed_over_to_once_per_step(tmp_path, monkeypatch):
    """The first shapes (length 4), then 6: a range up to 8 planned. Lengths 2 and 3 run on
    the first plan's arena (nothing handed over), 6 and 7 on the new range's (the run's state
    handed in and back at each of their steps); the run trains as PyTorch's."""
    model = Ramp()
    g = torch.Generator().manual_seed(6)
    batches = [(torch.randn(4, n, 4, generator=g), torch.randint(0, 3, (4,), generator=g))
               for n in (4, 6, 2, 7, 3, 6, 2)]
    x0, y0 = batches[0]
    t = trainer(model, (x0,), loss=F.cross_entropy, labels=y0, optimizer="sgd", lr=0.1,
                out_dir=tmp_path)
    made = counting_hand_overs(monkeypatch)
    last = [t.step(*b) for b in batches][-1]
    first, grown = ((4, 4, 4), (4,)), ((4, 8, 4), (4,))
    longer = [((4, n, 4), (4,)) for n in (6, 7, 6)]
    assert made == [x for k in longer for x in ((first, k), (k, first))]
    assert t.shapes.planned == 2
    assert {b.key: b.within for b in t.shapes._others.values()} == {
        grown: None, ((4, 6, 4), (4,)): grown, ((4, 7, 4), (4,)): grown,
        ((4, 2, 4), (4,)): first, ((4, 3, 4), (4,)): first}
    assert matches_torch(t, model, F.cross_entropy, batches, "sgd", 0.1, last) == []


def test_a_declared_range_holding_the_first_shapes_is_the_one_plan(tmp_path, monkeypatch):
    """Examples of length 4 and a declared range up to 8: the range is planned first and
    the examples run in it, on its arena, as every other length: one plan, nothing handed
    over."""
    model = Ramp()
    g = torch.Generator().manual_seed(7)
    batches = [(torch.randn(4, n, 4, generator=g), torch.randint(0, 3, (4,), generator=g))
               for n in (4, 6, 2, 8, 4)]
    x0, y0 = batches[0]
    made = counting_hand_overs(monkeypatch)
    t = trainer(model, (x0,), loss=F.cross_entropy, labels=y0, optimizer="sgd", lr=0.1,
                out_dir=tmp_path, shapes=[(torch.randn(4, 8, 4), y0)])
    assert t.shapes.primary.key == ((4, 8, 4), (4,)) and t.shapes.planned == 1
    last = [t.step(*b) for b in batches][-1]
    assert made == [] and t.shapes.planned == 1
    assert {b.within for b in t.shapes._others.values()} == {((4, 8, 4), (4,))}
    assert matches_torch(t, model, F.cross_entropy, batches, "sgd", 0.1, last) == []
