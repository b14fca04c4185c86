"""The schedule variants' thread choice (planner.memory.variants._fastest) against the rule it
states, checked count by count, and the scratch by thread count against kernel_scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.costs.signature import node_signature
from planner.ir.graph import Node
from planner.memory.scratch import kernel_scratch, scratch_by_threads
from planner.memory.variants import _fastest, core_counts
from planner.ops import get_op
from planner.ops.base import TensorType


def fastest_within(ranked: list[tuple[float, int]], k: int, scratch: dict[int, int],
                   budget: int) -> tuple[int, float]:
    # The rule, per count: the fastest thread count up to k whose scratch fits the area.
    fitting = [(s, t) for s, t in ranked if t <= k and scratch[t] <= budget]
    if fitting:
        s, t = fitting[0]
        return t, s
    return 1, next(s for s, t in ranked if t == 1)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40).flatmap(lambda cores: st.tuples(
    st.just(cores),
    st.lists(st.floats(1e-6, 1.0), min_size=cores, max_size=cores),
    st.lists(st.integers(0, 100), min_size=cores, max_size=cores),
    st.integers(0, 100))))
def test_one_pass_picks_what_each_count_picks(case):
    cores, seconds, scratch_at, budget = case
    ranked = sorted(zip(seconds, range(1, cores + 1), strict=True))
    scratch = dict(zip(range(1, cores + 1), scratch_at, strict=True))
    asked: list[int] = []

    def fits(t: int) -> bool:
        asked.append(t)
        return scratch[t] <= budget

    ks = core_counts(cores)[::-1]
    assert _fastest(ranked, ks, fits) == [fastest_within(ranked, k, scratch, budget)
                                          for k in ks]
    assert len(asked) == len(set(asked))  # each thread count's scratch is asked for once


def test_scratch_by_threads_is_kernel_scratch_measured_or_not():
    x, w = TensorType((2, 8, 6, 6)), TensorType((8, 8, 3, 3))
    node = Node(name="c", op="Conv2D", inputs=["x", "w"], outputs=["y"],
                attrs={"strides": [1, 1], "pads": [1, 1, 1, 1]})
    y = get_op("Conv2D").infer([x, w], get_op("Conv2D").normalize_attrs(node.attrs))
    sig = node_signature(node, [x, w])
    table = CostTable(target="t", entries=(CostEntry(signature=sig, cpu=(
        CpuSample(threads=2, affinity="compact", seconds=1e-4, scratch_bytes=5000),
        CpuSample(threads=2, affinity="spread", seconds=1e-4, scratch_bytes=7000),
        CpuSample(threads=3, affinity="compact", seconds=1e-4))),))
    for t in table, None:
        at = scratch_by_threads(node, [x, w], y, t)
        assert [at(k) for k in range(1, 6)] == [kernel_scratch(node, [x, w], y, k, t)
                                              for k in range(1, 6)]
    measured = scratch_by_threads(node, [x, w], y, table)
    assert measured(2) == 7000                     # the larger of the two affinities
    assert measured(3) == scratch_by_threads(node, [x, w], y, None)(3) > 7000  # no figure
    relu = Node(name="r", op="Relu", inputs=["x"], outputs=["z"])
    assert scratch_by_threads(relu, [x], [x], table)(4) == 0


def test_a_reorder_rule_by_thread_count_is_the_rule():
    # oneDNN primitives' rule (planner.ops.base.reorder_scratch): operands' padded bytes once,
    # plus 4 KiB per thread.
    from planner.ops.base import reorder_scratch

    ins, outs = [TensorType((2, 3, 8, 8)), TensorType((8, 3, 3, 3))], [TensorType((2, 8, 8, 8))]
    rule = reorder_scratch(2)
    at = rule.by_threads(ins, outs, {})
    assert [at(t) for t in range(1, 9)] == [rule(ins, outs, {}, t) for t in range(1, 9)]
    # float32 operands, channels (and the weight's outputs) padded to 16 but an image's 3:
    # image 2x3x8x8, weight 16x3x3x3, output 2x16x8x8
    padded = 4 * (2 * 3 * 8 * 8 + 16 * 3 * 3 * 3 + 2 * 16 * 8 * 8)
    assert [at(t) for t in (1, 2, 7)] == [2 * padded + 4096 * t for t in (1, 2, 7)]
