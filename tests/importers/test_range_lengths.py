"""A new sequence length in a trainer's range (planner/torch/training.py, `_shape_within`): its
graph made from the run's one symbolic trace, each front-end pass's check run once at the end
(planner.graph.validate.checked_at_the_end), sizes evaluated once per expression
(record.Binding), the plan's per-op tables once per plan (codegen.concrete.frame). Against a
run that takes the long way for every length (each traced by torch.export as it is, every pass
checked), the same step graphs and the same bits, step after step: the loss (forward), every
parameter and momentum slot (backward and update), and an evaluation at a length of its own.
And what a new length costs, counted: no torch.export, one full check of its step graph (and
one of its evaluation graph), no init values, no plan tables made again, each size expression
evaluated once."""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from tests.helpers.encoder_cases import Encoder, batch  # noqa: E402

LENGTHS = [12, 5, 9, 3, 7, 11, 4]


def made(model):
    """A trainer of `model` over the range of lengths up to 16, the first example of 12."""
    from planner.torch import trainer

    tokens, keep, y = batch(LENGTHS[0])
    return trainer(model, (tokens, keep), loss=F.cross_entropy, labels=y, optimizer="sgd",
                   lr=0.1, momentum=0.9, costs="analytical", shapes=[batch(16)])


def test_a_new_length_steps_as_the_long_way_bit_for_bit(monkeypatch):
    import planner.graph.validate as validate
    import planner.torch.training as training

    torch.manual_seed(0)
    model = Encoder()
    fast = made(copy.deepcopy(model))
    with monkeypatch.context() as m:  # every length traced as it is, every pass checked
        m.setattr(training, "SYMBOLIC_AFTER", 10**9)
        m.setattr(validate, "checked_at_the_end", contextlib.nullcontext)
        slow = made(copy.deepcopy(model))
        slow_steps = [slow.step(*batch(n)) for n in LENGTHS]
        slow_eval = slow.evaluate(*batch(6))
    fast_steps = [fast.step(*batch(n)) for n in LENGTHS]
    fast_eval = fast.evaluate(*batch(6))
    assert fast_steps == slow_steps  # floats compared exactly: the same bits
    assert fast_eval[0] == slow_eval[0]
    assert all(np.array_equal(a, b) for a, b in zip(fast_eval[1], slow_eval[1], strict=True))
    mine, theirs = fast.executor.params(), slow.executor.params()
    assert sorted(mine) == sorted(theirs)
    assert [k for k in mine if not np.array_equal(mine[k], theirs[k])] == []
    for n in LENGTHS[1:]:  # each length's step graph, made either way: the same graph
        key = ((4, n), (4, n), (4,))
        assert fast.shapes._others[key].graph == slow.shapes._others[key].graph, n


def test_what_a_new_length_costs_is_counted(monkeypatch, tmp_path):
    import codegen.concrete as concrete
    import planner.graph.validate as validate
    import planner.importers.torch.record as record
    import planner.io.disk_cache as disk_cache
    import planner.torch.training as training

    # Records of its own: a length whose record an earlier run kept (the per-host record
    # cache) evaluates no size expression at all.
    monkeypatch.setattr(disk_cache, "records_root", lambda root=None: tmp_path / "records")
    torch.manual_seed(0)
    t = made(Encoder())
    for n in LENGTHS[:3]:  # the symbolic trace made at the first new length
        t.step(*batch(n))
    counts = {"export": 0, "check": 0, "init": 0, "tables": 0}
    evaluated: list[list] = []

    def counter(name, real):
        def counted(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return counted

    monkeypatch.setattr(training, "export", counter("export", training.export))
    monkeypatch.setattr(validate, "_check_names", counter("check", validate._check_names))
    import planner.graph as graph_package

    monkeypatch.setattr(graph_package, "init_params", counter("init", graph_package.init_params))
    monkeypatch.setattr(concrete, "plan_attrs", counter("tables", concrete.plan_attrs))
    real_evaluated = record._evaluated

    def evaluations(value, binding):
        if hasattr(value, "node"):
            evaluated[-1].append(value.node.expr)
        return real_evaluated(value, binding)

    monkeypatch.setattr(record, "_evaluated", evaluations)
    new = [n for n in range(2, 16) if n not in LENGTHS[:3]][:5]
    for n in new:
        evaluated.append([])
        t.step(*batch(n))
    assert counts["export"] == 0  # no torch.export: every length from the one symbolic trace
    # Each length's step graph checked once, in full, and its evaluation graph (the step's
    # forward part in inference mode, which the executor is handed too): two, where every pass
    # checking its own output made ten.
    assert counts["check"] == 2 * len(new)
    assert counts["init"] == 0  # no init values: its import holds every persistent tensor
    assert counts["tables"] == 0  # the range plan's per-op tables: made at its first length
    for exprs in evaluated:  # each size expression evaluated once per length
        assert exprs and len(exprs) == len(set(exprs))
