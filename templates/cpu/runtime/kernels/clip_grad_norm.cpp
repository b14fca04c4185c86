// ClipGradNorm [g1 .. gn] -> [g1 * c .. gn * c, total_norm] (planner/ops/clip_grad_norm.py):
// torch.nn.utils.clip_grad_norm_, each gradient's 2-norm summed in double (in a fixed order)
// and rounded to float, their norm likewise, c = min(max_norm / (total_norm + 1e-6), 1) in float. The outputs
// may be the gradients' bytes: the norm pass reads everything before the scale pass writes.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../loops.h"
#include "clip_grad_norm.h"

namespace planner {
namespace {

constexpr int kChunks = 64;

class ClipGradNorm : public Kernel {
 public:
  explicit ClipGradNorm(const Node& n) : c_(grad_clip(n)) {}  // common/clip_grad_norm.h
  void run(const Run& r) override {
    double squares = 0;  // of the per-gradient norms, each rounded to float as PyTorch's
    for (size_t k = 0; k < c_.in.size(); ++k) {
      const float* g = r.at<float>(c_.in[k]);
      const int64_t size = c_.sizes[k];
      // Fixed chunks summed in chunk order, not an OpenMP reduction (whose order varies
      // from run to run): the same bits every step, so a resumed run repeats exactly.
      const int64_t chunk = (size + kChunks - 1) / kChunks;
#pragma omp parallel for
      for (int c = 0; c < kChunks; ++c) {
        double sum = 0;
        const int64_t end = std::min(size, (c + 1) * chunk);
        for (int64_t i = c * chunk; i < end; ++i) sum += static_cast<double>(g[i]) * g[i];
        part_[c] = sum;
      }
      double sum = 0;
      for (int c = 0; c < kChunks; ++c) sum += part_[c];
      const double norm = static_cast<float>(std::sqrt(sum));
      squares += norm * norm;
    }
    const float total = static_cast<float>(std::sqrt(squares));
    const float coef = clip_factor(c_.max_norm, total);
    for (size_t k = 0; k < c_.in.size(); ++k) {
      const float* g = r.at<float>(c_.in[k]);
      float* y = r.at<float>(c_.out[k]);
      const int64_t size = c_.sizes[k];
#pragma omp parallel for
      for (int64_t i = 0; i < size; ++i) y[i] = g[i] * coef;
    }
    *r.at<float>(c_.total) = total;
  }

 private:
  GradClip c_;
  std::vector<double> part_ = std::vector<double>(kChunks);  // per chunk, reused every step
};

KernelPtr clip_grad_norm(const Node& n) { return std::make_unique<ClipGradNorm>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(clip_grad_norm) { r["ClipGradNorm"] = clip_grad_norm; }

}  // namespace planner
