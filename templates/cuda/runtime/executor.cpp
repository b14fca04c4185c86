#include "executor.h"

#include <algorithm>
#include <cstring>

#include "device_check.h"

namespace planner {

// ---- library errors -----------------------------------------------------------------------------

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

// ---- device memory --------------------------------------------------------------------------

// Library workspaces ask for 256-byte alignment at most; cudaMalloc gives more.
constexpr int64_t kAlign = 256;

DeviceBlock::DeviceBlock(int64_t bytes) : bytes_(std::max<int64_t>(bytes, kAlign)) {
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&base_), bytes_);
  if (e != cudaSuccess)
    throw std::runtime_error("cannot allocate the " + std::to_string(bytes_) +
                             " bytes of device memory the plan needs: " +
                             cudaGetErrorString(e));
  check_cuda(cudaMemset(base_, 0, bytes_), "cudaMemset (arena)");
}

DeviceBlock::~DeviceBlock() { cudaFree(base_); }

PinnedBlock::PinnedBlock(int64_t bytes) : bytes_(bytes) {
  cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&base_), bytes_, cudaHostAllocDefault);
  if (e != cudaSuccess)
    throw std::runtime_error("cannot allocate the " + std::to_string(bytes_) +
                             " bytes of pinned host memory the plan's offloads need: " +
                             cudaGetErrorString(e));
  std::memset(base_, 0, static_cast<size_t>(bytes_));
}

PinnedBlock::~PinnedBlock() { cudaFreeHost(base_); }

// ---- streams, handles, events ---------------------------------------------------------------

cudaStream_t CudaResources::stream() {
  cudaStream_t st;
  check_cuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
  streams.push_back(st);
  return st;
}

cudnnHandle_t CudaResources::cudnn(cudaStream_t st) {
  cudnnHandle_t h;
  check_cudnn(cudnnCreate(&h), "cudnnCreate");
  cudnns.push_back(h);
  check_cudnn(cudnnSetStream(h, st), "cudnnSetStream");
  return h;
}

cublasHandle_t CudaResources::cublas(cudaStream_t st) {
  cublasHandle_t h;
  check_cublas(cublasCreate(&h), "cublasCreate");
  cublases.push_back(h);
  check_cublas(cublasSetStream(h, st), "cublasSetStream");
  // float32 stays float32 unless a kernel asks otherwise: a tf32 plan's MatMul names
  // CUBLAS_COMPUTE_32F_FAST_TF32 itself (Node::tf32), so the handle never rounds to TF32.
  check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  // No workspace of cuBLAS's own: it would allocate device memory outside the plan's arena
  // on the first GEMM of each stream. Each MatMul sets its planned one (kernels/matmul.cu).
  check_cublas(cublasSetWorkspace(h, nullptr, 0), "cublasSetWorkspace");
  return h;
}

cudaEvent_t CudaResources::event(unsigned flags) {
  cudaEvent_t e;
  check_cuda(cudaEventCreateWithFlags(&e, flags), "cudaEventCreate");
  events.push_back(e);
  return e;
}

CudaResources::~CudaResources() {
  if (graph) cudaGraphExecDestroy(graph);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  for (cudnnHandle_t h : cudnns) cudnnDestroy(h);
  for (cublasHandle_t h : cublases) cublasDestroy(h);
  for (cudaStream_t st : streams) cudaStreamDestroy(st);
}

// ---- load -----------------------------------------------------------------------------------

CudaExecutor::CudaExecutor(const std::string& schedule_path, bool streams, bool cuda_graph,
                   bool op_timing, int device)
    : ExecutorCore(schedule_path, CUDA), device_(device), use_graph_(cuda_graph),
      op_timing_(op_timing) {
  if (cuda_graph && op_timing)
    throw std::runtime_error("op_timing times every op with events on the host's schedule; "
                             "a replayed CUDA graph has none: choose one");
  const Schedule& s = loaded_.get();
  for (int k = 0; k < s.num_ops; ++k) {
    if (registry().find(s.ops[k].op) == registry().end())
      throw std::runtime_error(op_label(s.ops[k]) + ": no CUDA kernel for this op");
    // A captured graph would replay the collectives without the process group seeing them.
    const std::string op = s.ops[k].op;
    if (cuda_graph && (op == "AllReduce" || op == "ReduceScatter" || op == "ShardedUpdate"))
      throw std::runtime_error("a data-parallel plan runs its collectives through the process "
                               "group every step: cuda_graph=True cannot capture them");
  }
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw std::runtime_error("no CUDA device " + std::to_string(device) + " (this machine has " +
                             std::to_string(count) + ")");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  // TF32 tensor cores came with Ampere (compute capability 8.0): a tf32 plan made for an
  // older GPU runs float32 FMA math there, as an fp32 plan would.
  tf32_ = s.tf32 != 0 && check_device(device) >= 80;
  arena_ = std::make_unique<DeviceBlock>(s.arena_bytes);
  if (s.host_bytes > 0) host_store_ = std::make_unique<PinnedBlock>(s.host_bytes);

  // Every stream, handle and event is owned by res_ from the moment it exists.
  int num_streams = streams ? std::max(s.num_lanes, 1) : 1;
  lane_.resize(s.num_ops);
  for (int k = 0; k < s.num_ops; ++k)
    lane_[k] = streams ? std::min(std::max(s.ops[k].lane, 0), num_streams - 1) : 0;
  // Library handles (cuDNN's and cuBLAS's, some 20 MiB of device memory each pair, outside the
  // arena: the target's stream_library_bytes) only on the streams that run a kernel; a copy
  // stream's offloads and prefetches are copies and get none.
  std::vector<char> libraries(num_streams, 0);
  for (int k = 0; k < s.num_ops; ++k)
    if (std::strcmp(s.ops[k].op, "Offload") != 0 && std::strcmp(s.ops[k].op, "Prefetch") != 0)
      libraries[lane_[k]] = 1;
  for (int l = 0; l < num_streams; ++l) {
    cudaStream_t st = res_.stream();
    streams_.push_back(st);
    cudnn_.push_back(libraries[l] ? res_.cudnn(st) : nullptr);
    cublas_.push_back(libraries[l] ? res_.cublas(st) : nullptr);
    joins_.push_back(res_.event(cudaEventDisableTiming));
  }
  step_begin_ = res_.event(cudaEventDefault);
  step_end_ = res_.event(cudaEventDefault);
  feed_ready_ = res_.event(cudaEventDisableTiming);

  ptr_.resize(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i)
    ptr_[i] = (s.tensors[i].store == HOST_STORE ? host_store_->base() : arena_->base()) +
              s.tensors[i].offset;
  kernels_.resize(s.num_ops);
  scratch_.assign(s.num_ops, nullptr);
  overflow_.resize(s.num_ops);
  done_.assign(s.num_ops, nullptr);
  // An event per op that an op on another stream waits for.
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    for (int w = 0; w < op.num_waits; ++w) {
      int before = s.waits[op.first_wait + w];
      if (lane_[before] != lane_[k] && !done_[before])
        done_[before] = res_.event(cudaEventDisableTiming);
    }
  }
  if (op_timing) {
    timing_.resize(s.num_ops);
    for (auto& [a, b] : timing_) {
      a = res_.event(cudaEventDefault);
      b = res_.event(cudaEventDefault);
    }
  }
  for (int k = 0; k < s.num_ops; ++k) create(k);
  // Each op's scratch: its planned area when that holds what the kernel asks for, else a block
  // of its own, allocated now (never shared: ops on other streams may run at the same time).
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    int64_t need = static_cast<int64_t>(kernels_[k]->scratch_bytes());
    if (need <= std::max<int64_t>(op.scratch_bytes, 0)) {
      scratch_[k] = op.scratch_bytes > 0 ? arena_->base() + op.scratch_offset : nullptr;
      // Kernels and cuDNN are promised kAlign-aligned scratch (kernel.h); plans place it so.
      if (op.scratch_bytes > 0 && op.scratch_offset % kAlign)
        throw std::runtime_error(op_label(op) + ": its scratch area at arena offset " +
                                 std::to_string(op.scratch_offset) + " is not " +
                                 std::to_string(kAlign) + "-byte aligned; re-plan it");
    } else {
      overflow_[k] = std::make_unique<DeviceBlock>(need);
      unplanned_ += overflow_[k]->bytes();
      scratch_[k] = overflow_[k]->base();
    }
  }
  check_cuda(cudaDeviceSynchronize(), "loading the executor");
}

int CudaExecutor::check_device(int device) const {
  cudaDeviceProp p;
  check_cuda(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  const Schedule& s = schedule();
  std::string why = device_mismatch(s.compute_capability, s.device_memory_bytes, p.name,
                                    p.major * 10 + p.minor,
                                    static_cast<int64_t>(p.totalGlobalMem));
  if (!why.empty()) throw std::runtime_error(why);
  return p.major * 10 + p.minor;
}

void CudaExecutor::create(int k) {
  const Schedule& s = schedule();
  const OpSpec& op = s.ops[k];
  std::vector<TensorRef> in, out;
  op_tensors(s, op, &in, &out);
  try {
    Node node{&op, in, out, Attrs(op.attrs), cudnn_[lane_[k]], cublas_[lane_[k]],
              std::max<int64_t>(op.scratch_bytes, 0), tf32_, &fft_plans_};
    kernels_[k] = registry().at(op.op)(node);
  } catch (const std::exception& e) {
    throw std::runtime_error(op_failure(op, e.what()));
  }
}

CudaEvaluation& CudaExecutor::evaluation() {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  wait_step();  // a failed step is reported as such; the evaluation follows it on stream 0
  if (!evaluation_)
    evaluation_ = std::make_unique<CudaEvaluation>(loaded_, arena_->base(), streams_[0],
                                                   cudnn_[0], cublas_[0], tf32_, &fft_plans_);
  return *evaluation_;
}

CudaExecutor::~CudaExecutor() {
  finish_async();
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  // Then the members go in reverse order: kernels (descriptors) before res_ (their handles).
}

// ---- tensors --------------------------------------------------------------------------------

// Not cudaMemcpy: that runs on the legacy default stream, which the executor's non-blocking
// streams do not wait for (nor it for them), so a copy could overlap a step still running.
// On stream 0 it follows the previous step (which ends there, every stream joined) and comes
// before the next; waiting for it lets the caller free or refill pageable host memory.
void CudaExecutor::write(int id, const void* host, int64_t bytes) {
  wait_step();
  check_cuda(cudaMemcpyAsync(ptr_[id], host, bytes, cudaMemcpyHostToDevice, streams_[0]),
             "copying in");
  check_cuda(cudaStreamSynchronize(streams_[0]), "copying in");
}

void CudaExecutor::read(int id, void* host, int64_t bytes) const {
  wait_step();  // a failed step is reported as such, not as a failed copy
  check_cuda(cudaMemcpyAsync(host, ptr_[id], bytes, cudaMemcpyDeviceToHost, streams_[0]),
             "copying out");
  check_cuda(cudaStreamSynchronize(streams_[0]), "copying out");
}

void CudaExecutor::write_device(int id, const void* device, int64_t bytes, bool wait) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  // A DLPack producer asked for no stream makes its data ready on the legacy default stream
  // (the protocol's rule); the executor's streams do not wait for that one by themselves, so
  // the copy runs there and stream 0 waits for it. The step before may still be running (no
  // host wait ends a step): the copy waits for it on the device, not on the host.
  check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, step_end_, 0), "cudaStreamWaitEvent");
  check_cuda(cudaMemcpyAsync(ptr_[id], device, bytes, cudaMemcpyDeviceToDevice,
                             cudaStreamLegacy), "copying a device feed in");
  check_cuda(cudaEventRecord(feed_ready_, cudaStreamLegacy), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(streams_[0], feed_ready_, 0), "cudaStreamWaitEvent");
  if (wait) check_cuda(cudaEventSynchronize(feed_ready_), "copying a device feed in");
}

// ---- profiling ------------------------------------------------------------------------------

std::vector<Measured> CudaExecutor::find(int op, int64_t workspace_bytes) {
  const Schedule& s = schedule();
  if (op < 0 || op >= s.num_ops) throw std::runtime_error("no op " + std::to_string(op));
  if (workspace_bytes < 0) throw std::runtime_error("workspace bytes must be >= 0");
  wait_step();
  const int lane = lane_[op];
  Kernel& kernel = *kernels_[op];
  const int64_t temp = static_cast<int64_t>(kernel.temp_bytes());
  DeviceBlock block(temp + workspace_bytes);
  Run r{ptr_.data(), block.base(), streams_[lane], cudnn_[lane], cublas_[lane]};
  std::vector<Measured> out;
  try {
    out = kernel.find(r, static_cast<size_t>(workspace_bytes));
    check_cuda(cudaStreamSynchronize(streams_[lane]), "finding algorithms");
  } catch (const std::exception& e) {
    throw std::runtime_error(op_failure(s.ops[op], e.what()));
  }
  return out;
}

// ---- the step -------------------------------------------------------------------------------

void CudaExecutor::issue_ops() {
  const Schedule& s = schedule();
  cudaStream_t main = streams_[0];
  // Fork: every stream starts after what stream 0 holds (the feeds, the previous step).
  check_cuda(cudaEventRecord(joins_[0], main), "cudaEventRecord");
  for (size_t l = 1; l < streams_.size(); ++l)
    check_cuda(cudaStreamWaitEvent(streams_[l], joins_[0], 0), "cudaStreamWaitEvent");
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    cudaStream_t st = streams_[lane_[k]];
    for (int w = 0; w < op.num_waits; ++w) {
      int before = s.waits[op.first_wait + w];
      if (lane_[before] != lane_[k])
        check_cuda(cudaStreamWaitEvent(st, done_[before], 0), "cudaStreamWaitEvent");
    }
    Run r{ptr_.data(), scratch_[k], st, cudnn_[lane_[k]], cublas_[lane_[k]], &collective_};
    try {
      if (op_timing_) check_cuda(cudaEventRecord(timing_[k].first, st), "cudaEventRecord");
      kernels_[k]->run(r);
      if (op_timing_) check_cuda(cudaEventRecord(timing_[k].second, st), "cudaEventRecord");
      if (done_[k]) check_cuda(cudaEventRecord(done_[k], st), "cudaEventRecord");
    } catch (const std::exception& e) {
      // What the other streams already hold must still end before stream 0 does: the next
      // copy in or step starts there (and a capture cannot end with a stream left forked).
      try {
        join_streams();
      } catch (const std::exception&) {
        // the op's error is the one to report
      }
      throw StepError(op_failure(op, e.what()));
    }
  }
  join_streams();
}

void CudaExecutor::join_streams() {
  // Join: stream 0 ends after every stream's last op.
  for (size_t l = 1; l < streams_.size(); ++l) {
    check_cuda(cudaEventRecord(joins_[l], streams_[l]), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(streams_[0], joins_[l], 0), "cudaStreamWaitEvent");
  }
}

void CudaExecutor::wait_step() const {
  if (!step_pending_) return;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  step_pending_ = false;
  cudaError_t e = cudaEventSynchronize(step_end_);
  if (e != cudaSuccess) throw StepError(std::string("the step failed on the GPU: ") +
                                        cudaGetErrorString(e));
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, step_begin_, step_end_), "cudaEventElapsedTime");
  last_step_seconds_ = ms * 1e-3;
}

double CudaExecutor::last_step_seconds() const {
  wait_step();
  return last_step_seconds_;
}

void CudaExecutor::run_step() {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  // The step before, if it has ended, must have succeeded: its error is reported before
  // this one runs (asked without waiting: a step still running is ordered before this one).
  if (step_pending_) {
    cudaError_t e = cudaEventQuery(step_end_);
    if (e != cudaSuccess && e != cudaErrorNotReady) {
      step_pending_ = false;
      throw StepError(std::string("the step before failed on the GPU: ") +
                      cudaGetErrorString(e));
    }
  }
  cudaStream_t main = streams_[0];
  check_cuda(cudaEventRecord(step_begin_, main), "cudaEventRecord");
  // The first step runs eagerly: cuDNN's and cuBLAS's first-use initialisation (their
  // allocations, their kernels' loading) happens outside a capture, which cannot hold it.
  if (use_graph_ && steps_ >= kEagerSteps) {
    if (!res_.graph) {
      cudaGraph_t g;
      check_cuda(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal),
                 "cudaStreamBeginCapture");
      try {
        issue_ops();
      } catch (...) {
        cudaStreamEndCapture(main, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      check_cuda(cudaStreamEndCapture(main, &g), "cudaStreamEndCapture");
      cudaError_t e = cudaGraphInstantiate(&res_.graph, g, 0);
      cudaGraphDestroy(g);
      check_cuda(e, "cudaGraphInstantiate");
    }
    check_cuda(cudaGraphLaunch(res_.graph, main), "cudaGraphLaunch");
  } else {
    issue_ops();
  }
  check_cuda(cudaEventRecord(step_end_, main), "cudaEventRecord");
  // No host wait here: whatever comes next on the device (the next step's feeds, a read of a
  // result) is ordered after step_end_; the host waits only where it reads (wait_step).
  step_pending_ = true;
  steps_ += 1;
  if (op_timing_) {
    wait_step();
    float ms = 0;
    for (size_t k = 0; k < timing_.size(); ++k) {
      check_cuda(cudaEventElapsedTime(&ms, timing_[k].first, timing_[k].second),
                 "cudaEventElapsedTime");
      stats_[k].seconds += ms * 1e-3;
      stats_[k].calls += 1;
    }
  }
}

}  // namespace planner
