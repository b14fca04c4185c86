"""One torch.export per module per test run: planner.torch.trainer exports the same seeded
module for every optimizer a test tries (seconds each); the program is made once, by the real
exporter, and each call gets its own copy of it."""

from __future__ import annotations

import copy
import importlib

import pytest


def _structure(module) -> tuple:
    """What a module's program depends on besides its tensors: each submodule's class and mode
    and its plain attributes (a drop probability, a flag), which repr() omits unless the class
    writes an extra_repr."""
    hidden = {"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"}
    return tuple(
        (name, type(m).__module__, type(m).__qualname__, m.training,
         tuple(sorted((k, repr(v)) for k, v in vars(m).items()
                      if k not in hidden and not k.startswith("_")
                      and isinstance(v, (bool, int, float, str, tuple, type(None))))))
        for name, m in module.named_modules())


@pytest.fixture(autouse=True, scope="session")
def export_once_per_module():
    try:
        # The module that exports (the package's `trainer` is its function).
        trainer = importlib.import_module("planner.torch.training")
        from tests.importers.torch_step import tensor_digest
    except ImportError:  # no torch: nothing exports
        yield
        return
    real = trainer.export
    made: dict[tuple, object] = {}

    def export(module, inputs, loss, labels, dynamic=False):
        # What the program is a function of: structure, modes, values, which parameters
        # are frozen, inputs, the loss, whether its sizes are symbols.
        key = (repr(module), _structure(module), tensor_digest(module.state_dict().values()),
               tuple(p.requires_grad for p in module.parameters()),
               tensor_digest(inputs), loss,
               None if labels is None else tensor_digest([labels]), dynamic)
        if key not in made:
            # Copied at once: the program holds the module's own parameters, which the
            # caller may change later.
            made[key] = copy.deepcopy(real(module, inputs, loss, labels, dynamic))
        return copy.deepcopy(made[key])

    trainer.export = export
    yield
    trainer.export = real


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A planner cache folder of the test's own ($PLANNER_CACHE)."""
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def decompositions(monkeypatch):
    """The programs decomposed (the real decomposition, counted): the record cache's tests."""
    from planner.importers.torch import convert as convert_module

    calls = []
    real = convert_module.decompose

    def counted(program, extra=None):
        calls.append(program)
        return real(program, extra)

    monkeypatch.setattr(convert_module, "decompose", counted)
    return calls
