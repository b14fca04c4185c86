"""The cost model per precision: a bfloat16/float16 convolution or GEMM is priced at its math
type's peak (tensor cores, AMX), everything else as before but for its bytes."""

import warnings
from pathlib import Path

import pytest

from planner.costs import OpSignature, op_work
from planner.costs.analytical import CALL_SECONDS, GPU_LAUNCH_SECONDS, cpu_time, curve_for, gpu_time
from planner.costs.convalgo import default_algorithms
from planner.target import preset
from planner.target.detect import cpu_math_peaks, parse_nvidia_smi
from planner.target.records import Target

H100 = preset("h100-80gb")
CONV_ATTRS = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1}


def conv(dtype, batch=64, channels=256, size=28):
    return OpSignature(op="Conv2D", shapes=((batch, channels, size, size),
                                            (channels, channels, 3, 3)),
                       dtypes=(dtype, dtype), attrs=CONV_ATTRS)


def matmul(dtype, m=4096, k=4096, n=4096):
    return OpSignature(op="MatMul", shapes=((m, k), (k, n)), dtypes=(dtype, dtype),
                       attrs={"transpose_a": False, "transpose_b": False})


def test_only_low_type_convs_and_gemms_compute_in_the_low_type():
    assert conv("bfloat16").math == "bfloat16" and matmul("float16").math == "float16"
    assert conv("float32").math == "float32"
    assert OpSignature(op="Relu", shapes=((8,),), dtypes=("bfloat16",)).math == "float32"
    # mixed operands: no low-type kernel reads them (the policy casts both)
    assert OpSignature(op="MatMul", shapes=((2, 2), (2, 2)), dtypes=("bfloat16", "float32"),
                       attrs={"transpose_a": False, "transpose_b": False}).math == "float32"


@pytest.mark.parametrize("sig", [conv, matmul], ids=["conv", "matmul"])
def test_gpu_compute_bound_low_type_is_faster_by_the_ratio_of_the_peaks(sig):
    gpu = H100.gpus[0]
    curve = curve_for(sig("float32").op)
    times = {}
    for dtype in ("float32", "bfloat16", "float16"):
        w = op_work(sig(dtype))
        peak = gpu.peak_flops if dtype == "float32" else 989e12  # the datasheet, by hand
        hand = GPU_LAUNCH_SECONDS + max(w.flops / (peak * curve.efficiency),
                                        w.bytes / gpu.memory_bandwidth)
        times[dtype] = gpu_time(w, gpu, curve)
        assert times[dtype] == pytest.approx(hand, rel=1e-12)
        assert w.flops / (peak * curve.efficiency) > w.bytes / gpu.memory_bandwidth
    ratio = (times["float32"] - GPU_LAUNCH_SECONDS) / (times["bfloat16"] - GPU_LAUNCH_SECONDS)
    assert ratio == pytest.approx(989e12 / gpu.peak_flops, rel=1e-12)   # about 14.8
    assert times["float16"] == times["bfloat16"]


def test_cpu_compute_bound_bf16_gemm_uses_the_cpus_bf16_peak():
    xeon = preset("xeon-8180")
    amx = xeon.model_copy(update={"cpu": xeon.cpu.model_copy(
        update={"math_peak_flops": {"bfloat16": 16 * xeon.cpu.peak_flops}})})
    curve = curve_for("MatMul")
    w32, w16 = op_work(matmul("float32")), op_work(matmul("bfloat16"))
    assert w16.flops == w32.flops == 2 * 4096**3
    for k in (1, 28):
        assert cpu_time(w32, k, amx, curve) == cpu_time(w32, k, xeon, curve)  # float32 work
        # the roofline by hand: compute-bound at both types, the fixed costs alike
        t32, t16 = cpu_time(w32, k, amx, curve), cpu_time(w16, k, amx, curve)
        fixed = CALL_SECONDS + curve.spawn_seconds * (k - 1) + curve.sync_seconds * (
            (k - 1).bit_length())
        s = curve.serial_fraction
        core = xeon.cpu.peak_flops / xeon.cores * curve.efficiency
        hand32 = fixed + s * w32.flops / core + (1 - s) * w32.flops / (k * core)
        assert t32 == pytest.approx(hand32, rel=1e-12)
        assert (t32 - fixed) / (t16 - fixed) == pytest.approx(16, rel=1e-12)
    # without a bf16 peak (oneDNN converts to float32): float32's rate
    assert cpu_time(w16, 4, xeon, curve) == pytest.approx(cpu_time(w32, 4, xeon, curve))


def test_memory_bound_ops_change_only_by_their_bytes():
    gpu = H100.gpus[0]
    curve = curve_for("Relu")
    relu = {d: op_work(OpSignature(op="Relu", shapes=((1 << 24,),), dtypes=(d,)))
            for d in ("float32", "bfloat16")}
    assert relu["bfloat16"].bytes * 2 == relu["float32"].bytes
    assert relu["bfloat16"].math == "float32"
    hand = GPU_LAUNCH_SECONDS + relu["bfloat16"].bytes / gpu.memory_bandwidth
    assert gpu_time(relu["bfloat16"], gpu, curve) == pytest.approx(hand, rel=1e-12)


def test_cudnn_tensor_core_family_is_the_nhwc_one_and_the_rest_float32s_rate():
    gpu = H100.gpus[0]
    algos = {d: {a.algorithm: a for a in default_algorithms(conv(d), gpu)}
             for d in ("float32", "bfloat16")}
    precomp = algos["bfloat16"]["IMPLICIT_PRECOMP_GEMM"]
    hand = GPU_LAUNCH_SECONDS + op_work(conv("bfloat16")).flops / (989e12 * 0.12)  # compute-bound
    assert precomp.seconds == pytest.approx(hand, rel=1e-12)
    assert algos["bfloat16"]["IMPLICIT_GEMM"].seconds == algos["float32"]["IMPLICIT_GEMM"].seconds
    assert {"WINOGRAD", "FFT"} <= set(algos["float32"]) and not {"WINOGRAD", "FFT"} & set(
        algos["bfloat16"])
    assert min(algos["bfloat16"].values(), key=lambda a: a.seconds) is precomp
    assert precomp.seconds < 0.5 * algos["float32"]["IMPLICIT_PRECOMP_GEMM"].seconds


H200_BF16_TABLE = (Path(__file__).resolve().parents[2] / "bench" / "results"
                   / "2026-11-27-h200-resnet50-bf16.gpu.costs.json")


def test_low_type_workspaces_bound_what_cudnn_asked_on_an_h200():
    """The modelled families of a bfloat16 convolution are ones cuDNN offers, the fastest the one
    cuDNN ran fastest, each with at least the workspace cuDNN asked for it (ResNet-50's 68
    convolution signatures, every direction, measured by `bench/bench_gpu_profile.py
    --precision bf16-mixed` on an H200): a plan from the model leaves no convolution a block of
    its own outside the arena (the H200's window_checks found 1.1 GB of those when it modelled
    float32's workspaces)."""
    from planner.costs.records import load_table

    gpu = preset("h200-141gb").gpus[0]
    table = load_table(H200_BF16_TABLE)
    convs = [e for e in table.entries if e.gpu_algorithms]
    assert len(convs) == 68 and {e.signature.dtypes[0] for e in convs} == {"bfloat16"}
    tight = 0
    for e in convs:
        measured = {a.algorithm: a.workspace_bytes for a in e.gpu_algorithms}
        modelled = default_algorithms(e.signature, gpu)
        fastest = min(e.gpu_algorithms, key=lambda a: a.seconds).algorithm
        assert min(modelled, key=lambda a: a.seconds).algorithm == fastest, e.signature.key
        for a in modelled:
            assert a.algorithm in measured, (e.signature.key, a.algorithm, sorted(measured))
            assert a.workspace_bytes >= measured[a.algorithm], (e.signature.key, a.algorithm)
            tight += a.workspace_bytes <= 1.25 * measured[a.algorithm] + 2**20
    assert tight >= 0.75 * sum(len(default_algorithms(e.signature, gpu)) for e in convs)


def test_presets_carry_dense_tensor_core_rates_and_round_trip():
    rates = {name: preset(name).gpus[0].math_peak_flops for name in
             ("v100-16gb", "a100-80gb", "l4-24gb", "h100-80gb", "h200-141gb", "k40c-12gb")}
    # TF32 from sm_80 on (A100, L4, H100, H200), none on the V100 (sm_70).
    assert rates == {"v100-16gb": {"float16": 125e12},
                     "a100-80gb": {"bfloat16": 312e12, "float16": 312e12, "tf32": 156e12},
                     "l4-24gb": {"bfloat16": 121e12, "float16": 121e12, "tf32": 60e12},
                     "h100-80gb": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494.7e12},
                     "h200-141gb": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494.7e12},
                     "k40c-12gb": None}
    assert Target.from_json(H100.to_json()) == H100
    assert '"math_peak_flops":{"bfloat16":989000000000000.0' in H100.to_json()


@pytest.mark.parametrize("name", ["knl-7250", "xeon-8180", "k40c-12gb", "p100-16gb"])
def test_targets_without_low_type_peaks_serialize_as_before(name):
    text = preset(name).to_json()
    assert "math_peak_flops" not in text
    assert Target.from_json(text).to_json() == text


def test_detection_reads_the_rates_from_capability_and_isa_flags():
    gpus, _ = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, 81559, 1830, 5, 16", 1 << 36,
                               compute_caps={0: "9.0"})
    assert gpus[0].peak_flops_for("bfloat16") == pytest.approx(989.4e12, rel=1e-3)
    assert gpus[0].peak_flops_for("tf32") == pytest.approx(494.7e12, rel=1e-3)
    gpus, _ = parse_nvidia_smi("0, TITAN Xp, 12196, 1582, 3, 16", 1 << 36,
                               compute_caps={0: "6.1"})
    assert gpus[0].math_peak_flops is None
    avx512 = frozenset({"avx512f", "fma"})
    # Sapphire Rapids-like: AMX's 1024 bf16 FLOP/cycle against AVX-512's 64 fp32
    assert cpu_math_peaks(8, 2000, avx512 | {"amx_bf16", "avx512_bf16"},
                          1e12) == {"bfloat16": 16e12}
    assert cpu_math_peaks(8, 2000, avx512 | {"avx512_bf16"}, 1e12) == {"bfloat16": 2e12}
    assert cpu_math_peaks(8, 2000, avx512, 1e12) is None


def test_a_bf16_mixed_resnet_step_is_predicted_shorter_than_fp32_as_measured():
    """ResNet-18 b64 at 224 px on an H200, the model's plans run (bench/device/window_checks.py,
    bench/results/2026-11-27-gpu-h200.md): bf16-mixed 24.3 ms against float32's 33.9, 0.72x."""
    from planner.frontend.autodiff import make_training_graph
    from planner.graph.optimizer import Optimizer
    from planner.pipeline import plan
    from planner.zoo import build

    forward = build("resnet", depth=18, batch=64, image=224, classes=10)
    step = {}
    for precision in ("fp32", "bf16-mixed"):
        graph = make_training_graph(forward, Optimizer(kind="sgd"), precision=precision)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step[precision] = plan(graph, preset("h200-141gb")).summary.step_seconds
    assert 0.6 < step["bf16-mixed"] / step["fp32"] < 0.85


def test_target_show_prints_the_low_type_peaks(capsys, tmp_path):
    import argparse

    from planner.cli.target import add_target_commands

    def show(spec):
        parser = argparse.ArgumentParser(prog="planner")
        add_target_commands(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["target", "show", spec])
        assert args.run(args) == 0
        return capsys.readouterr().out

    assert ("GPU 0 peaks   bfloat16 989.0, float16 989.0, tf32 494.7 TFLOP/s"
            in show("h100-80gb"))
    assert "peaks" not in show("k40c-12gb")
    xeon = preset("xeon-8180")
    path = tmp_path / "amx.json"
    path.write_text(xeon.model_copy(update={"cpu": xeon.cpu.model_copy(
        update={"math_peak_flops": {"bfloat16": 4e13}})}).to_json())
    assert "peak bfloat16 40,000.0 GFLOP/s" in show(str(path))


def test_a_ranks_share_of_the_cpu_keeps_the_ratio_of_its_peaks():
    from planner.schedule.ranks import share_target

    xeon = preset("xeon-8180")
    amx = xeon.model_copy(update={"cpu": xeon.cpu.model_copy(
        update={"math_peak_flops": {"bfloat16": 16 * xeon.cpu.peak_flops}})})
    half = share_target(amx, 2).cpu
    assert half.peak_flops_for("bfloat16") == pytest.approx(16 * half.peak_flops, rel=1e-12)
    assert half.peak_flops == pytest.approx(xeon.cpu.peak_flops * 13 / 28, rel=1e-12)
    assert "math_peak_flops" not in share_target(xeon, 2).to_json()


def test_low_type_gradients_never_get_an_atomic_add_algorithm():
    """cuDNN's BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0 / ALGO_3 add partial sums atomically into
    the output: in bfloat16 each add rounds again (bench/device/op_drift.py measured filter
    gradients 79x outside the one-rounding bound on an H200). A low-type gradient's candidates
    leave them out, measured or modelled; float32 keeps them; a bf16-mixed plan for the GPU
    gives no gradient one."""
    from planner.costs import graph_signatures
    from planner.costs.convalgo import ATOMIC_GRADIENT_FAMILIES, conv_algorithms
    from planner.costs.records import ConvAlgoSample, CostEntry, CostTable
    from planner.frontend.autodiff import make_training_graph
    from planner.graph.optimizer import Optimizer
    from planner.pipeline import plan
    from planner.zoo import build

    forward = build("resnet", depth=18, batch=8, image=32, classes=10)
    every = {"IMPLICIT_GEMM", "ALGO_3", "IMPLICIT_PRECOMP_GEMM"}
    for precision, low in (("fp32", False), ("bf16-mixed", True), ("fp16-mixed", True)):
        graph = make_training_graph(forward, Optimizer(kind="sgd"), precision=precision)
        grads = list({s.key: s for s in graph_signatures(graph).values()
                      if s.op in ("Conv2DBackpropFilter", "Conv2DBackpropInput")}.values())
        assert {s.op for s in grads} == {"Conv2DBackpropFilter", "Conv2DBackpropInput"}
        for sig in grads:
            tables = [None]
            for families in (every, every - {"IMPLICIT_PRECOMP_GEMM"}):  # the latter: all atomic
                samples = tuple(ConvAlgoSample(algorithm=a, seconds=1e-5 * (i + 1),
                                               workspace_bytes=0)
                                for i, a in enumerate(sorted(families)))
                tables.append(CostTable(target="gpu", entries=(
                    CostEntry(signature=sig, gpu_algorithms=samples),)))
            for table in tables:
                names = {a.algorithm for a in conv_algorithms(sig, H100.gpus[0], table)}
                atomic = names & ATOMIC_GRADIENT_FAMILIES[sig.op]
                assert names and bool(atomic) != low, (sig.key, table is None, names)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = plan(graph, H100)
        ops = {n.name: n.op for n in graph.nodes}
        chosen = [(ops[c.node], c.algorithm) for c in p.memory.convs]
        atomic = [c for c in chosen if c[1] in ATOMIC_GRADIENT_FAMILIES.get(c[0], ())]
        assert not (low and atomic), chosen
