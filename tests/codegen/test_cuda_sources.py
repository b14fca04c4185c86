"""The CUDA executor's defects that only a GPU run would show, held to account without one:
plain-C++ parts compiled and run here, and rules read off the runtime's sources (each rule
broke on the sources before its fix). tests/cuda/test_cuda_executor.py runs the same fixes
on a GPU."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

RUNTIME = Path(__file__).parents[2] / "templates" / "cuda" / "runtime"
SOURCES = sorted([*RUNTIME.glob("*.cpp"), *RUNTIME.glob("*.h"), *RUNTIME.glob("kernels/*.cu")])


def _source(name: str) -> str:
    text = (RUNTIME / name).read_text()
    # Comments say why; the rules are about code.
    return re.sub(r"//[^\n]*", "", text)


def _functions(text: str) -> list[tuple[str, str]]:
    """(signature line, body) of every function defined at the top level of a .cpp file (its
    signature starts in column 0 and its body ends at a '}' in column 0)."""
    out, name, body = [], None, []
    for line in text.splitlines():
        if name is None:
            if re.match(r"^[A-Za-z].*\(", line) and not line.startswith(("namespace", "#")):
                name, body = line, [line]
                if line.rstrip().endswith("}"):  # a one-line definition
                    out.append((name, line))
                    name = None
        else:
            body.append(line)
            if line.startswith("}"):
                out.append((name, "\n".join(body)))
                name = None
    return out


def test_no_copy_runs_on_the_legacy_stream_beside_the_steps_streams():
    """cudaMemcpy runs on the legacy default stream, which the executor's non-blocking streams
    do not wait for: a parameter load or feed could overlap a step (a race for pageable
    memory). Every copy names a stream."""
    offenders = [p.name for p in SOURCES
                 if re.search(r"\bcudaMemcpy\s*\(", _source(str(p.relative_to(RUNTIME))))]
    assert offenders == []


def test_zero_copy_views_name_the_executors_device():
    """Not the calling thread's current device (another thread may have switched it)."""
    bindings = _source("bindings.cpp")
    assert "cudaGetDevice(" not in bindings
    assert re.search(r"nb::device::cuda::value,\s*ex\.device\(\)", bindings)


@pytest.mark.parametrize("create", ["cudaStreamCreate", "cudnnCreate", "cublasCreate",
                                    "cudaEventCreate", "cudaGraphInstantiate"])
def test_every_handle_is_owned_from_its_creation(create):
    """A constructor that throws halfway runs no destructor of its own: each stream, handle,
    event and graph is created by CudaResources (which frees them) or straight into it."""
    for signature, body in _functions(_source("executor.cpp")):
        if re.search(create + r"\w*\(", body):  # cudaStreamCreateWithFlags too
            owned = signature.split("(")[0].split()[-1].startswith("CudaResources::") \
                or f"&res_.{'graph' if create == 'cudaGraphInstantiate' else ''}" in body
            assert owned, f"{create} in {signature.strip()}"


def test_a_failing_op_joins_the_side_streams_before_the_error_leaves():
    """Otherwise the next copy on stream 0 or a capture's end runs with streams still forked."""
    issue = next(b for s, b in _functions(_source("executor.cpp")) if "::issue_ops(" in s)
    handler = issue[issue.index("catch (const std::exception& e)"):]
    assert handler.index("join_streams()") < handler.index("throw StepError")


def test_step_async_waits_for_device_feeds_to_be_copied():
    """step_async promises that the caller may refill its arrays at once (bindings.h)."""
    bindings = _source("bindings.cpp")
    assert re.search(r"write_device\(id, d\.data\(\), t\.nbytes, copy\)", bindings)
    write_device = next(b for s, b in _functions(_source("executor.cpp"))
                        if "::write_device(" in s)
    assert re.search(r"if \(wait\)\s*check_cuda\(cudaEventSynchronize\(feed_ready_\)", write_device)


def _cxx() -> str:
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no C++ compiler")
    return cxx


# blocks_for (kernel.h): ceil(n / threads) blocks, at most 2^20; the grid strides blocks x threads.
INDEX = r"""
#include <cstdio>
#include "indexing.h"
long long blocks_for(long long n, int t) {
  long long b = (n + t - 1) / t;
  return b > (1 << 20) ? (1 << 20) : b;
}
int main() {
  const long long sizes[] = {1000, (1LL << 31) - (1LL << 28) - 1, 2000000000LL, (1LL << 31) - 1,
                             1LL << 31};
  for (long long n : sizes)
    std::printf("%d", planner::index32(n, blocks_for(n, 256), 256) ? 1 : 0);
  std::printf("\n");
}
"""


def test_32_bit_indices_only_where_the_grid_stride_cannot_wrap(tmp_path):
    """Shape, embedding and pad kernels count in 32 bits below 2^31 elements; the grid-stride
    index passes n by one grid (2^20 blocks x 256 threads = 2^28) before the loop ends, so
    from 2^31 - 2^28 on (2e9 elements) it wrapped to a negative index and wrote out of
    bounds: such sizes take the 64-bit path."""
    (tmp_path / "index.cpp").write_text(INDEX)
    subprocess.run([_cxx(), "-std=c++17", f"-I{RUNTIME}", str(tmp_path / "index.cpp"), "-o",
                    str(tmp_path / "index")], check=True)
    out = subprocess.run([str(tmp_path / "index")], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "11000"
    # ... and the kernels decide with it, not with n < 2^31 alone.
    for name in ("kernels/shape.cu", "kernels/embedding.cu", "kernels/pad.cu"):
        text = _source(name)
        assert "index32(" in text, name
        assert not re.search(r"(size_|total|fs|d_)\s*<\s*\(int64_t\{1\} << 31\)", text), name


def _body(name: str) -> str:
    return next(b for s, b in _functions(_source("executor.cpp")) if f"::{name}(" in s)


def test_a_cuda_graph_is_captured_after_an_eager_step():
    """cuDNN's and cuBLAS's first-use initialisation (allocations, module loads) must not
    happen inside a capture: the step that captures is not the first."""
    step = _body("run_step")
    assert re.search(r"if \(use_graph_ && steps_ >= kEagerSteps\)", step)
    assert step.index("kEagerSteps") < step.index("cudaStreamBeginCapture")
    assert re.search(r"kEagerSteps = [1-9]", _source("executor.h"))


def test_a_step_ends_without_a_host_wait_and_the_next_feeds_wait_on_the_device():
    step = _body("run_step")
    assert "cudaStreamSynchronize" not in step and "cudaDeviceSynchronize" not in step
    # op_timing reads its events, so it waits; nothing else in the step does.
    assert step.count("wait_step()") == 1 and "if (op_timing_) {\n    wait_step();" in step
    feed = _body("write_device")
    assert feed.index("cudaStreamWaitEvent(cudaStreamLegacy, step_end_") < feed.index(
        "cudaMemcpyAsync")
    for reader in ("read", "write", "find", "last_step_seconds"):
        assert "wait_step();" in _body(reader), reader
