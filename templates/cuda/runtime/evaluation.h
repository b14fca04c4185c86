// A training plan's evaluation on the GPU (Plan.evaluation, planner/evaluation.py): the
// evaluation schedule the same library exports (planner_evaluation_schedule), its kernels
// created at the first evaluate, issued in plan order on the executor's first stream (after
// the step before it: every step ends there). Its activations live in a device block of their
// own; its parameters and states are the training arena's device bytes (store TRAINING_ARENA).
// Compiled by the nvcc test; not yet run on a GPU.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernel.h"
#include "loader.h"

namespace planner {

class DeviceBlock;

class CudaEvaluation {
 public:
  // `training_arena`: the device base of the training arena; the stream and the handles bound
  // to it: the executor's first; its cuFFT plans (outliving this).
  CudaEvaluation(const LoadedSchedule& training, char* training_arena, cudaStream_t stream,
                 cudnnHandle_t cudnn, cublasHandle_t cublas, bool tf32, FftPlans* fft_plans);
  ~CudaEvaluation();

  const Schedule& schedule() const { return loaded_.get(); }
  int tensor_index(const std::string& name) const { return loaded_.tensor_index(name); }
  const TensorSpec& tensor(int id) const { return schedule().tensors[id]; }
  // Host <-> tensor copies on the stream; they return when the copy is done.
  void write(int id, const void* host, int64_t bytes);
  void read(int id, void* host, int64_t bytes) const;
  // Every op once, in plan order, on the stream; returns when the device is done. Throws
  // StepError naming the op.
  void run();

 private:
  LoadedSchedule loaded_;
  std::unique_ptr<DeviceBlock> arena_;
  cudaStream_t stream_;
  cudnnHandle_t cudnn_;
  cublasHandle_t cublas_;
  std::vector<KernelPtr> kernels_;
  std::vector<char*> ptr_;      // every tensor's device bytes
  std::vector<char*> scratch_;  // every op's scratch area
  std::vector<std::unique_ptr<DeviceBlock>> overflow_;
};

}  // namespace planner
