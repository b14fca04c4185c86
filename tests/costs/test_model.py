"""The cost model: interpolation between samples, fallback to the analytical model, GPU picks."""

import warnings

import pytest

from planner.costs import (
    ConvAlgoSample,
    CostEntry,
    CostModel,
    CostTable,
    CpuSample,
    LaunchSample,
    MissingCostWarning,
    OpSignature,
    interpolate,
)
from planner.target import preset

KNL = preset("knl-7250")
RELU = OpSignature(op="Relu", shapes=((1 << 16,),), dtypes=("float32",))
CONV = OpSignature(op="Conv2D", shapes=((8, 64, 16, 16), (64, 64, 3, 3)),
                   dtypes=("float32", "float32"),
                   attrs={"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1],
                          "groups": 1})


def points(*pairs, affinity="compact"):
    return tuple(CpuSample(threads=k, affinity=affinity, seconds=t) for k, t in pairs)


def knl_table(*entries):
    return CostTable(target="knl-7250", entries=entries)


@pytest.mark.parametrize("threads, expected", [
    (1, (8.0, "measured")),
    (3, (6.0, "interpolated")),
    (7, (4.5, "interpolated")),
    (13, (6.0, "extrapolated")),  # continues 5 -> 9 (the fastest through the last)
])
def test_interpolation_is_piecewise_linear_in_threads(threads, expected):
    assert interpolate([(1, 8.0), (5, 4.0), (9, 5.0)], threads) == expected


def test_below_the_first_sample_scales_perfectly_and_past_a_fall_stays_flat():
    assert interpolate([(4, 2.0), (8, 1.0)], 2) == (4.0, "extrapolated")
    assert interpolate([(4, 2.0), (8, 1.0)], 16) == (1.0, "extrapolated")
    assert interpolate([(4, 2.0)], 16) == (2.0, "extrapolated")


def test_extrapolation_uses_the_fastest_sample_not_just_the_last_segment():
    # A noisy dip at 9 then a rise: the slope comes from 9 -> 17, not 13 -> 17.
    pts = [(1, 10.0), (5, 3.0), (9, 2.0), (13, 2.05), (17, 2.4)]
    assert interpolate(pts, 21)[0] == pytest.approx(2.4 + 0.05 * 4)


def test_inverse_interpolation_is_exact_for_amdahl_curves():
    curve = {k: 0.2 + 0.8 / k for k in range(1, 17)}
    pts = [(k, curve[k]) for k in (1, 5, 9, 13)]
    for k in range(1, 14):
        assert interpolate(pts, k, "inverse")[0] == pytest.approx(curve[k])
    assert interpolate(pts, 2)[0] > curve[2] * 1.3  # the seed's straight line overshoots


def test_interpolation_rejects_unsorted_or_empty_samples():
    with pytest.raises(ValueError, match="ascending"):
        interpolate([(5, 1.0), (1, 2.0)], 3)
    with pytest.raises(ValueError, match="no samples"):
        interpolate([], 3)
    with pytest.raises(ValueError, match="linear"):
        interpolate([(1, 1.0)], 1, "cubic")


def test_measured_signature_is_interpolated_and_says_so():
    model = CostModel(KNL, knl_table(CostEntry(signature=RELU, cpu=points((1, 8.0), (5, 4.0)))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = model.time(RELU, 3, "compact")
    assert (p.seconds, p.source, p.threads, p.affinity, p.note) == (
        6.0, "interpolated", 3, "compact", "")


def test_missing_affinity_borrows_the_other_with_a_note():
    model = CostModel(KNL, knl_table(CostEntry(signature=RELU, cpu=points((1, 8.0), (5, 4.0)))))
    p = model.time(RELU, 5, "spread")
    assert p.seconds == 4.0 and p.source == "measured" and "compact used" in p.note


def test_unknown_signature_falls_back_with_a_warning_never_an_exception():
    model = CostModel(KNL, knl_table())
    with pytest.warns(MissingCostWarning, match="Conv2D.*analytical"):
        p = model.time(CONV, 8)
    assert p.source == "analytical" and p.seconds > 0
    for weird in (OpSignature(op="NoSuchOp", shapes=((4, 4),), dtypes=("float32",)),
                  OpSignature(op="Conv2D", shapes=((1, 2),), dtypes=("float32",))):
        with pytest.warns(MissingCostWarning):
            p = model.time(weird, 4)
        assert p.source == "analytical" and p.seconds > 0 and weird.op in p.note


def test_model_without_a_table_is_purely_analytical():
    with pytest.warns(MissingCostWarning):
        assert CostModel(KNL).time(CONV, 1).source == "analytical"


def test_best_finds_the_fastest_thread_count_and_affinity():
    entry = CostEntry(signature=RELU, cpu=points((1, 8.0), (5, 2.0), (9, 3.0))
                      + points((1, 8.0), (5, 1.5), (9, 2.5), affinity="spread"))
    best = CostModel(KNL, knl_table(entry)).best(RELU)
    assert (best.threads, best.affinity, best.seconds) == (5, "spread", 1.5)
    assert CostModel(KNL, knl_table(entry)).best(RELU, affinities=["compact"]).seconds == 2.0


def test_thread_counts_outside_the_target_and_foreign_tables_are_errors():
    model = CostModel(KNL)
    with pytest.raises(ValueError, match="1..68"):
        model.time(RELU, 69)
    with pytest.raises(ValueError, match="affinity"):
        model.time(RELU, 2, "scatter")
    with pytest.raises(ValueError, match="measured on 'host'"):
        CostModel(KNL, CostTable(target="host"))


def test_gpu_picks_the_fastest_algorithm_that_fits_the_workspace():
    p100 = preset("p100-16gb")
    entry = CostEntry(signature=CONV, gpu_algorithms=(
        ConvAlgoSample(algorithm="FFT", seconds=1e-4, workspace_bytes=64 << 20),
        ConvAlgoSample(algorithm="WINOGRAD", seconds=2e-4, workspace_bytes=1 << 20),
        ConvAlgoSample(algorithm="IMPLICIT_GEMM", seconds=5e-4, workspace_bytes=0)))
    model = CostModel(p100, CostTable(target="p100-16gb", entries=(entry,)))
    assert model.gpu_time(CONV).algorithm == "FFT"
    assert model.gpu_time(CONV, workspace_limit=2 << 20).algorithm == "WINOGRAD"
    assert model.gpu_time(CONV, workspace_limit=0).workspace_bytes == 0
    with pytest.raises(ValueError, match="no GPU 1"):
        model.gpu_time(CONV, gpu=1)


def test_gpu_launch_configurations_and_analytical_fallback():
    h100 = preset("h100-80gb")
    entry = CostEntry(signature=RELU, gpu_launches=(
        LaunchSample(threads_per_block=1024, blocks=132, seconds=3e-6),
        LaunchSample(threads_per_block=256, blocks=264, seconds=2e-6)))
    model = CostModel(h100, CostTable(target="h100-80gb", entries=(entry,)))
    p = model.gpu_time(RELU)
    assert (p.threads_per_block, p.blocks, p.source) == (256, 264, "measured")
    with pytest.warns(MissingCostWarning):
        q = model.gpu_time(CONV)
    assert q.source == "analytical" and q.seconds > 5e-6
