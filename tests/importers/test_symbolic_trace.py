"""One trace for every size (planner/importers/torch/specialize.py): a module traced once with
dynamic shapes gives, at each concrete size, the graph a trace at that size gives, op for op
and value for value; sizes the trace does not hold are refused (OutsideTrace) and traced as
they are; a trainer whose sequence length changes every step traces its module a few times in
all and matches PyTorch at every length."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from planner.graph.interpret import run  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.importers.torch.record import OutsideTrace  # noqa: E402
from planner.importers.torch.specialize import SymbolicTrace, named_like  # noqa: E402
from tests.helpers.encoder_cases import Encoder, batch  # noqa: E402


def traced(model, length):
    from planner.torch.training import export

    tokens, keep, y = batch(length)
    return export(model, (tokens, keep), F.cross_entropy, y)


def symbolic(model):
    from planner.torch.training import export

    tokens, keep, y = batch(9)
    program = export(model, (tokens, keep), F.cross_entropy, y, dynamic=True)
    return SymbolicTrace(program, "model")  # (decomposed at its first size not kept)


def test_the_symbolic_trace_at_a_size_is_the_trace_at_that_size():
    model = Encoder().eval()
    trace = symbolic(model)
    for length in (3, 9, 17):
        tokens, keep, y = batch(length)
        mine = convert(trace.at((tokens, keep, y)), name="m", module_root="model")
        theirs = convert(traced(model, length), name="m", module_root="model")
        named = named_like(mine, theirs)
        assert named is not None
        assert named.graph.to_json() == theirs.graph.to_json()  # the same graph, byte for byte
        feeds = {named.inputs[0]: tokens.numpy(), named.inputs[1]: keep.numpy(),
                 named.inputs[2]: y.numpy()}
        out = run(named.graph, feeds, named.params())
        loss = F.cross_entropy(model(tokens, keep), y).item()
        # float32 through one attention layer: a few ulps of the loss
        assert abs(float(out[named.graph.outputs[0]]) - loss) <= 1e-5 * max(1.0, abs(loss))


def test_sizes_the_trace_does_not_hold_are_refused():
    model = Encoder().eval()
    trace = symbolic(model)
    tokens, keep, y = batch(9, rows=4)
    with pytest.raises(OutsideTrace):
        trace.at((tokens, keep))                     # an input fewer
    with pytest.raises(OutsideTrace):
        trace.at((tokens, keep[:, :5], y))           # two lengths the trace holds as one
    with pytest.raises(OutsideTrace):
        trace.at((tokens[:, :1], keep[:, :1], y))    # a length of 1: below the trace's range


def test_a_graph_of_other_ops_takes_no_names():
    model = Encoder().eval()
    short = convert(traced(model, 5), name="m", module_root="model")
    other = nn.Sequential(nn.Linear(4, 3))
    from planner.torch.training import export

    x, y = torch.randn(2, 4), torch.tensor([0, 2])
    theirs = convert(export(other, (x,), F.cross_entropy, y), name="m", module_root="model")
    assert named_like(short, theirs) is None


def test_a_trainer_of_changing_lengths_traces_a_few_times_and_matches_pytorch(monkeypatch):
    import planner.torch.training as training
    from planner.torch import trainer

    exports: list[bool] = []
    real = training.export

    def counted(*args, **kwargs):
        exports.append(bool(kwargs.get("dynamic")))
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "export", counted)
    # Fewer shapes' graphs kept than the run brings: the oldest let go, never the trace.
    monkeypatch.setattr(training, "TRACED", 3)
    torch.manual_seed(0)
    model = Encoder()
    reference = copy.deepcopy(model)
    lengths = [12, 5, 9, 3, 7, 11, 4, 10, 6, 8]
    tokens, keep, y = batch(lengths[0])
    longest = batch(16)
    # SGD: Adam would blow the attention's key bias up, whose gradient is rounding noise
    # (softmax does not see a constant added to every key), in eager as in the step alike.
    t = trainer(model, (tokens, keep), loss=F.cross_entropy, labels=y, optimizer="sgd",
                lr=0.1, momentum=0.9, costs="analytical", shapes=[longest])
    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for length in lengths:
        tokens, keep, y = batch(length)
        ours = t.step(tokens, keep, y)
        opt.zero_grad()
        loss = F.cross_entropy(reference(tokens, keep), y)
        loss.backward()
        opt.step()
        # ten steps of momentum SGD in float32: the losses agree to a few parts in a million
        assert abs(ours - loss.item()) <= 2e-5 * max(1.0, abs(loss.item())), length
    # A declared range: one symbolic trace for every length, the range's own and the
    # example's included; none traced as it is.
    assert exports == [True]
    params = t.params()
    for name, value in reference.state_dict().items():
        if value.dtype == torch.float32:
            np.testing.assert_allclose(params[name], value.numpy(), rtol=1e-4, atol=1e-5)


def test_the_backend_traces_dynamos_symbolic_graph_once_and_matches_pytorch(monkeypatch):
    import planner.torch.dynamo_import as dynamo_import

    traces: list[bool] = []
    real = dynamo_import._exported

    def counted(gm, args, tensor_at, sizes=None):
        traces.append(bool(sizes))
        return real(gm, args, tensor_at, sizes)

    monkeypatch.setattr(dynamo_import, "_exported", counted)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Encoder()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="planner", options={"costs": "analytical"})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for length in [12, 16, 5, 9, 3, 7, 11, 4]:
        tokens, keep, y = batch(length)
        for m, o in ((compiled, opt), (reference, ref_opt)):
            o.zero_grad()
            loss = F.cross_entropy(m(tokens, keep), y)
            loss.backward()
            o.step()
            if m is compiled:
                ours = loss.item()
        assert abs(ours - loss.item()) <= 2e-5 * max(1.0, abs(loss.item())), length
    # Dynamo's first graph (static sizes) traced at its size; its second, of a symbolic
    # length, traced once for all the others.
    assert traces.count(True) == 1 and traces.count(False) <= 2
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
