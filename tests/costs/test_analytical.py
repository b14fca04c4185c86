"""The analytical model: roofline plus per-op scaling, and FLOPs from the op registry."""

import pytest

from planner.costs import CostModel, OpSignature, op_work
from planner.costs.analytical import DEFAULT_CURVE, ScalingCurve, Work, cpu_time, curve_for
from planner.target import preset

KNL = preset("knl-7250")


def conv(batch, channels, size, kernel=3):
    return OpSignature(op="Conv2D", shapes=((batch, channels, size, size),
                                            (channels, channels, kernel, kernel)),
                       dtypes=("float32", "float32"),
                       attrs={"strides": [1, 1], "pads": [kernel // 2] * 4,
                              "dilations": [1, 1], "groups": 1})


def best_threads(sig):
    return CostModel(KNL).best(sig, affinities=["compact"]).threads


def test_work_comes_from_the_op_registry():
    w = op_work(conv(2, 16, 8))
    assert w.flops == 2 * 2 * 16 * 8 * 8 * 16 * 3 * 3 and w.note == ""
    assert w.bytes == 4 * (2 * 16 * 64 * 2 + 16 * 16 * 9)


@pytest.mark.filterwarnings("ignore::planner.costs.MissingCostWarning")
def test_small_ops_stop_scaling_early_and_big_ones_use_the_machine():
    small, large = best_threads(conv(1, 16, 8)), best_threads(conv(32, 384, 17))
    assert small < 16 < 60 <= large


def test_memory_bound_ops_saturate_the_memory_bandwidth():
    relu = OpSignature(op="Relu", shapes=((1 << 24,),), dtypes=("float32",))
    curve = curve_for("Relu")
    t = {k: cpu_time(op_work(relu), k, KNL, curve) for k in (1, 8, 44, 68)}
    saturation = KNL.cpu.memory_bandwidth / KNL.cpu.core_bandwidth  # about 44 cores
    assert t[1] / t[8] == pytest.approx(8, rel=0.1)
    assert t[44] / t[68] < 1.05 < saturation / 8


def test_scaling_curve_terms():
    work = Work(flops=10**9, bytes=0)
    ideal = ScalingCurve(efficiency=1.0, serial_fraction=0.0, spawn_seconds=0, sync_seconds=0)
    t1, t4 = (cpu_time(work, k, KNL, ideal) for k in (1, 4))
    assert (t1 - 1e-6) / (t4 - 1e-6) == pytest.approx(4)
    serial = ideal.model_copy(update={"serial_fraction": 0.5})
    assert cpu_time(work, 68, KNL, serial) > 0.5 * (t1 - 1e-6)
    assert curve_for("NotAnOp") == DEFAULT_CURVE


def test_unknown_ops_get_bytes_only_work_with_a_note():
    w = op_work(OpSignature(op="Mystery", shapes=((10,),), dtypes=("float64",)))
    assert (w.flops, w.bytes) == (0, 160) and "Mystery" in w.note


def test_targets_without_a_cpu_cannot_time_cpu_work():
    with pytest.raises(ValueError, match="no CPU"):
        cpu_time(Work(1, 1), 1, preset("h100-80gb"), DEFAULT_CURVE)
