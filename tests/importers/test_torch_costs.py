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
        with pytest.raises(UserError, match=f"costs: 'measured', 'analytical', 'in-step', a "
                                            f"cost table or its path, not {kind}"):
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
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path / "cache")
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


def conv_mlp():
    torch.manual_seed(5)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(16 * 8 * 8, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def decisions(plan) -> dict[tuple[str, str, str], object]:
    """What a cost table decides in a plan of the host: each graph op's thread count and each
    convolution's kernel layout, in the step and in its evaluation."""
    from planner.costs.conv_layouts import CONVOLUTIONS

    out: dict[tuple[str, str, str], object] = {}
    for part, p in (("step", plan), ("evaluation", plan.evaluation.plan)):
        nodes = {n.name: n for n in p.graph.nodes}
        out |= {(part, "threads", op.name): op.threads for op in p.ops if op.name in nodes}
        out |= {(part, "layout", n.name): n.attrs.get("layout", "its own")
                for n in nodes.values() if n.op in CONVOLUTIONS}
    return out


def ratios(table, reference, threads: int) -> list[float]:
    """Per signature both tables measured on `threads` compact threads: `table`'s seconds over
    `reference`'s."""
    def seconds(entry):
        return {s.threads: s.seconds for s in entry.cpu if s.affinity == "compact"}

    other = {e.key: seconds(e) for e in reference.entries}
    return [seconds(e)[threads] / other[e.key][threads] for e in table.entries
            if threads in seconds(e) and threads in other.get(e.key, {})]


def outside_noise(plan, repeats) -> list[str]:
    """The decisions of `plan` that none of the plans `repeats` (the same module priced by
    repeated in-step profiles) made: where the repeated profiles agree, a plan within their
    noise agrees too; where they differ, the decision is noise and either value is."""
    theirs = [decisions(r) for r in repeats]
    return [f"{part} {what} of {name}: {value!r}, in-step {[t.get(key) for t in theirs]}"
            for key, value in sorted(decisions(plan).items())
            for part, what, name in [key]
            if all(t.get(key) != value for t in theirs)]


@pytest.mark.slow
def test_the_default_measures_signatures_as_the_step_runs_them(tmp_path, monkeypatch):
    """What of issue 51's acceptance ("the default plan equals the in-step plan within noise")
    this host can test. The default's one-thread times per signature (each operand written
    just before, codegen.profiling.WRITTEN) against the module's own in-step profile, each the
    best of two taken in turns (default, in-step, default, in-step: as the host store keeps
    the best of repeats, HostCosts.keep; a neighbour's burst of work during one of them then
    moves neither): their median ratio within 1.75x. One run of each gave medians 0.68-2.42
    at load 12-16 on the 2-core VM (all of one run's signatures slower: a burst during it);
    best of two, 1.00-1.28 in five runs at load 8-13. With the operands fed before a
    batch's step (before they were written), one run of each gave 1.45-3.34 in seven of eleven
    rounds of bench/bench_default_vs_in_step.py. The host's contention figures are the
    module's step's (codegen.profiling.step_contention, kept with their load), not the
    signatures'.

    The plans themselves are not compared: at that load two in-step profiles of this module
    disagree on 1-38 of its 53 decisions (each op's thread count, each convolution's layout),
    and the default plan fell outside their noise on 3-40 decisions with these measurements,
    0-39 without (bench/bench_default_vs_in_step.py prints all of it;
    bench/results/2026-11-26-default-vs-in-step-written.md)."""
    import statistics
    from functools import reduce

    from planner.costs.host_costs import HostCosts, read_store
    from planner.target.detect import detect

    monkeypatch.delenv("PLANNER_COSTS", raising=False)
    cache = [tmp_path / "cache0"]
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: cache[0])
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)

    def planned(name, **costs):
        return trainer(conv_mlp(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                       lr=LR["sgd"], out_dir=tmp_path / name, **costs).plan

    host = detect()
    stores, in_step = [], []
    for k in range(2):
        cache[0] = tmp_path / f"cache{k}"  # a host that has measured nothing yet
        default = planned(f"default{k}")
        assert default.summary.measured_signatures  # priced by the host's measurements
        stores.append(read_store(host))
        planned(f"in-step{k}", costs="in-step")
        in_step.append(load_table(tmp_path / f"in-step{k}" / "costs.json"))

    def best(tables):
        return reduce(lambda kept, t: kept.keep(t, 0.0), tables,
                      HostCosts(table=CostTable(target=host.name))).table

    r = ratios(best([s.table for s in stores]), best(in_step), 1)
    assert len(r) >= len(default.summary.measured_signatures) // 2, (len(r), r)
    median = statistics.median(r)
    assert 1 / 1.75 <= median <= 1.75, f"median {median:.2f} of {sorted(r)}"
    print(f"one thread, per signature default / in-step, best of two: median {median:.2f}")
    for store in stores:
        assert store.corun_load is not None
        if host.cores >= 2 and host.cpu is not None:
            assert store.table.corun_slowdown is not None
