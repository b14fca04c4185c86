// The CUDA executor: loads a schedule (common/loader.h), makes one device arena from the
// memory plan (one cudaMalloc at load; a step allocates nothing), creates every op's kernel
// once, and issues the step in plan order from the calling thread onto the plan's streams:
// an op waits for the ops it depends on that ran on another stream through events; ops on one
// stream are ordered by it. `streams=false` issues every op on one stream (the reference the
// multi-stream run must match). `cuda_graph=true` captures the step's ops once, at the first
// step, and replays the graph afterwards (seed 002: launch gaps dominate small-op models).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernel.h"
#include "loader.h"

namespace planner {

struct OpStats {
  double seconds = 0;  // summed over timed calls
  int64_t calls = 0;
};

std::string name_list(const std::vector<std::string>& names);

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

class Executor {
 public:
  // op_timing: time every op with events (stats(); it adds an event pair per op, and cannot
  // be combined with cuda_graph).
  Executor(const std::string& schedule_path, bool streams = true, bool cuda_graph = false,
           bool op_timing = false, int device = 0);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();

  const Schedule& schedule() const { return loaded_.get(); }
  int tensor_index(const std::string& name) const { return loaded_.tensor_index(name); }
  const TensorSpec& tensor(int id) const { return schedule().tensors[id]; }
  Shape shape(int id) const;
  char* device_data(int id) const { return ptr_[id]; }

  // Host <-> tensor copies (synchronous with respect to the executor's streams).
  void write(int id, const void* host, int64_t bytes);
  void read(int id, void* host, int64_t bytes) const;
  // Device-to-device copy into tensor `id` (a feed given as a CUDA array), on the feed stream.
  void write_device(int id, const void* device, int64_t bytes);

  void step();
  void start_async();
  void join_async();
  bool in_flight() const { return in_flight_; }
  std::vector<int> pending_outputs;

  static bool required(const TensorSpec& t) {
    return (t.role == PARAM || t.role == STATE) && t.updates < 0;
  }
  void mark_loaded(int id) { written_[id] = 1; }
  std::vector<std::string> missing(const std::vector<int>& also_given = {}) const;
  void check_loaded() const;

  bool concurrent() const { return streams_.size() > 1; }
  int lanes() const { return static_cast<int>(streams_.size()); }
  bool cuda_graph() const { return use_graph_; }
  const std::vector<OpStats>& op_stats() const { return stats_; }
  size_t scratch_needed(int op) const { return kernels_[op]->scratch_bytes(); }
  std::string detail(int op) const { return kernels_[op]->detail(); }
  bool scratch_planned(int op) const { return overflow_[op] == nullptr; }
  int64_t steps() const { return steps_; }
  int64_t arena_bytes() const { return arena_->bytes(); }
  int64_t unplanned_scratch_bytes() const { return unplanned_; }
  double last_step_seconds() const { return last_step_seconds_; }
  void reset_stats();
  std::mutex& mutex() const { return mu_; }

 private:
  mutable std::mutex mu_;
  LoadedSchedule loaded_;
  int device_;
  bool use_graph_, op_timing_;
  std::unique_ptr<DeviceBlock> arena_;
  std::vector<cudaStream_t> streams_;      // one per plan stream (one in all when streams=false)
  std::vector<cudnnHandle_t> cudnn_;       // one per stream, bound to it
  std::vector<cublasHandle_t> cublas_;
  std::vector<int> lane_;                  // per op: its stream index
  std::vector<cudaEvent_t> done_;          // per op waited on from another stream, else null
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timing_;  // per op, with op_timing
  cudaEvent_t step_begin_ = nullptr, step_end_ = nullptr;
  std::vector<cudaEvent_t> joins_;         // per stream: its last op, for the join
  cudaGraphExec_t graph_ = nullptr;
  std::vector<KernelPtr> kernels_;
  std::vector<char*> scratch_;
  std::vector<std::unique_ptr<DeviceBlock>> overflow_;
  int64_t unplanned_ = 0;
  std::vector<char*> ptr_;
  std::vector<OpStats> stats_;
  std::vector<char> written_;
  int64_t steps_ = 0;
  double last_step_seconds_ = 0;
  std::thread async_;
  std::exception_ptr async_error_;
  bool in_flight_ = false;

  void create(int k);
  void issue_ops();   // every op onto its stream, with the cross-stream waits and the join
  void run_step();
};

}  // namespace planner
