"""Pricing done once per plan: a graph's signatures built once while it lives, the analytical
curves of many signatures priced in one array expression with the floats of one at a time."""

import gc
import math

import pytest

from planner.costs import CostModel, graph_signatures, op_work
from planner.costs import signature as signatures_module
from planner.costs.analytical import CALL_SECONDS, cpu_times_of, curve_for
from planner.target import preset
from planner.zoo import build

KNL = preset("knl-7250")


def scalar_time(work, k, curve):
    """The module's formula for one thread count, in Python floats, in its order of operations
    (an independent reference: no numpy)."""
    cpu = KNL.cpu
    core_flops = cpu.peak_flops_for(work.math) / KNL.cores * curve.efficiency

    def roofline(k):
        return max(work.flops / (k * core_flops),
                   work.bytes / min(cpu.memory_bandwidth, k * cpu.core_bandwidth))

    s = curve.serial_fraction
    return (CALL_SECONDS + s * roofline(1.0) + (1 - s) * roofline(float(k))
            + curve.spawn_seconds * (k - 1) + curve.sync_seconds * math.ceil(math.log2(k)))


def test_many_curves_at_once_are_the_floats_of_the_formula():
    g = build("inception_v3", batch=2)
    sigs = list({s.key: s for s in graph_signatures(g).values()}.values())
    works, curves = [op_work(s) for s in sigs], [curve_for(s.op) for s in sigs]
    rows = cpu_times_of(works, curves, KNL.cores, KNL)
    assert rows.shape == (len(sigs), KNL.cores)
    for work, curve, row in zip(works, curves, rows, strict=True):
        assert row.tolist() == [scalar_time(work, k, curve) for k in range(1, KNL.cores + 1)]


@pytest.mark.filterwarnings("ignore::planner.costs.MissingCostWarning")
def test_the_model_prices_each_key_once_and_answers_as_one_at_a_time():
    g = build("mlp", batch=4, hidden=[8, 8], in_features=3, classes=2)
    sigs = list(graph_signatures(g).values())
    together = CostModel(KNL).analytical_curves(sigs)
    alone = CostModel(KNL)
    for sig, curve in zip(sigs, together, strict=True):
        assert curve.tolist() == alone.analytical_curve(sig).tolist()
        assert curve.tolist() == [alone.time(sig, k).seconds for k in range(1, KNL.cores + 1)]


def test_a_graphs_signatures_are_built_once_while_it_lives(monkeypatch):
    g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    built = []
    real = signatures_module._build_signatures
    monkeypatch.setattr(signatures_module, "_build_signatures",
                        lambda graph, math: built.append(math) or real(graph, math))
    first, again = graph_signatures(g), graph_signatures(g)
    assert built == [None] and first == again and first is not again
    # Each caller's dict is its own: changing one changes no later answer.
    first.clear()
    assert graph_signatures(g) == again
    # A copy of the graph is another graph: built for it.
    graph_signatures(g.model_copy())
    assert built == [None, None]
    # The graph gone, so is its entry.
    key = id(g)
    assert key in signatures_module._BUILT
    del g
    gc.collect()
    assert key not in signatures_module._BUILT
