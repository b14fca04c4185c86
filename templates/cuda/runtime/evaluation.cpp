#include "evaluation.h"

#include <algorithm>
#include <stdexcept>

#include "executor.h"

namespace planner {

CudaEvaluation::CudaEvaluation(const LoadedSchedule& training, char* training_arena,
                               cudaStream_t stream, cudnnHandle_t cudnn, cublasHandle_t cublas,
                               bool tf32, FftPlans* fft_plans)
    : loaded_(training, "planner_evaluation_schedule"),
      stream_(stream),
      cudnn_(cudnn),
      cublas_(cublas) {
  const Schedule& s = loaded_.get();
  if (s.host_bytes > 0)
    throw std::runtime_error("the evaluation schedule offloads; the CUDA executor runs none "
                             "that does");
  arena_ = std::make_unique<DeviceBlock>(s.arena_bytes);
  ptr_.resize(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) {
    const TensorSpec& t = s.tensors[i];
    ptr_[i] = (t.store == TRAINING_ARENA ? training_arena : arena_->base()) + t.offset;
  }
  kernels_.resize(s.num_ops);
  scratch_.assign(s.num_ops, nullptr);
  overflow_.resize(s.num_ops);
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    if (registry().find(op.op) == registry().end())
      throw std::runtime_error(op_label(op) + ": no CUDA kernel for this op");
    std::vector<TensorRef> in, out;
    op_tensors(s, op, &in, &out);
    try {
      Node node{&op, in, out, Attrs(op.attrs), cudnn_, cublas_,
                std::max<int64_t>(op.scratch_bytes, 0), tf32, fft_plans};
      kernels_[k] = registry().at(op.op)(node);
    } catch (const std::exception& e) {
      throw std::runtime_error(op_failure(op, e.what()));
    }
    int64_t need = static_cast<int64_t>(kernels_[k]->scratch_bytes());
    if (need <= std::max<int64_t>(op.scratch_bytes, 0)) {
      scratch_[k] = op.scratch_bytes > 0 ? arena_->base() + op.scratch_offset : nullptr;
    } else {
      overflow_[k] = std::make_unique<DeviceBlock>(need);
      scratch_[k] = overflow_[k]->base();
    }
  }
  check_cuda(cudaStreamSynchronize(stream_), "loading the evaluation");
}

CudaEvaluation::~CudaEvaluation() { cudaStreamSynchronize(stream_); }

void CudaEvaluation::write(int id, const void* host, int64_t bytes) {
  check_cuda(cudaMemcpyAsync(ptr_[id], host, bytes, cudaMemcpyHostToDevice, stream_),
             "copying an evaluation feed in");
  check_cuda(cudaStreamSynchronize(stream_), "copying an evaluation feed in");
}

void CudaEvaluation::read(int id, void* host, int64_t bytes) const {
  check_cuda(cudaMemcpyAsync(host, ptr_[id], bytes, cudaMemcpyDeviceToHost, stream_),
             "copying an evaluation output out");
  check_cuda(cudaStreamSynchronize(stream_), "copying an evaluation output out");
}

void CudaEvaluation::run() {
  const Schedule& s = schedule();
  for (int k = 0; k < s.num_ops; ++k) {
    Run r{ptr_.data(), scratch_[k], stream_, cudnn_, cublas_};
    try {
      kernels_[k]->run(r);
    } catch (const std::exception& e) {
      throw StepError(op_failure(s.ops[k], e.what()));
    }
  }
  cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess)
    throw StepError(std::string("the evaluation failed on the device: ") +
                    cudaGetErrorString(e));
}

}  // namespace planner
