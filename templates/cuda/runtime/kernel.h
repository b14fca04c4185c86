// The kernel interface of the CUDA runtime (its cuDNN / cuBLAS kernel context): a Kernel is
// created once at load for one op of the schedule (descriptors, launch geometry, the plan's
// convolution algorithm), and run every step on the op's stream with the tensors' current
// device addresses. Kernels allocate nothing when they run and never synchronize: library
// workspaces and temporaries live in the op's own scratch area (`scratch_bytes`, the plan's
// workspace tensor with the op's lifetime), so ops on different streams never share one.
//
// Adding a kernel is one file in kernels/ with its registrations, as on the CPU:
//
//   PLANNER_REGISTER_KERNELS(myfamily) {
//     r["MyOp"] = make_my_op;      // the op's name, as in planner/ops
//   }
//
// codegen reads the same `r["..."] =` lines to know which ops the CUDA backend runs.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective.h"  // Collective: the process group of a data-parallel plan
#include "indexing.h"
#include "runtime.h"

namespace planner {

class FftPlans;  // fft_plans.h: the executor's cuFFT plans

// Throw std::runtime_error naming the failed call and the library's message.
void check_cuda(cudaError_t e, const char* what);
void check_cudnn(cudnnStatus_t s, const char* what);
void check_cublas(cublasStatus_t s, const char* what);
#define PLANNER_CUDA(call) ::planner::check_cuda((call), #call)
#define PLANNER_CUDNN(call) ::planner::check_cudnn((call), #call)
#define PLANNER_CUBLAS(call) ::planner::check_cublas((call), #call)
// After a kernel launch: the launch error, if any (never synchronizes).
#define PLANNER_LAUNCHED(what) ::planner::check_cuda(cudaGetLastError(), what)

// What a kernel factory sees: the op, its tensors, attrs, and the library handles (for
// descriptor queries at load; running uses Run's, bound to the op's stream).
//
// Plan decisions reach a kernel as attrs the renderer adds for CUDA plans:
//   conv_algo=IMPLICIT_GEMM   a convolution's algorithm (cuDNN family name, plan.memory.convs)
//   block=256                 threads per block of a generated kernel (absent: the kernel's
//                             default); blocks follow from the size
struct Node {
  const OpSpec* spec;
  std::vector<TensorRef> in, out;
  Attrs attrs;
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;
  int64_t planned_scratch;  // the plan's scratch / workspace bytes for this op (0: none)
  // Float32 convolutions and GEMMs may use TF32 tensor cores: the plan's math is tf32 and the
  // device is sm_80 or newer (read once by the executor at load). False: float32 FMA math.
  bool tf32;
  // The executor's cuFFT plans (the FFT kernel takes its geometry's; null: it makes its own).
  FftPlans* fft_plans = nullptr;
};

// What a running kernel sees: every tensor's current device address, its scratch area, the
// stream and the handles bound to it.
struct Run {
  char* const* ptr;         // per tensor id: device addresses
  char* scratch;            // scratch_bytes() bytes of device memory, 256-byte aligned
  cudaStream_t stream;
  cudnnHandle_t cudnn;      // cudnnSetStream(cudnn, stream) done
  cublasHandle_t cublas;    // cublasSetStream(cublas, stream) done, CUBLAS_DEFAULT_MATH
  const Collective* collective = nullptr;  // the executor's, for collective ops
  template <class T> T* at(int id) const { return reinterpret_cast<T*>(ptr[id]); }
};

// One way a kernel can run, timed by its library's own benchmark (cuDNN's find): what
// `planner profile --target gpu` writes into the cost table. `family` is the plan's name for
// it (the conv_algo a plan may choose); `name` the library's.
struct Measured {
  std::string family, name;
  double seconds;
  size_t workspace_bytes;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Device scratch the kernel needs (workspace + temporaries), known at load.
  virtual size_t scratch_bytes() const { return 0; }
  virtual void run(const Run& r) = 0;
  // What the kernel chose at load that stats() should show (a convolution's algorithm).
  virtual std::string detail() const { return ""; }
  // Profiling, never in a step: every way it can run here with a workspace of at most
  // `workspace_bytes`, each timed on r.stream (r.scratch holds scratch_bytes() of the
  // kernel's own temporaries, then the workspace). Empty: the kernel offers no choice.
  virtual std::vector<Measured> find(const Run& r, size_t workspace_bytes) {
    (void)r;
    (void)workspace_bytes;
    return {};
  }
  // The bytes of scratch_bytes() that are temporaries rather than a library workspace.
  virtual size_t temp_bytes() const { return 0; }
};

using KernelPtr = std::unique_ptr<Kernel>;
using Factory = KernelPtr (*)(const Node&);
}  // namespace planner

// Registry, KernelFamily, PLANNER_REGISTER_KERNELS (common to every backend).
#include "registry.h"

namespace planner {

// ---- small helpers shared by the kernel families ----------------------------------------

// Blocks of `threads` covering n elements (at least 1), capped so a grid-stride loop covers
// the rest.
inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > (int64_t{1} << 20)) b = int64_t{1} << 20;
  return static_cast<unsigned>(b);
}

// Threads per block of a kernel: the plan's `block` attr, else 256. Whole warps only, since
// the block reductions (groups.cuh) assume every lane of every warp takes part.
inline int block_threads(const Node& n) {
  const int64_t t = n.attrs.has("block") ? n.attrs.i("block") : 256;
  if (t < 32 || t > 1024 || t % 32)
    throw std::runtime_error("block=" + std::to_string(t) +
                             ": threads per block must be a multiple of 32 in [32, 1024]");
  return static_cast<int>(t);
}

// Copies `bytes` between two tensors on the op's stream; nothing when they share bytes.
class Copy : public Kernel {
 public:
  Copy(int from, int to, int64_t bytes) : from_(from), to_(to), bytes_(bytes) {}
  void run(const Run& r) override {
    if (r.ptr[from_] != r.ptr[to_] && bytes_ > 0)
      PLANNER_CUDA(cudaMemcpyAsync(r.ptr[to_], r.ptr[from_], bytes_, cudaMemcpyDeviceToDevice,
                                   r.stream));
  }

 private:
  int from_, to_;
  int64_t bytes_;
};

}  // namespace planner
