// NLLLoss and NLLLossGrad (planner/ops/nll_loss.py) as OpenMP loops over the positions of x seen
// as (outer, classes, inner): position p reads class c at base(p) + c * inner. Per position
//   l = -(1 - eps) w[y] x[y] - (eps / C) sum_c w[c] x[c]   (0 where y == ignore_index)
// reduced as the node's reduction; sums run in double. The gradient writes every class of a
// position: -g (eps / C) w[c], less g (1 - eps) w[y] at the label.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "../loops.h"
#include "nll_loss.h"

namespace planner {
namespace {

class NLLLoss : public Kernel {
 public:
  explicit NLLLoss(const Node& n) : e_(nll_loss(n)) { require_f32(n); }  // common/nll_loss.h
  // Fed labels are checked before any op runs, so a step that raises changes no state.
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[e_.labels]) check_labels(r.at<int64_t>(e_.labels));
  }
  void run(const Run& r) override {
    const int64_t* lab = r.at<int64_t>(e_.labels);
    check_labels(lab);
    const float* x = r.at<float>(e_.x);
    const float* w = e_.weight >= 0 ? r.at<float>(e_.weight) : nullptr;
    const int64_t positions = e_.positions(), cols = e_.classes.extent;
    const int64_t inner = e_.classes.inner;
    const double eps = e_.label_smoothing, spread = eps / static_cast<double>(cols);
    // The mean's denominator: the weights of the labels not ignored.
    double denominator = 0;
    for (int64_t p = 0; p < positions; ++p)
      if (lab[p] != e_.ignore_index) denominator += w ? w[lab[p]] : 1.0;
    if (!e_.grad) {
      float* out = r.at<float>(e_.out);
      const double total = sum_in_parts(positions, [&](int64_t p) {
        const float* xp = x + (p / inner) * cols * inner + p % inner;
        double l = 0;
        if (lab[p] != e_.ignore_index) {
          const double wy = w ? w[lab[p]] : 1.0;
          l = -(1.0 - eps) * wy * static_cast<double>(xp[lab[p] * inner]);
          if (eps != 0) {
            double s = 0;
            for (int64_t c = 0; c < cols; ++c) s += (w ? w[c] : 1.0) * xp[c * inner];
            l -= spread * s;
          }
        }
        if (e_.reduction == LossReduction::kNone) out[p] = static_cast<float>(l);
        return l;
      }, positions * cols >= kGrain);
      if (e_.reduction == LossReduction::kSum) *out = static_cast<float>(total);
      // The mean of no labels (all ignored) is NaN, as in PyTorch.
      if (e_.reduction == LossReduction::kMean) *out = static_cast<float>(total / denominator);
      return;
    }
    const float* dloss = r.at<float>(e_.dloss);
    float* dx = r.at<float>(e_.out);
    const bool per_position = e_.reduction == LossReduction::kNone;
    // As the reference: the weight dloss / denominator rounded to float first.
    const float scalar = e_.reduction == LossReduction::kMean
                             ? dloss[0] / static_cast<float>(denominator)
                             : dloss[0];
#pragma omp parallel for if(positions * cols >= kGrain)
    for (int64_t p = 0; p < positions; ++p) {
      float* d = dx + (p / inner) * cols * inner + p % inner;
      if (lab[p] == e_.ignore_index) {
        for (int64_t c = 0; c < cols; ++c) d[c * inner] = 0.f;
        continue;
      }
      const float g = per_position ? dloss[p] : scalar;
      for (int64_t c = 0; c < cols; ++c)
        d[c * inner] = -g * static_cast<float>(spread * (w ? w[c] : 1.0));
      d[lab[p] * inner] -= g * static_cast<float>((1.0 - eps) * (w ? w[lab[p]] : 1.0));
    }
  }

 private:
  // StepError for a label out of [0, classes) that is not ignore_index.
  void check_labels(const int64_t* lab) const {
    for (int64_t p = 0; p < e_.positions(); ++p) {
      if (lab[p] == e_.ignore_index) continue;
      if (lab[p] < 0 || lab[p] >= e_.classes.extent)
        throw StepError("label " + std::to_string(lab[p]) + " out of range [0, " +
                        std::to_string(e_.classes.extent) + ") (ignore_index " +
                        std::to_string(e_.ignore_index) + ")");
    }
  }

  NllLoss e_;
};

KernelPtr nll_loss_kernel(const Node& n) { return std::make_unique<NLLLoss>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(nll_loss) {
  r["NLLLoss"] = nll_loss_kernel;
  r["NLLLossGrad"] = nll_loss_kernel;
}

}  // namespace planner
