// MatrixSvd and MatrixQr (planner/ops/linalg.py): the matrices of the batch split between
// threads, each factored by common/small_linalg.h (the CUDA kernel's code) in its thread's part
// of the scratch. The factorizations LAPACK does for the CPU are in lapack.cpp.
#include <omp.h>

#include <algorithm>

#include "../loops.h"
#include "small_linalg.h"

namespace planner {
namespace {

class SmallMatrices : public Kernel {
 public:
  explicit SmallMatrices(const Node& n)
      : s_(small_linalg_shape(n)), threads_(n.threads), a_(n.in[0].id),
        b_(n.in.size() > 1 ? n.in[1].id : -1), y_(n.out[0].id),
        y2_(n.out.size() > 1 && has_values(s_) ? n.out[1].id : -1),
        y3_(s_.op == SmallLinalg::kSvd ? n.out[2].id : -1),
        info_(n.out.size() > 1 && !has_values(s_) ? n.out[1].id : -1) {}
  size_t scratch_bytes() const override {
    return sizeof(double) * static_cast<size_t>(threads_ * small_linalg_work(s_));
  }
  void run(const Run& r) override {
    const float* a = r.at<float>(a_);
    const float* b = b_ >= 0 ? r.at<float>(b_) : nullptr;
    float* y = r.at<float>(y_);
    float* y2 = y2_ >= 0 ? r.at<float>(y2_) : nullptr;
    float* y3 = y3_ >= 0 ? r.at<float>(y3_) : nullptr;
    int32_t* info = info_ >= 0 ? r.at<int32_t>(info_) : nullptr;
    double* scratch = reinterpret_cast<double*>(r.scratch);
    const int64_t work = small_linalg_work(s_);
    const SmallLinalgShape s = s_;
    const int threads = std::max(1, std::min(r.threads, threads_));  // the scratch's parts
#pragma omp parallel for num_threads(threads) if(s.batch > 1 && s.batch * s.n * s.n * s.n >= kGrain)
    for (int64_t m = 0; m < s.batch; ++m)
      small_linalg_one(s, m, a, b, y, y2, y3, info, scratch + omp_get_thread_num() * work);
  }

 private:
  SmallLinalgShape s_;
  int threads_;
  int a_, b_, y_, y2_, y3_, info_;
};

KernelPtr small_matrices(const Node& n) { return std::make_unique<SmallMatrices>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(linalg) {
  r["MatrixSvd"] = small_matrices;
  r["MatrixQr"] = small_matrices;
}

}  // namespace planner
