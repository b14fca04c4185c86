"""The op-table fields that stand for op-name comparisons elsewhere (issue 87) are coherent
with the rest of each definition: what a recompute reads, the running statistics, the
evaluation identity and a collective's ring traffic."""

from __future__ import annotations

import numpy as np

from planner.ops import REGISTRY, TensorType, get_op
from planner.ops.collective import COLLECTIVE_OPS


def test_recompute_reads_name_operands_of_a_recomputed_op():
    for name, op in REGISTRY.items():
        if op.recompute_reads is None:
            continue
        assert op.recompute == "cheap", name  # else never recomputed: the field says nothing
        assert all(side in ("in", "out") and k >= 0 for side, k in op.recompute_reads), name
        # every input the recompute skips is one no gradient reaches (state it overwrote)
        skipped = {k for k in range(max(k for s, k in op.recompute_reads if s == "in"))
                   if not op.recompute_reads_input(k)}
        assert skipped <= set(op.nondiff_inputs), name


def test_running_statistics_are_state_inputs_and_their_new_values():
    for name, op in REGISTRY.items():
        for out, inp in op.running_statistics:
            assert inp in op.nondiff_inputs and out > 0, name
            assert "training" in op.attrs, name  # what an evaluation graph turns off


def test_a_recompute_reads_none_of_the_state_its_first_run_overwrote():
    """An op with running statistics updates inputs j in place: its recompute (after that
    update) must read none of them. BatchNorm's reads its saved statistics instead, and its
    first run's y comes out again from them, the running ones overwritten (NaN here)."""
    for name, op in REGISTRY.items():
        if op.running_statistics:
            ins, outs = [f"in{k}" for k in range(6)], [f"out{k}" for k in range(5)]
            stale = {ins[j] for _, j in op.running_statistics}
            assert op.recompute_reads is not None, name
            assert not stale & set(op.recompute_operands(ins[:5], outs)), name
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    g, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    bn = get_op("BatchNorm")
    attrs = bn.normalize_attrs({"training": True})
    first = bn.reference([x, g, b, np.zeros(3, np.float32), np.ones(3, np.float32)], attrs)
    values = {"x": x, "g": g, "b": b, "rm": np.full(3, np.nan, np.float32),
              "rv": np.full(3, np.nan, np.float32)}
    values |= dict(zip(["y", "rm2", "rv2", "mean", "invstd"], first, strict=True))
    reads = bn.recompute_operands(["x", "g", "b", "rm", "rv"],
                                  ["y", "rm2", "rv2", "mean", "invstd"])
    assert reads == ("x", "g", "b", "mean", "invstd")
    np.testing.assert_array_equal(bn.reference([values[r] for r in reads], attrs)[0], first[0])


def test_every_collective_has_its_ring_traffic():
    assert {n for n, op in REGISTRY.items() if op.ring_traffic is not None} == COLLECTIVE_OPS
    for name in COLLECTIVE_OPS:
        moves, passes = get_op(name).ring_traffic
        assert moves in ("inputs", "outputs", "param outputs", "one float") and passes in (1, 2)


def test_the_evaluation_identity_passes_its_input_shape_on():
    for name, op in REGISTRY.items():
        if op.evaluation_identity:
            x = TensorType((3, 5))
            assert op.infer([x], op.normalize_attrs({}))[0] == x, name
