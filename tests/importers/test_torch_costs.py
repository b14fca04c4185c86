"""planner.torch's trainer priced by measurement: `costs="in-step"` profiles the step's ops on
this machine before planning (codegen.profiling.profile_in_step), keeps the table as
costs.json in out_dir, and trains as PyTorch does; a table of another target, or a value that
names no table, is refused in one line. By default (no `costs`) the plan is priced by times
measured on this host and kept: a second module with the same kernels measures none again."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from planner.costs import CostTable, load_table  # noqa: E402
from planner.costs.signature import graph_signatures  # noqa: E402
from planner.errors import UserError  # noqa: E402
from planner.torch import trainer  # noqa: E402
from tests.importers.torch_training_check import LR, trains_like_pytorch  # noqa: E402


def small_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 6 * 6, 5))


def batches(n=3):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 2, 6, 6, generator=g), torch.randint(0, 5, (4,), generator=g))
            for _ in range(n)]


def test_an_in_step_profile_prices_every_op_and_trains_like_pytorch(tmp_path):
    t, *_ = trains_like_pytorch(small_cnn(), torch.nn.functional.cross_entropy, batches(),
                                "sgd", tmp_path, costs="in-step")
    table = load_table(tmp_path / "costs.json")
    assert table.target == "host"
    # The plan's graph (as the cores rewrote it) is what was profiled: no op left to the
    # analytical model.
    missing = [s.key for s in graph_signatures(t.graph).values() if table.entry(s) is None]
    assert missing == [] and t.plan.summary.analytical_signatures == 0
    assert t.plan.provenance.costs_sha256 != ""  # "" names the analytical model
    # The saved table prices the next trainer of the module, as a path or as a table.
    x, y = batches(1)[0]
    for costs in (tmp_path / "costs.json", table):
        again = trainer(small_cnn(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                        lr=LR["sgd"], out_dir=tmp_path / "again", costs=costs)
        assert again.plan.provenance.costs_sha256 == t.plan.provenance.costs_sha256
        assert again.plan.summary == t.plan.summary


def test_a_table_of_another_target_or_no_table_is_refused(tmp_path):
    x, y = batches(1)[0]
    other = tmp_path / "xeon.json"
    other.write_text(json.dumps(json.loads(CostTable(target="xeon-8180").to_json())))
    with pytest.raises(UserError, match="a cost table of target 'xeon-8180', not of 'host'"):
        trainer(small_cnn(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                out_dir=tmp_path, costs=other)
    for value, kind in ((42, "int"), (torch.zeros(2), "Tensor")):
        with pytest.raises(UserError, match=f"costs: 'background', 'measured', 'analytical', "
                                            f"'in-step', a cost table or its path, not {kind}"):
            trainer(small_cnn(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                    out_dir=tmp_path, costs=value)
    with pytest.raises(UserError, match="no-such.json"):
        trainer(small_cnn(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                out_dir=tmp_path, costs=tmp_path / "no-such.json")


class SameKernels(torch.nn.Module):
    """small_cnn's layers in a module of its own: another module, the same kernels."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.body = small_cnn()

    def forward(self, x):
        return self.body(x)


def test_the_default_measures_once_per_host_and_the_next_module_reuses_it(tmp_path,
                                                                          monkeypatch):
    import codegen.profiling as profiling

    monkeypatch.delenv("PLANNER_COSTS", raising=False)
    # Measured first, in this process (the default measures in a child meanwhile:
    # tests/codegen/test_measure_later.py), so that what is measured can be counted here.
    monkeypatch.setenv("PLANNER_MEASURE", "first")
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path / "cache")
    # Every measurement kept as a quiet machine's: a busy one (the suite's other worker
    # building beside it) is measured again once the machine is quiet, by design
    # (tests/costs/test_host_costs.py); reuse is what is tested here.
    monkeypatch.setattr("planner.costs.host_costs._during", lambda clock, given, now: 0.0)
    measured: list[int] = []
    real = profiling.measure_signatures

    def counting(signatures, target, progress=None):
        measured.append(len(signatures))
        return real(signatures, target, progress, steps=2)

    monkeypatch.setattr(profiling, "measure_signatures", counting)
    x, y = batches(1)[0]
    first = trainer(small_cnn(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                    lr=LR["sgd"], out_dir=tmp_path / "first")
    assert len(measured) == 1 and measured[0] > 0
    # The step and its evaluation (BatchNorm on running statistics) priced by measurements;
    # a view's kernel takes no time: the model prices it.
    for p in (first.plan, first.plan.evaluation.plan):
        assert p.summary.measured_signatures
        assert all(k.startswith(("Flatten", "Reshape")) for k in p.summary.modelled_signatures)
    second = trainer(SameKernels(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                     lr=LR["sgd"], out_dir=tmp_path / "second")
    assert measured == measured[:1]  # nothing measured again
    assert second.plan.summary.measured_signatures == first.plan.summary.measured_signatures
    assert second.plan.summary.step_seconds == first.plan.summary.step_seconds
    analytical = trainer(SameKernels(), (x,), loss=torch.nn.functional.cross_entropy,
                         labels=y, lr=LR["sgd"], out_dir=tmp_path / "model",
                         costs="analytical")
    assert analytical.plan.summary.measured_signatures is None
    assert analytical.plan.provenance.costs_sha256 == ""
