"""The GPU architecture is the target's: a CUDA runtime is built (and cached) for the plan's
compute capability, `planner build` refuses a GPU nvcc 13 cannot build for in one line while
planning still works, and the executor's device check refuses another device. None of this
needs a GPU: the device check is plain C++, compiled and run here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from codegen.build import cuda_arch, cuda_toolchain, runtime_key
from codegen.errors import BuildError
from codegen.render import render_files
from planner.cli import main
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from planner.target import preset
from planner.target.presets import PRESETS
from planner.zoo import build as zoo

RUNTIME = Path(__file__).parents[2] / "templates" / "cuda" / "runtime"
GPU_PRESETS = sorted(n for n in PRESETS if preset(n).gpus)
# nvcc 13's oldest target is sm_75 (`nvcc --list-gpu-arch`).
BUILDABLE = {"a100-80gb": "80", "l4-24gb": "89", "h100-80gb": "90", "h200-141gb": "90"}


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_each_gpu_preset_builds_for_its_architecture_or_is_refused(name):
    gpu = preset(name).gpus[0]
    if name in BUILDABLE:
        assert cuda_arch(gpu.compute_capability, name) == BUILDABLE[name]
    else:
        with pytest.raises(BuildError, match=rf"target {name} is compute capability "
                                             rf"{gpu.compute_capability}: nvcc 13 builds for 7.5"):
            cuda_arch(gpu.compute_capability, name)


def test_a_plan_without_a_capability_is_refused_by_name():
    with pytest.raises(BuildError, match="target gpu: the plan names no GPU compute capability"):
        cuda_arch("", "gpu")


def _mlp():
    return make_training_graph(zoo("mlp", batch=2, hidden=[4], in_features=3, classes=2),
                               Optimizer(kind="sgd"))


def test_planner_build_refuses_an_old_gpu_in_one_line_and_writes_nothing(tmp_path, capsys):
    """A K40c plan is made (planning and fit work for it), `planner build` refuses it."""
    p = plan(_mlp(), preset("k40c-12gb"))
    assert (p.target.compute_capability, p.target.gpu_memory_bytes) == ("3.5", 12 << 30)
    path = tmp_path / "k40c.plan.json"
    path.write_text(p.to_json())
    out = tmp_path / "exe"
    assert main(["build", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "k40c-12gb is compute capability 3.5: nvcc 13 builds for 7.5 and newer" in err
    assert not out.exists()


def test_the_schedule_carries_the_plans_device():
    """What the executor compares at load: major * 10 + minor and bytes; 0 for a CPU plan."""
    from tests.codegen.helpers import host_plan

    text = render_files(plan(_mlp(), preset("l4-24gb")), "mlp")["schedule.cpp"]
    assert "\n    89, 24000000000,\n    0,\n" in text  # (then the tf32 flag: fp32 here)
    cpu = render_files(host_plan(_mlp()), "mlp")["schedule.cpp"]
    assert "\n    0, 0,\n    0,\n" in cpu


def test_each_architecture_has_its_own_runtime():
    try:
        cuda_toolchain()
    except BuildError as e:
        pytest.skip(str(e))
    keys = {arch: runtime_key(compiler="c++ 1", backend="cuda", arch=arch)
            for arch in ("80", "89", "90")}
    assert len(set(keys.values())) == 3
    assert runtime_key(compiler="c++ 1", backend="cuda", arch="90") == keys["90"]


# The executor's device check (templates/cuda/runtime/device_check.h) on real devices' numbers:
# cudaDeviceProp.totalGlobalMem of an H100 SXM (79.6 GiB), an H200 (140.4 GiB), an A100 80 GB.
CHECK = r"""
#include <cstdio>
#include "device_check.h"
int main() {
  using planner::device_mismatch;
  const long long h100 = 85520809984LL, h200 = 150754820096LL, a100 = 85899345920LL;
  const long long h100_plan = 80LL << 30, h200_plan = 141000000000LL;
  std::printf("%s|\n", device_mismatch(90, h100_plan, "NVIDIA H100 80GB HBM3", 90, h100).c_str());
  std::printf("%s|\n", device_mismatch(90, h100_plan, "NVIDIA H200", 90, h200).c_str());
  std::printf("%s|\n", device_mismatch(90, h200_plan, "NVIDIA H100 80GB HBM3", 90, h100).c_str());
  std::printf("%s|\n", device_mismatch(90, h100_plan, "NVIDIA A100-SXM4-80GB", 80, a100).c_str());
  std::printf("%s|\n", device_mismatch(0, 0, "NVIDIA A100-SXM4-80GB", 80, a100).c_str());
}
"""


def test_the_executor_refuses_another_architecture_or_less_memory(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no C++ compiler")
    (tmp_path / "check.cpp").write_text(CHECK)
    subprocess.run([cxx, "-std=c++17", f"-I{RUNTIME}", str(tmp_path / "check.cpp"), "-o",
                    str(tmp_path / "check")], check=True)
    lines = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert lines[0] == "|"  # an H100 plan on an H100: datasheet 80 GiB, device 79.6 GiB
    assert lines[1] == "|"  # on an H200: the same architecture, more memory
    assert lines[2] == ("the plan is for a GPU with 134468 MiB, device 'NVIDIA H100 80GB HBM3' "
                        "has 81559 MiB: re-plan for it (--target gpu)|")
    assert lines[3] == ("the plan is for a GPU of compute capability 9.0, device "
                        "'NVIDIA A100-SXM4-80GB' is 8.0: re-plan for it (--target gpu)|")
    assert lines[4] == "|"  # a plan that names no device (rendered before plans carried one)
