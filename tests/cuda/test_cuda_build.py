"""The CUDA executor is generated and compiled without a GPU (`make test-all`: the `nvcc` tier;
CI compiles the kernel sources to PTX, tests/codegen/test_tvm_kernels.py): the runtime
builds with nvcc for the target architecture, registers exactly the ops codegen thinks it
runs, and the executors of real training plans build and import."""

from __future__ import annotations

import json
import re

import pytest

from codegen.backends import RUNTIMES
from codegen.build import build, build_runtime
from codegen.layout import scratch_areas
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.zoo import build as zoo
from tests.codegen.helpers import gpu_plan, host_plan
from tests.codegen.zoo_cases import MODELS
from tests.cuda.build_results import import_runtime, schedule_strings


@pytest.mark.nvcc
def test_runtime_registers_the_ops_codegen_reads():
    runtime = import_runtime(build_runtime(backend="cuda"))
    assert set(runtime.registered_ops()) == set(RUNTIMES["cuda"].registered)


@pytest.mark.nvcc
@pytest.mark.parametrize("model,size", [("lenet", dict(batch=8, image=28)),
                                        ("resnet", dict(batch=4, image=32, depth=18))])
def test_training_executor_builds(model, size, tmp_path):
    graph = make_training_graph(zoo(model, **size), Optimizer(kind="momentum", lr=0.01))
    plan = gpu_plan(graph)
    tree = render(plan, tmp_path / model, layout="plan")
    assert json.loads(tree.files["plan.json"])["backend"] == "cuda"
    # A training plan's evaluation schedule is compiled into the same schedule library.
    assert "evaluation.cpp" in tree.files and plan.evaluation is not None
    result = build(tree)
    assert result.runtime.name.startswith("planner_cuda_rt")
    assert "planner_cuda_rt" in tree.files["__init__.py"]
    # Convolutions carry the plan's algorithm to their kernels.
    convs = {c.node: c.algorithm for c in plan.memory.convs}
    strings = schedule_strings(tree)
    assert convs and all(f"conv_algo={a}".encode() in strings for a in convs.values())


@pytest.mark.nvcc
def test_an_fft_training_plan_builds(tmp_path):
    """A training plan whose FFTs run forward and in the gradient (tests/cuda/fft_cases.py)
    renders for the GPU, each FFT with its cuFFT work area planned as its scratch
    (OpDef.gpu_scratch), and builds against the sm_90 runtime, whose kernels/fft.cu links
    cuFFT (tests/cuda/test_cuda_fft.py runs it on a GPU)."""
    from tests.cuda.fft_cases import spectral_graph

    graph = make_training_graph(spectral_graph(), Optimizer(kind="sgd", lr=0.1))
    plan = gpu_plan(graph)
    ffts = [n for n in plan.graph.nodes if n.op == "FFT"]
    assert len(ffts) == 4 and {n.attrs["inverse"] for n in ffts} == {False, True}
    scratch = scratch_areas(plan.tensors)  # op -> (offset, bytes): x's bytes each (smooth)
    assert all(scratch[n.name][1] == 4 * 6 * 16 * 2 * 4 for n in ffts), scratch
    tree = render(plan, tmp_path / "spectral", layout="plan")
    result = build(tree)
    assert result.runtime.parent.parent.name.startswith("cuda-sm90-runtime-")
    assert "FFT" in import_runtime(result.runtime).registered_ops()


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target", ["a100-80gb", "h100-80gb"])  # sm_80 and sm_90
@pytest.mark.parametrize("streams", ["one", "several"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_zoo_plan_generates_and_compiles(model, streams, target, tmp_path):
    """What CI checks without a GPU: each zoo model's GPU plan, on one stream (strategy
    uniform) and on the co-running streams the planner chose (the default; small models'
    kernels never fill the GPU), renders and builds against the runtime of its target's
    architecture."""
    from planner.pipeline import PlanOptions
    from planner.pipeline import plan as make_plan
    from planner.schedule import ScheduleOptions
    from planner.target import preset

    graph = make_training_graph(zoo(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1))
    strategy = "uniform" if streams == "one" else "optimized"
    plan = make_plan(graph, preset(target),
                     options=PlanOptions(schedule=ScheduleOptions(strategy=strategy)))
    tree = render(plan, tmp_path / model, layout="plan")
    lanes = int(re.search(r"on (\d+) lane\(s\)", tree.files["schedule.cpp"]).group(1))
    assert lanes == 1 if streams == "one" else lanes > 1
    result = build(tree)
    arch = {"a100-80gb": "sm80", "h100-80gb": "sm90"}[target]
    assert result.runtime.parent.parent.name.startswith(f"cuda-{arch}-runtime-")


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "fp16-mixed"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_zoo_training_plan_is_supported(model, precision):
    """Every op of every zoo training graph has a CUDA kernel (render checks it first), in
    float32 and in both mixed precisions (their casts, low-type ops and fp16's loss scaling)."""
    from codegen import support

    graph = make_training_graph(zoo(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1),
                                precision=precision)
    if precision != "fp32":
        assert any(t.dtype != "float32" for t in graph.tensors if t.role == "activation")
    support.check(graph, RUNTIMES["cuda"])


@pytest.mark.nvcc
@pytest.mark.parametrize(("target", "model", "precision"), [
    ("h100-80gb", "resnet", "bf16-mixed"),   # sm_90
    pytest.param("a100-80gb", "lenet", "fp16-mixed",  # sm_80, with the loss-scaling ops
                 marks=pytest.mark.slow)])  # CI builds one CUDA runtime, sm_90's
def test_mixed_precision_executor_builds(target, model, precision, tmp_path):
    """A mixed-precision training plan renders and builds against the CUDA runtime of its
    target's architecture: the runtime (every kernel, the low-type ones included) compiles
    for sm_80 and sm_90, and the plan's low tensors reach its schedule as bfloat16 / float16
    (every zoo model's mixed graphs pass the support check above; the package of a plan is
    only its schedule's data, so one per architecture covers the build)."""
    from planner.pipeline import plan as make_plan
    from planner.target import preset

    graph = make_training_graph(zoo(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1),
                                precision=precision)
    plan = make_plan(graph, preset(target))
    tree = render(plan, tmp_path / model, layout="plan")
    low = {"bf16-mixed": "bfloat16", "fp16-mixed": "float16"}[precision]
    assert any(t.dtype == low for t in plan.graph.tensors)
    code = {"bfloat16": "planner::BF16", "float16": "planner::F16"}[low]
    assert code in tree.files["schedule.cpp"]
    assert ("UnscaleGrads" in {n.op for n in plan.graph.nodes}) == (precision == "fp16-mixed")
    result = build(tree)
    arch = {"a100-80gb": "sm80", "h100-80gb": "sm90"}[target]
    assert result.runtime.parent.parent.name.startswith(f"cuda-{arch}-runtime-")


@pytest.mark.nvcc
def test_tf32_executor_builds(tmp_path):
    """A tf32 training plan (the mark that turns on TF32 convolutions and GEMMs at load on an
    sm_80+ device) renders with Schedule::tf32 set and builds against the sm_90 runtime, whose
    kernels read it (tests/cuda/test_cuda_tf32.py runs it on a GPU)."""
    from planner.pipeline import plan as make_plan
    from planner.target import preset
    from tests.codegen.tf32_cases import schedule_tf32

    graph = make_training_graph(zoo("lenet", batch=4, image=16), Optimizer(kind="sgd", lr=0.1),
                                precision="tf32")
    plan = make_plan(graph, preset("h100-80gb"))
    assert plan.graph.math == "tf32"
    tree = render(plan, tmp_path / "lenet_tf32", layout="plan")
    assert schedule_tf32(tree.files) == 1
    result = build(tree)
    assert result.runtime.parent.parent.name.startswith("cuda-sm90-runtime-")


def test_each_plan_renders_for_its_own_backend(tmp_path):
    graph = zoo("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    cpu, gpu = host_plan(graph), gpu_plan(graph)
    assert (cpu.backend, gpu.backend) == ("cpu", "cuda")
    # Each renders for its own backend only (codegen picks it from the plan).
    assert "planner_cpu_rt" in render(cpu, tmp_path / "a").files["__init__.py"]
    assert "planner_cuda_rt" in render(gpu, tmp_path / "b").files["__init__.py"]


BUDGET_CASES = [("alexnet", dict(batch=256), 1 << 30),
                ("resnet", dict(batch=64, depth=50), 4 << 30)]


def budget_tree(model, size, budget, tmp_path):
    """The issue's budgets, on an 80 GB GPU (an H100: the nvcc tier builds one CUDA runtime,
    sm_90's; nvcc 13 cannot build for the k40c's sm_35: such plans are refused by build,
    tests/codegen/test_cuda_arch.py): the plan fits, moves memory, and its rendered schedule
    holds the pinned host store."""
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions, plan
    from planner.target import preset

    graph = make_training_graph(zoo(model, **size), Optimizer(kind="sgd", lr=0.01))
    p = plan(graph, preset("h100-80gb"),
             options=PlanOptions(memory=MemoryOptions(budget_bytes=budget)))
    assert p.summary.memory.arena_bytes <= budget and p.memory.ops
    tree = render(p, tmp_path / model, layout="plan")
    assert "planner::HOST_STORE" in tree.files["schedule.cpp"]
    return tree


@pytest.mark.parametrize("model,size,budget", BUDGET_CASES)
def test_plans_under_a_budget_render(model, size, budget, tmp_path):
    """Offloads, prefetches and recomputes render into the CUDA executor's schedule (pinned
    host store, copies on their streams)."""
    budget_tree(model, size, budget, tmp_path)


@pytest.mark.nvcc  # the CUDA runtime's build: minutes of nvcc
@pytest.mark.parametrize("model,size,budget", BUDGET_CASES)
def test_plans_under_a_budget_build(model, size, budget, tmp_path):
    """... and compile into it."""
    assert build(budget_tree(model, size, budget, tmp_path)).runtime.name.startswith(
        "planner_cuda_rt")


def test_bfloat16_is_refused_before_ampere_and_float16_is_not():
    """cuDNN and cuBLAS take bfloat16 from compute capability 8.0: a bf16-mixed graph for an
    older GPU is refused in one line naming the dtype, the capability and the way out (fp16),
    before anything is rendered; on an A100 it passes, and fp16-mixed passes on both."""
    from codegen import support
    from codegen.errors import UnsupportedError

    def mixed(precision):
        return make_training_graph(zoo("mlp", **MODELS["mlp"]), Optimizer(kind="sgd", lr=0.1),
                                   precision=precision)

    with pytest.raises(UnsupportedError, match=r"dtype bfloat16 needs a GPU of compute "
                       r"capability 8\.0 or newer, the target's is 7\.5 \(tensor '.*'; "
                       r"fp16-mixed runs there\)"):
        support.check(mixed("bf16-mixed"), RUNTIMES["cuda"], "7.5")
    support.check(mixed("bf16-mixed"), RUNTIMES["cuda"], "8.0")
    support.check(mixed("fp16-mixed"), RUNTIMES["cuda"], "7.5")
    support.check(mixed("bf16-mixed"), RUNTIMES["cpu"], "")  # CPUs: oneDNN's fallback
