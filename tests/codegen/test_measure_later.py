"""Measuring off the critical path (codegen/measure_later.py): the first plan is priced by what
the host kept and the model, a child measures the rest at low priority, and the plan made from
its measurements comes in between steps with the run's state; a later plan of the same graph
measures nothing. The child is real: it builds and runs this host's kernels into a store of the
test's own (the kernel library is the suite's, linked in)."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from codegen import measure_later
from codegen.build import build_runtime, runtime_folder
from planner.costs.host_costs import kept_pricing
from planner.errors import UserError
from planner.pipeline import priced_graphs
from planner.target.detect import detect
from tests.helpers.host_figures import keep_host_quiet

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional


@pytest.fixture
def own_store(tmp_path, monkeypatch):
    """PLANNER_CACHE of the test's own, holding the suite's kernel library (by a link): the
    child process, which reads the environment, measures into it."""
    build_runtime()
    runtime = runtime_folder()
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    (tmp_path / runtime.name).symlink_to(runtime, target_is_directory=True)
    yield tmp_path
    measure_later.wait(600)


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 6 * 6, 5))


def eager_losses(model, x, y, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def sgd_step(model, opt, x, y) -> float:
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def test_the_first_plan_waits_for_no_measurement_and_the_measured_one_comes_between_steps(
        own_store, capfd):
    from planner.torch import trainer

    model = net()
    reference = copy.deepcopy(model)
    x, y = torch.randn(4, 3, 6, 6), torch.tensor([0, 1, 2, 3])
    t = trainer(model, [x], F.cross_entropy, y, optimizer="sgd", lr=0.05, momentum=0.9,
                costs="background")
    first = t.shapes.primary
    assert first.provisional                             # planned before anything was measured
    assert not first.plan.summary.measured_signatures    # priced by the model alone
    losses = [t.step(x, y) for _ in range(3)]
    measure_later.wait(600)
    losses += [t.step(x, y) for _ in range(3)]
    now = t.shapes.primary
    assert now.provisional is None
    assert now.plan.summary.measured_signatures          # the store's measurements price it
    said = capfd.readouterr().err
    assert "in the background" in said
    if now.plan.to_json() != first.plan.to_json():       # swapped: said, the state carried
        assert "swapped in" in said and t.executor is now.executor
    # The run is PyTorch's whatever plan ran each step: float32 sums of a few hundred terms,
    # six steps of momentum SGD.
    np.testing.assert_allclose(losses, eager_losses(reference, x, y, 6), rtol=2e-4, atol=1e-5)
    params = t.params()
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(params[name], value.numpy(), rtol=2e-4, atol=2e-5)

    # The host keeps what the child measured: the same graph plans from it at once.
    again = trainer(net(), [x], F.cross_entropy, y, optimizer="sgd", lr=0.05, momentum=0.9,
                    costs="background")
    assert again.shapes.primary.provisional is None and not measure_later.pending()
    assert again.plan.ops == now.plan.ops  # the same decisions, from the same measurements


def test_the_compiled_model_plans_its_calls_again_once_the_measurements_are_in(own_store,
                                                                                capfd,
                                                                                monkeypatch):
    """...and compiles nothing for them: the child built the measured plans before its job
    ended, and the plans made again find them by name."""
    import codegen.cached

    compiled_here = []
    load_built = codegen.cached.load_built

    def recorded(*args, **kwargs):
        module, result = load_built(*args, **kwargs)
        compiled_here.append(not result.cached)
        return module, result

    monkeypatch.setattr(codegen.cached, "load_built", recorded)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="planner", options={"costs": "background"})
    x, y = torch.randn(6, 12), torch.tensor([0, 1, 2, 0, 1, 2])
    ours, theirs = [], []
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(6):
        if step == 3:
            measure_later.wait(600)
            assert any(compiled_here)  # the first plans' builds, in this process
            compiled_here.clear()
        for m, o, out in ((compiled, opt, ours), (reference, ref_opt, theirs)):
            out.append(sgd_step(m, o, x, y))
    said = capfd.readouterr().err
    assert "in the background" in said and "planning it again from them" in said
    assert compiled_here and not any(compiled_here)  # planned again, loaded as built
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_a_range_measured_in_the_background_is_planned_again_at_its_largest(own_store,
                                                                           capfd):
    """A range planned before its measurements (the batch of 8) is planned again once they
    are in at its own largest shapes, not at the next call's: the smaller batches after run
    in the one range, planning nothing each."""
    import re

    import planner.torch.executors as executors

    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="planner", options={"costs": "background"},
                             dynamic=False)
    executors._RANGES.clear()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    ours, theirs = [], []
    for n in (8, 5, 6, 7, 3):
        if n == 5:
            measure_later.wait(600)
            capfd.readouterr()
        x, y = torch.randn(n, 12), torch.arange(n) % 3
        for m, o, out in ((compiled, opt, ours), (reference, ref_opt, theirs)):
            out.append(sgd_step(m, o, x, y))
    said = capfd.readouterr().err
    planned = re.findall(r"for inputs \[(\d+), 12\]", said)
    assert planned == ["8"]  # the forward's range, once: none at 5, 6, 7 or 3
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_what_the_host_kept_prices_now_and_what_it_lacks_is_listed(own_store):
    from planner.frontend.autodiff import make_training_graph
    from planner.graph.optimizer import Optimizer
    from planner.zoo import build

    graph = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=6, classes=3),
                                Optimizer(kind="sgd", lr=0.1))
    host = detect()
    pricing = kept_pricing(priced_graphs(graph, host), host)
    assert pricing.unmeasured and len(pricing.table) == 0   # an empty store prices nothing
    assert pricing.fit == (host.cores > 1)


def test_the_measuring_mode_is_checked(monkeypatch):
    monkeypatch.setenv("PLANNER_MEASURE", "later")
    with pytest.raises(UserError, match="PLANNER_MEASURE='later'"):
        measure_later.measure_mode()
    monkeypatch.setenv("PLANNER_MEASURE", "first")
    assert measure_later.measure_mode() == "first"
    monkeypatch.delenv("PLANNER_MEASURE")
    assert measure_later.measure_mode() == "background"
    assert os.environ.get("PLANNER_MEASURE") is None


SCRIPT = """
import torch
from torch import nn
import torch.nn.functional as F
from planner.torch import trainer

torch.manual_seed(0)
x, y = torch.randn(4, 3, 6, 6), torch.tensor([0, 1, 2, 3])
conv = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(144, 5))
mlp = nn.Sequential(nn.Flatten(), nn.Linear(108, 6), nn.Tanh(), nn.Linear(6, 5))
for model in (conv, mlp):  # two graphs: the second's job still queued when the script ends
    t = trainer(model, [x], F.cross_entropy, y, optimizer="sgd", lr=0.05)
    t.step(x, y)
"""


def test_a_second_process_builds_and_measures_nothing(own_store, tmp_path_factory):
    """The first process's children measure every graph it planned (the one still queued at
    its end included, after the running one) and build the plans the measurements make: the
    next process plans the same graphs from the store and finds every package by name."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    # Figures kept quiet: a busy-measured figure measured again by the second process would
    # price its plans from other figures (tests/helpers/host_figures.py).
    keep_host_quiet(own_store)
    scratch = tmp_path_factory.mktemp("children")  # the children's folders, to wait on them
    env = {**os.environ, "TMPDIR": str(scratch), "PLANNER_MEASURE": "background",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("PLANNER_COSTS", None)

    def run() -> tuple[str, set[str]]:
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        deadline = time.monotonic() + 900
        while any(scratch.glob("planner-measure-*")):  # the children, ended or failed
            assert time.monotonic() < deadline, "the background children did not end"
            time.sleep(0.2)
        packages = own_store / "packages"
        return done.stderr, {p.name for p in packages.iterdir()} if packages.is_dir() else set()

    said, first = run()
    assert "one after the other" in said  # the queued graph handed to a child of its own
    said, second = run()
    assert "in the background" not in said, said
    assert second == first  # every plan of the second process was built by the first's children
