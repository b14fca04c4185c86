"""The tf32 policy in the cost model: a tf32 graph's float32 convolutions and GEMMs are priced
at the GPU's TF32 tensor-core peak where it has one (the analytical model, cuDNN's family
defaults) and keyed apart from float32 math in cost tables (` math=tf32`), so a table measured
under one math never prices the other; on a CPU and a GPU before sm_80 the graph is priced
exactly as float32, as the executors run it."""

from __future__ import annotations

import warnings

import pytest

from codegen.gpu_profiling import profile_plan
from codegen.profiling import signatures_graph
from planner.costs import CostModel, MissingCostWarning, OpSignature, graph_signatures
from planner.costs.analytical import GPU_LAUNCH_SECONDS, curve_for
from planner.costs.convalgo import EFFICIENCY
from planner.costs.records import (
    ConvAlgoSample,
    CostEntry,
    CostTable,
    CpuSample,
    load_table,
    save_table,
)
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan as make_plan
from planner.schedule.streams import compute_steps
from planner.target import preset
from planner.zoo import build as zoo

H100 = preset("h100-80gb")
N, C, HW, M = 64, 256, 28, 2048
CONV = OpSignature(op="Conv2D", shapes=((N, C, HW, HW), (C, C, 3, 3)),
                   dtypes=("float32", "float32"),
                   attrs={"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1],
                          "groups": 1})
GEMM = OpSignature(op="MatMul", shapes=((M, M), (M, M)), dtypes=("float32", "float32"),
                   attrs={"transpose_a": False, "transpose_b": False})
RELU = OpSignature(op="Relu", shapes=((N, C),), dtypes=("float32",))


def graph(math: str | None):
    """A convolution, a GEMM and a ReLU (codegen.profiling's graph of signatures), float32
    tensors, under `math`."""
    g = signatures_graph([(CONV, 1), (GEMM, 1), (RELU, 1)])
    return g.model_copy(update={"math": math})


def steps(math: str | None, target=H100, table: CostTable | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingCostWarning)
        return compute_steps(graph(math), CostModel(target, table))


def seconds(s, node: str) -> float:
    return float(s.seconds[s.index[node]])


def test_tf32_gemm_and_conv_use_the_tf32_peak_on_h100():
    gpu = H100.gpus[0]
    tf32, fp32 = gpu.math_peak_flops["tf32"], gpu.peak_flops
    assert tf32 > 7 * fp32      # the datasheet's dense TF32 against FP32 on the CUDA cores
    sigs = graph_signatures(graph("tf32"), gpu)
    assert [s.math_mode for s in sigs.values()] == ["tf32", "tf32", None]
    assert sigs["s1_copy0"].key == GEMM.key + " math=tf32"
    # the GEMM: launch + its 2 M^3 FLOPs at the TF32 peak (compute-bound: its bytes take less)
    flops, nbytes = 2 * M**3, 3 * M * M * 4
    eff = curve_for("MatMul").efficiency
    assert flops / (tf32 * eff) > nbytes / gpu.memory_bandwidth
    hand = GPU_LAUNCH_SECONDS + flops / (tf32 * eff)
    assert seconds(steps("tf32"), "s1_copy0") == pytest.approx(hand, rel=1e-12)
    assert seconds(steps(None), "s1_copy0") == pytest.approx(
        GPU_LAUNCH_SECONDS + flops / (fp32 * eff), rel=1e-12)
    # the convolution: cuDNN's GEMM families at the TF32 peak, Winograd at FP32's
    conv_flops = 2 * N * C * C * 9 * HW * HW
    algos = {m: {a.algorithm: a.seconds for a in steps(m).algos[steps(m).index["s0_copy0"]]}
             for m in ("tf32", None)}
    for family in ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM"):
        assert algos["tf32"][family] == pytest.approx(
            GPU_LAUNCH_SECONDS + conv_flops / (tf32 * EFFICIENCY[family]), rel=1e-12)
        assert algos[None][family] == pytest.approx(
            GPU_LAUNCH_SECONDS + conv_flops / (fp32 * EFFICIENCY[family]), rel=1e-12)
    assert algos["tf32"]["WINOGRAD"] == algos[None]["WINOGRAD"]
    # the ReLU is memory-bound float32 work under either math
    assert seconds(steps("tf32"), "s2_copy0") == seconds(steps(None), "s2_copy0")


@pytest.mark.parametrize("target", ["v100-16gb", "k40c-12gb"])
def test_a_gpu_without_tf32_prices_a_tf32_graph_as_float32(target):
    gpu = preset(target).gpus[0]
    assert not gpu.has_tf32 and preset("a100-80gb").gpus[0].has_tf32
    assert all(s.math_mode is None for s in graph_signatures(graph("tf32"), gpu).values())
    a, b = steps("tf32", preset(target)), steps(None, preset(target))
    assert list(a.seconds) == list(b.seconds) and a.algos == b.algos


def test_a_float32_graphs_signatures_and_table_json_are_as_before(tmp_path):
    sigs = graph_signatures(graph(None), H100.gpus[0])
    assert all(s.math_mode is None and "math" not in s.key for s in sigs.values())
    table = CostTable(target="h100-80gb", entries=(CostEntry(signature=GEMM, gpu_seconds=1e-3),))
    text = table.to_json()
    assert "math" not in text
    # a table written before the field existed loads to the same record and bytes
    save_table(table, tmp_path / "t.json")
    assert load_table(tmp_path / "t.json") == table
    assert (tmp_path / "t.json").read_text() == text
    tf32 = GEMM.model_copy(update={"math_mode": "tf32"})
    both = CostTable(target="h100-80gb", entries=(CostEntry(signature=GEMM, gpu_seconds=1e-3),
                                                   CostEntry(signature=tf32, gpu_seconds=2e-4)))
    assert '"math_mode":"tf32"' in both.to_json()
    assert CostTable.from_json(both.to_json()) == both and len(both) == 2


def test_math_mode_is_refused_where_no_kernel_has_it():
    with pytest.raises(ValueError, match="math_mode 'tf32' is for float32 convolutions"):
        OpSignature(op="Relu", shapes=((8,),), dtypes=("float32",), math_mode="tf32")
    with pytest.raises(ValueError, match="math_mode"):
        OpSignature(op="MatMul", shapes=((2, 2), (2, 2)), dtypes=("bfloat16", "bfloat16"),
                    attrs={"transpose_a": False, "transpose_b": False}, math_mode="tf32")


def test_a_table_measured_under_one_math_never_prices_the_other():
    tf32_gemm = GEMM.model_copy(update={"math_mode": "tf32"})
    tf32_conv = CONV.model_copy(update={"math_mode": "tf32"})
    measured_gemm, measured_conv = 1.25e-3, 7.5e-3

    def table(gemm, conv):
        return CostTable(target="h100-80gb", entries=(
            CostEntry(signature=gemm, gpu_seconds=measured_gemm),
            CostEntry(signature=conv, gpu_algorithms=(ConvAlgoSample(
                algorithm="IMPLICIT_GEMM", seconds=measured_conv, workspace_bytes=0),))))

    analytical = {m: steps(m) for m in ("tf32", None)}
    for measured_math, tab in (("tf32", table(tf32_gemm, tf32_conv)), (None, table(GEMM, CONV))):
        for math in ("tf32", None):
            s = steps(math, table=tab)
            conv_algos = s.algos[s.index["s0_copy0"]]
            if math == measured_math:
                assert seconds(s, "s1_copy0") == measured_gemm
                assert [(a.algorithm, a.seconds, a.source) for a in conv_algos] == [
                    ("IMPLICIT_GEMM", measured_conv, "measured")]
            else:   # the other math's entries are not this plan's: the model answers
                assert seconds(s, "s1_copy0") == seconds(analytical[math], "s1_copy0")
                assert conv_algos == analytical[math].algos[s.index["s0_copy0"]]
                assert all(a.source == "default" for a in conv_algos)


def test_a_tf32_graph_on_a_cpu_is_planned_exactly_as_float32():
    net = zoo("mlp", batch=4, hidden=[8], in_features=6, classes=3)
    fp32, tf32 = (make_training_graph(net, Optimizer(kind="sgd"), precision=p)
                  for p in ("fp32", "tf32"))
    xeon = preset("xeon-8180")
    sigs = graph_signatures(fp32)
    # a measured CPU table of the float32 graph prices the tf32 graph's every op too
    unique = {s.key: s for s in sigs.values()}.values()
    table = CostTable(target=xeon.name, entries=tuple(
        CostEntry(signature=s, cpu=(CpuSample(threads=1, affinity="compact", seconds=i * 1e-5),
                                    CpuSample(threads=4, affinity="compact", seconds=i * 4e-6)))
        for i, s in enumerate(unique, 1)))
    assert graph_signatures(tf32) == sigs
    for costs in (None, table):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingCostWarning)
            a, b = make_plan(tf32, xeon, costs), make_plan(fp32, xeon, costs)
        assert a.ops == b.ops and a.summary == b.summary and a.graph.math == "tf32"
    assert a.summary.analytical_signatures == 0


def test_a_profiling_batch_runs_in_its_signatures_math():
    tf32_conv = CONV.model_copy(update={"math_mode": "tf32"})
    small = [s.model_copy(update={"shapes": ((1, 2, 4, 4), (2, 2, 3, 3))}) for s in
             (CONV, tf32_conv)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingCostWarning)
        assert profile_plan([small[1], RELU], H100).graph.math == "tf32"
        assert profile_plan([small[0], RELU], H100).graph.math is None
    with pytest.raises(ValueError, match="TF32 and float32-math"):
        profile_plan(small, H100)
