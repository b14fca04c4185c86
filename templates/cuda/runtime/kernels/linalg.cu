// MatrixInverse, MatrixSolve, MatrixSlogdet, Cholesky, MatrixSvd and MatrixQr on the GPU (planner/ops/linalg.py):
// one thread per matrix of the batch, each factoring its matrix with common/small_linalg.h
// (the CPU kernel's functions) in its own float64 workspace of the op's scratch. Meant for
// the small matrices torch.linalg's training uses see: a batch of large matrices runs one
// thread each, slowly.
#include <cstdint>

#include "../groups.cuh"
#include "small_linalg.h"

namespace planner {
namespace {

__global__ void small_matrices_kernel(SmallLinalgShape s, const float* __restrict__ a,
                                      const float* __restrict__ b, float* __restrict__ y,
                                      float* __restrict__ y2, float* __restrict__ y3,
                                      int32_t* __restrict__ info,
                                      double* __restrict__ work) {
  const int64_t per = small_linalg_work(s);
  for (int64_t m = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; m < s.batch;
       m += int64_t{gridDim.x} * blockDim.x)
    small_linalg_one(s, m, a, b, y, y2, y3, info, work + m * per);
}

class SmallMatrices : public Kernel {
 public:
  explicit SmallMatrices(const Node& n)
      : s_(small_linalg_shape(n)), threads_(block_threads(n)), a_(n.in[0].id),
        b_(n.in.size() > 1 ? n.in[1].id : -1), y_(n.out[0].id),
        y2_(n.out.size() > 1 && has_values(s_) ? n.out[1].id : -1),
        y3_(s_.op == SmallLinalg::kSvd ? n.out[2].id : -1),
        info_(n.out.size() > 1 && !has_values(s_) ? n.out[1].id : -1) {
    blocks_ = blocks_for(s_.batch, threads_);
  }
  size_t scratch_bytes() const override {
    return sizeof(double) * static_cast<size_t>(s_.batch * small_linalg_work(s_));
  }
  size_t temp_bytes() const override { return scratch_bytes(); }
  void run(const Run& r) override {
    if (s_.batch == 0) return;
    small_matrices_kernel<<<blocks_, threads_, 0, r.stream>>>(
        s_, r.at<float>(a_), b_ >= 0 ? r.at<float>(b_) : nullptr, r.at<float>(y_),
        y2_ >= 0 ? r.at<float>(y2_) : nullptr, y3_ >= 0 ? r.at<float>(y3_) : nullptr,
        info_ >= 0 ? r.at<int32_t>(info_) : nullptr,
        reinterpret_cast<double*>(r.scratch));
    PLANNER_LAUNCHED("small matrices");
  }

 private:
  SmallLinalgShape s_;
  int threads_;
  int a_, b_, y_, y2_, y3_, info_;
  unsigned blocks_ = 1;
};

KernelPtr small_matrices(const Node& n) { return std::make_unique<SmallMatrices>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(linalg) {
  r["MatrixInverse"] = small_matrices;
  r["MatrixSolve"] = small_matrices;
  r["MatrixSlogdet"] = small_matrices;
  r["Cholesky"] = small_matrices;
  r["MatrixSvd"] = small_matrices;
  r["MatrixQr"] = small_matrices;
}

}  // namespace planner
