// The CUDA executor: loads a schedule (common/loader.h), makes one device arena from the
// memory plan (one cudaMalloc at load; a step allocates nothing), creates every op's kernel
// once, and issues the step in plan order from the calling thread onto the plan's streams:
// an op waits for the ops it depends on that ran on another stream through events; ops on one
// stream are ordered by it. `streams=false` issues every op on one stream (the reference the
// multi-stream run must match). `cuda_graph=true` runs the first step eagerly (the libraries'
// first-use initialisation stays out of the capture), captures the step's ops at the second
// and replays the graph afterwards (seed 002: launch gaps dominate small-op models). A step
// returns once its work is queued: the host waits for the device only where it reads (a
// result, the step's time, its error), and the next step's feeds are ordered after it on the
// device.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "evaluation.h"
#include "executor_core.h"
#include "fft_plans.h"
#include "kernel.h"

namespace planner {

// Device memory, freed on destruction.
class DeviceBlock {
 public:
  explicit DeviceBlock(int64_t bytes);
  ~DeviceBlock();
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  char* base() const { return base_; }
  int64_t bytes() const { return bytes_; }

 private:
  char* base_ = nullptr;
  int64_t bytes_ = 0;
};

// The executor's streams, library handles, events and captured graph, each recorded here the
// moment it is created and released when this is destroyed: also when the executor's
// constructor throws halfway (a member, so destroyed with the members built before the throw).
struct CudaResources {
  CudaResources() = default;
  CudaResources(const CudaResources&) = delete;
  CudaResources& operator=(const CudaResources&) = delete;
  ~CudaResources();
  cudaStream_t stream();
  cudnnHandle_t cudnn(cudaStream_t st);
  cublasHandle_t cublas(cudaStream_t st);
  cudaEvent_t event(unsigned flags);

  std::vector<cudaStream_t> streams;
  std::vector<cudnnHandle_t> cudnns;
  std::vector<cublasHandle_t> cublases;
  std::vector<cudaEvent_t> events;
  cudaGraphExec_t graph = nullptr;
};

// The host store: pinned host memory for offloaded copies (Schedule::host_bytes), allocated
// once at load, so that offloads and prefetches are asynchronous copies on their streams.
class PinnedBlock {
 public:
  explicit PinnedBlock(int64_t bytes);
  ~PinnedBlock();
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  char* base() const { return base_; }
  int64_t bytes() const { return bytes_; }

 private:
  char* base_ = nullptr;
  int64_t bytes_ = 0;
};

// Named apart from the CPU runtime's planner::Executor: both runtimes may be loaded in one
// process, and nanobind registers a bound class by its C++ type.
class CudaExecutor : public ExecutorCore {
 public:
  // op_timing: time every op with events (stats(); it adds an event pair per op, and cannot
  // be combined with cuda_graph).
  CudaExecutor(const std::string& schedule_path, bool streams = true, bool cuda_graph = false,
           bool op_timing = false, int device = 0);
  ~CudaExecutor() override;

  char* device_data(int id) const { return ptr_[id]; }
  // The CUDA device the executor runs on (what its zero-copy views are tagged with).
  int device() const { return device_; }

  // Host <-> tensor copies on the executor's first stream, so ordered after the step before
  // (a step ends there, every stream joined); they return when the copy is done.
  void write(int id, const void* host, int64_t bytes);
  void read(int id, void* host, int64_t bytes) const;
  // Device-to-device copy into tensor `id` (a feed given as a CUDA array), queued before the
  // next step; with `wait`, returns once the copy is done (step_async: the caller may refill
  // the array on any stream at once).
  void write_device(int id, const void* device, int64_t bytes, bool wait = false);

  bool concurrent() const { return streams_.size() > 1; }
  int lanes() const { return static_cast<int>(streams_.size()); }
  bool cuda_graph() const { return use_graph_; }
  size_t scratch_needed(int op) const { return kernels_[op]->scratch_bytes(); }
  std::string detail(int op) const { return kernels_[op]->detail(); }
  bool scratch_planned(int op) const { return overflow_[op] == nullptr; }
  int64_t arena_bytes() const { return arena_->bytes(); }
  const char* arena_base() const { return arena_->base(); }  // device memory
  int64_t host_store_bytes() const { return host_store_ ? host_store_->bytes() : 0; }
  int64_t unplanned_scratch_bytes() const { return unplanned_; }
  // Waits for the last step (its device time is known once it has ended).
  double last_step_seconds() const;
  // Steps run eagerly before a cuda_graph executor captures one.
  static constexpr int64_t kEagerSteps = 1;
  // The process group of a data-parallel plan's collective ops (common/collective.h; set
  // between steps), run on the op's stream.
  void set_collective(Collective c) { collective_ = std::move(c); }

  // Profiling, between steps: every way op `op` can run with at most `workspace_bytes` of
  // workspace, each timed by its library (Kernel::find; a convolution's cuDNN algorithms).
  // Allocates that workspace for the call, so a step's arena is untouched.
  std::vector<Measured> find(int op, int64_t workspace_bytes);

  // ---- evaluation from the same build (Plan.evaluation; evaluation.h) -------------------
  bool has_evaluation() const { return loaded_.exports("planner_evaluation_schedule"); }
  // The evaluation, made at the first call after the step in flight ends (between steps:
  // the caller holds mutex()). Throws when the plan carries none.
  CudaEvaluation& evaluation();

 private:
  int device_;
  bool use_graph_, op_timing_;
  // The plan's math is tf32 and the device has TF32 (sm_80+): Node::tf32 of every kernel.
  bool tf32_ = false;
  std::unique_ptr<DeviceBlock> arena_;
  std::unique_ptr<PinnedBlock> host_store_;  // null when the plan offloads nothing
  // Declared before the kernels: their descriptors go first, then the handles.
  CudaResources res_;
  // cuFFT plans by geometry, shared by the FFT kernels of the step and of the evaluation;
  // declared before them, so destroyed after them.
  FftPlans fft_plans_;
  std::vector<cudaStream_t> streams_;      // one per plan stream (one in all when streams=false)
  std::vector<cudnnHandle_t> cudnn_;       // one per stream, bound to it
  std::vector<cublasHandle_t> cublas_;
  std::vector<int> lane_;                  // per op: its stream index
  std::vector<cudaEvent_t> done_;          // per op waited on from another stream, else null
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timing_;  // per op, with op_timing
  cudaEvent_t step_begin_ = nullptr, step_end_ = nullptr;
  cudaEvent_t feed_ready_ = nullptr;       // the last device feed's copy, for stream 0
  std::vector<cudaEvent_t> joins_;         // per stream: its last op, for the join
  std::vector<KernelPtr> kernels_;
  std::vector<char*> scratch_;
  std::vector<std::unique_ptr<DeviceBlock>> overflow_;
  int64_t unplanned_ = 0;
  std::vector<char*> ptr_;
  // Set when a step is queued, cleared by wait_step: whether step_end_ is still ahead.
  mutable bool step_pending_ = false;
  mutable double last_step_seconds_ = 0;
  Collective collective_;

  int check_device(int device) const;  // the device's compute capability, major * 10 + minor
  void create(int k);
  void issue_ops();   // every op onto its stream, with the cross-stream waits and the join
  void join_streams();  // stream 0 waits for every other stream's work so far
  void run_step() override;
  // Waits for the step queued last, if any, and reads its time; throws StepError naming the
  // device's error when it failed.
  void wait_step() const;
  std::unique_ptr<CudaEvaluation> evaluation_;  // made by the first evaluation()
};

}  // namespace planner
