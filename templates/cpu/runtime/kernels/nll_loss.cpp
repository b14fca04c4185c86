// NLLLoss and NLLLossGrad (planner/ops/nll_loss.py) as OpenMP loops over the positions of x seen
// as (outer, classes, inner): position p reads class c at base(p) + c * inner. Per position
//   l = -(1 - eps) w[y] x[y] - (eps / C) sum_c w[c] x[c]   (0 where y == ignore_index)
// reduced as the node's reduction; sums run in double. The gradient writes every class of a
// position: -g (eps / C) w[c], less g (1 - eps) w[y] at the label. T: float, or double for a
// float64 node (the same loops; the loss summed in parts fixed by the sizes, loops.h, so every
// thread count gives the same bits).
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "../loops.h"
#include "nll_loss.h"

namespace planner {
namespace {

template <class T>
class NLLLoss : public Kernel {
 public:
  explicit NLLLoss(const Node& n) : e_(nll_loss(n)) {  // common/nll_loss.h
    const int want = std::is_same_v<T, double> ? F64 : F32;
    for (const auto* side : {&n.in, &n.out})
      for (const TensorRef& t : *side)
        if (t.dtype != want && t.dtype != I64)
          throw std::runtime_error(std::string("NLLLoss: ") +
                                   (want == F64 ? "float64" : "float32") + " values, int64 labels");
  }
  // Fed labels are checked before any op runs, so a step that raises changes no state.
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[e_.labels]) check_labels(r.at<int64_t>(e_.labels));
  }
  void run(const Run& r) override {
    const int64_t* lab = r.at<int64_t>(e_.labels);
    check_labels(lab);
    const T* x = r.at<T>(e_.x);
    const T* w = e_.weight >= 0 ? r.at<T>(e_.weight) : nullptr;
    const int64_t positions = e_.positions(), cols = e_.classes.extent;
    const int64_t inner = e_.classes.inner;
    const double eps = e_.label_smoothing, spread = eps / static_cast<double>(cols);
    // The mean's denominator: the weights of the labels not ignored.
    double denominator = 0;
    for (int64_t p = 0; p < positions; ++p)
      if (lab[p] != e_.ignore_index) denominator += w ? w[lab[p]] : 1.0;
    if (!e_.grad) {
      T* out = r.at<T>(e_.out);
      const double total = sum_in_parts(positions, [&](int64_t p) {
        const T* xp = x + (p / inner) * cols * inner + p % inner;
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
        if (e_.reduction == LossReduction::kNone) out[p] = static_cast<T>(l);
        return l;
      }, positions * cols >= kGrain);
      if (e_.reduction == LossReduction::kSum) *out = static_cast<T>(total);
      // The mean of no labels (all ignored) is NaN, as in PyTorch.
      if (e_.reduction == LossReduction::kMean) *out = static_cast<T>(total / denominator);
      return;
    }
    const T* dloss = r.at<T>(e_.dloss);
    T* dx = r.at<T>(e_.out);
    const bool per_position = e_.reduction == LossReduction::kNone;
    // As the reference: the weight dloss / denominator rounded to T first.
    const T scalar = e_.reduction == LossReduction::kMean
                         ? dloss[0] / static_cast<T>(denominator)
                             : dloss[0];
#pragma omp parallel for if(positions * cols >= kGrain)
    for (int64_t p = 0; p < positions; ++p) {
      T* d = dx + (p / inner) * cols * inner + p % inner;
      if (lab[p] == e_.ignore_index) {
        for (int64_t c = 0; c < cols; ++c) d[c * inner] = T(0);
        continue;
      }
      const T g = per_position ? dloss[p] : scalar;
      for (int64_t c = 0; c < cols; ++c)
        d[c * inner] = -g * static_cast<T>(spread * (w ? w[c] : 1.0));
      d[lab[p] * inner] -= g * static_cast<T>((1.0 - eps) * (w ? w[lab[p]] : 1.0));
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

KernelPtr nll_loss_kernel(const Node& n) {
  if (n.out[0].dtype == F64) return std::make_unique<NLLLoss<double>>(n);
  return std::make_unique<NLLLoss<float>>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(nll_loss) {
  r["NLLLoss"] = {nll_loss_kernel, "float32,int64|float64,int64"};
  r["NLLLossGrad"] = {nll_loss_kernel, "float32,int64|float64,int64"};
}

}  // namespace planner
