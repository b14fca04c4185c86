"""A data-parallel plan never carries schedule variants (one unpinned lane in execution order
cannot stand for its comm lane, whose collectives every rank issues in one order), whatever
the host's measured-cost store holds: busy, quiet and missing entries, contention figures
fitted or not. Issue 63: `planner plan ... --data-parallel 2 --ranks-per-host 2` failed its own
verification ("schedule variants in a plan with collective op 'allreduce/0'") whenever the
store asked for the contention fit, which planned the data-parallel step graph it was given
under one-process options."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.costs.host_costs import BUSY, CORUN_FIT, HostCosts, host_table, store_path
from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.io.write import atomic_write
from planner.ir.graph import canonical_json
from planner.ops.collective import COLLECTIVE_OPS
from planner.pipeline import PlanOptions, plan, priced_graphs
from planner.schedule.parallel import DataParallelOptions
from planner.target.detect import detect
from planner.verify import verify_plan

MLP = "zoo:mlp?batch=8&hidden=16&in_features=8&classes=4"
OPTIONS = PlanOptions(data_parallel=DataParallelOptions(ranks=2, ranks_per_host=2))


@pytest.fixture(scope="module")
def setting():
    host = detect()
    graph = prepare(MLP, GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.1)))
    (step,) = priced_graphs(graph, host, OPTIONS)
    assert any(n.op in COLLECTIVE_OPS for n in step.nodes)
    from planner.costs.conv_layouts import profiled_signatures

    return host, graph, step, profiled_signatures(step)


def _entry(signature, seconds: float, threads: int) -> CostEntry:
    return CostEntry(signature=signature, cpu=tuple(
        CpuSample(threads=t, affinity="compact", seconds=seconds * (1 + 1 / t))
        for t in range(1, threads + 1)))


# per signature: missing, or (seconds, measured under a busy or a quiet load)
ENTRY = st.one_of(st.none(), st.tuples(st.floats(1e-7, 1e-2), st.booleans()))
STORE = st.fixed_dictionaries({
    "entries": st.lists(ENTRY, min_size=64, max_size=64),
    "corun": st.sampled_from(["never", "busy", "quiet", "stale"]),
    "now_busy": st.booleans()})


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(store=STORE)
def test_no_variants_in_a_data_parallel_plan_whatever_the_store(setting, store, tmp_path,
                                                                monkeypatch):
    from codegen.profiling import _uniform_plan

    host, graph, step, signatures = setting
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path)
    kept = [(s, e) for s, e in zip(signatures, store["entries"], strict=False) if e]
    table = CostTable(target="host", entries=tuple(
        _entry(s, seconds, host.cores) for s, (seconds, _) in kept))
    corun = {"never": {}, "busy": {"corun_load": BUSY + 1, "corun_fit": CORUN_FIT},
             "quiet": {"corun_load": 0.0, "corun_fit": CORUN_FIT},
             "stale": {"corun_load": 0.0, "corun_fit": CORUN_FIT - 1}}[store["corun"]]
    kept_store = HostCosts(table=table, loads={s.key: BUSY + 1 if busy else 0.0
                                               for s, (_, busy) in kept}, **corun)
    atomic_write(store_path(host), canonical_json(kept_store.model_dump(
        mode="json", exclude_none=True)))

    def measure(wanted, target, progress=None):  # the store's input: quiet times
        return CostTable(target="host", entries=tuple(_entry(s, 1e-5, target.cores)
                                                      for s in wanted))

    def fit(fit_graph, target, costs, progress=None):
        # what codegen.profiling.step_contention plans before it builds and runs
        _uniform_plan(fit_graph, target, costs, (1, target.cores), None)
        return {"contention": 0.1, "corun_slowdown": 1.5, "handoff_seconds": 3e-5}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        priced = host_table([step], host, measure,
                            load=BUSY + 1 if store["now_busy"] else 0.0, corun=fit)
        out = plan(graph, host, priced.table, OPTIONS)
    assert out.variants == ()
    assert verify_plan(out) == []


def test_a_graph_with_collectives_planned_as_one_process_gets_no_variants(setting):
    """The step graph of a data-parallel plan, planned with one-process options (as the
    contention fit planned it): no variants, and it verifies."""
    host, _, step, _ = setting
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = plan(step, host, None, PlanOptions())
    assert out.variants == () and verify_plan(out) == []
