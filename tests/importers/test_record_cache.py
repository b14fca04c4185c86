"""Traced programs' records kept per host (planner/importers/torch/record_cache.py): a program
traced again is imported from its kept record, into the same graph, with this trace's weights;
another program, another shape or a changed forward is another key; a damaged record is
decomposed again, never trusted."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from planner.importers.torch import record_cache  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.io.disk_cache import entries  # noqa: E402
from planner.torch.training import export  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 6 * 6, 10)
        self.scale = scale
        self.register_buffer("mask", torch.ones(10))

    def forward(self, x):
        x = self.bn(self.conv(x)).relu().to(torch.float64).to(torch.float32)
        return self.fc(x.flatten(1)) * self.mask * self.scale


def traced(model, batch=4):
    torch.manual_seed(1)
    x, y = torch.randn(batch, 3, 8, 8), torch.randint(0, 10, (batch,))
    return export(model, (x,), torch.nn.functional.cross_entropy, y)


def test_a_program_traced_again_is_imported_from_its_record(cache, decompositions):
    torch.manual_seed(0)
    model = Net()
    first = convert(traced(model), module_root="model")
    again = convert(traced(model), module_root="model")
    assert len(decompositions) == 1
    assert [e.kind for e in entries(cache)] == ["record"]
    assert again.graph == first.graph and again.inputs == first.inputs
    assert again.counters == first.counters and again.outputs == first.outputs
    mine, theirs = first.params(), again.params()
    assert mine.keys() == theirs.keys()
    for name in mine:
        np.testing.assert_array_equal(mine[name], theirs[name])


def test_the_weights_are_this_traces_not_the_records(cache, decompositions):
    torch.manual_seed(0)
    model = Net()
    convert(traced(model), module_root="model")
    with torch.no_grad():
        model.fc.weight.mul_(3.0)
        model.mask.fill_(0.5)
    again = convert(traced(model), module_root="model")
    assert len(decompositions) == 1
    params = again.params()
    np.testing.assert_array_equal(params["model.fc.weight"], model.fc.weight.detach().numpy())
    np.testing.assert_array_equal(params["model.mask"], np.full(10, 0.5, np.float32))


def test_another_shape_or_forward_is_another_record(cache, decompositions):
    torch.manual_seed(0)
    model = Net()
    convert(traced(model), module_root="model")
    convert(traced(model, batch=8), module_root="model")
    model.scale = 2.0  # an attribute forward reads: a constant of the trace
    convert(traced(model), module_root="model")
    convert(traced(model), module_root="")  # other module paths
    assert len(decompositions) == 4
    assert len(entries(cache)) == 4


def test_a_damaged_record_is_decomposed_again(cache, decompositions):
    torch.manual_seed(0)
    model = Net()
    first = convert(traced(model), module_root="model")
    (kept,) = entries(cache)
    path = f"{kept.path}/{record_cache.FILE}"
    for damage in ('{"format": 1, "inputs": [{"$int64": "x"}]}', "not json", ""):
        with open(path, "w") as f:
            f.write(damage)
        again = convert(traced(model), module_root="model")
        assert again.graph == first.graph
    assert len(decompositions) == 4


def test_torch_values_are_read_back_as_their_types_only():
    assert record_cache.decoded(record_cache.encoded(torch.float16)) is torch.float16
    assert record_cache.decoded(record_cache.encoded(torch.device("cpu"))) == torch.device("cpu")
    for bad in ({"$dtype": "nn"}, {"$layout": "float32"}, {"$module": "os"}):
        with pytest.raises(ValueError):
            record_cache.decoded(bad)
    with pytest.raises(record_cache.NotKept):
        record_cache.encoded(object())


class Draws(torch.nn.Module):
    """A buffer drawn afresh under no_grad: the draw's argument lives in a nested graph's code
    (wrap_with_set_grad_enabled's submodule), not the top graph's."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.register_buffer("noise", torch.zeros(64))

    def forward(self):
        with torch.no_grad():
            self.noise.geometric_(self.p)
        return self.noise * 1.0


def test_an_argument_inside_a_nested_graph_is_another_record(cache, decompositions):
    """A program with a no_grad region is kept (its nested graph in the key): traced again,
    it is read back; another argument inside the region is another record."""
    first = convert(torch.export.export(Draws(0.2), ()))
    assert len(entries(cache)) == 1
    assert convert(torch.export.export(Draws(0.2), ())).graph == first.graph
    assert len(decompositions) == 1
    again = convert(torch.export.export(Draws(0.7), ()))
    assert len(decompositions) == 2
    assert first.graph != again.graph


class Rows(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).relu().sum(0)


def _symbolic():
    from planner.importers.torch.specialize import SymbolicTrace

    torch.manual_seed(0)
    rows = {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}
    return SymbolicTrace(torch.export.export(Rows(), (torch.randn(5, 4),),
                                             dynamic_shapes=(rows,)))


def test_a_symbolic_traces_sizes_are_kept_each(cache, decompositions):
    """A trace of dynamic shapes traced again (the next process) reads each size's record kept
    by the first, decomposing nothing; a size not kept decomposes it once, for every size."""
    first = _symbolic()
    at5, at7 = first.at((torch.randn(5, 4),)), first.at((torch.randn(7, 4),))
    assert len(decompositions) == 1 and len(entries(cache)) == 2
    again = _symbolic()
    assert again.at((torch.randn(5, 4),)).calls == at5.calls
    assert again.at((torch.randn(7, 4),)).calls == at7.calls
    assert len(decompositions) == 1
    assert at5.calls != at7.calls  # each size's own record
    again.at((torch.randn(9, 4),))
    again.at((torch.randn(11, 4),))
    assert len(decompositions) == 2 and len(entries(cache)) == 4
