// TopK and TopKGrad (planner/ops/topk.py), on x seen as (outer, n, inner): one line of n
// elements per (outer, inner) pair. TopK orders the line's positions in the thread's own part
// of the scratch area (std::partial_sort: the first k of n in n log k) by the reference's rule:
// the larger first (smaller with largest=0), NaN above every number, equal values by lower
// index. TopKGrad writes zeros, then each dvalue at its position.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "../loops.h"

namespace planner {
namespace {

struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  Lines(const Shape& s, int64_t axis_attr) {
    const size_t axis = static_cast<size_t>(norm_axis(axis_attr, s.size()));
    for (size_t k = 0; k < s.size(); ++k) {
      if (k < axis) outer *= s[k];
      if (k > axis) inner *= s[k];
    }
    n = s.empty() ? 1 : s[axis];
  }
};

class TopK : public Kernel {
 public:
  explicit TopK(const Node& n)
      : x_(n.in[0].id), v_(n.out[0].id), i_(n.out[1].id), k_(n.attrs.i("k")),
        largest_(n.attrs.b("largest")), team_(std::max(1, n.threads)),
        lines_(n.in[0].shape, n.attrs.i("axis")) {
    if (n.in[0].dtype != F32 || n.out[0].dtype != F32 || n.out[1].dtype != I64)
      throw std::runtime_error("TopK: float32 values, int64 indices");
  }
  size_t scratch_bytes() const override { return sizeof(int64_t) * team_ * lines_.n; }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* v = r.at<float>(v_);
    int64_t* idx = r.at<int64_t>(i_);
    const int64_t n = lines_.n, inner = lines_.inner, k = k_;
    const int64_t total = lines_.outer * inner;
    const bool largest = largest_;
    const int team = std::min(team_, std::max(1, r.threads));
#pragma omp parallel num_threads(team)
    {
      int64_t* order = reinterpret_cast<int64_t*>(r.scratch) + omp_get_thread_num() * n;
#pragma omp for schedule(static)
      for (int64_t line = 0; line < total; ++line) {
        const int64_t o = line / inner, in = line % inner;
        const float* xl = x + o * n * inner + in;
        // a before b: the reference's order (module comment)
        auto before = [xl, inner, largest](int64_t a, int64_t b) {
          const float xa = xl[a * inner], xb = xl[b * inner];
          const bool na = std::isnan(xa), nb = std::isnan(xb);
          if (na != nb) return largest ? na : nb;
          if (!na && xa != xb) return largest ? xa > xb : xa < xb;
          return a < b;
        };
        for (int64_t j = 0; j < n; ++j) order[j] = j;
        // `before` is a strict total order (ties by index): every sort gives the same k. A
        // heap (partial_sort) pays for few of many; most of a line (MAE's shuffles sort all
        // 64) sorts faster whole: 100 -> ~40 us for 32 lines of 64 on the 2-core Xeon.
        if (2 * k >= n)
          std::sort(order, order + n, before);
        else
          std::partial_sort(order, order + k, order + n, before);
        float* vl = v + o * k * inner + in;
        int64_t* il = idx + o * k * inner + in;
        for (int64_t j = 0; j < k; ++j) {
          vl[j * inner] = xl[order[j] * inner];
          il[j * inner] = order[j];
        }
      }
    }
  }

 private:
  int x_, v_, i_;
  int64_t k_;
  bool largest_;
  int team_;
  Lines lines_;
};

class TopKGrad : public Kernel {
 public:
  explicit TopKGrad(const Node& n)
      : dv_(n.in[0].id), i_(n.in[1].id), dx_(n.out[0].id), size_(n.out[0].size()),
        lines_(n.in[0].shape, n.attrs.i("axis")), extent_(n.attrs.i("size")) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float* dv = r.at<float>(dv_);
    const int64_t* idx = r.at<int64_t>(i_);
    float* dx = r.at<float>(dx_);
    const int64_t k = lines_.n, inner = lines_.inner, extent = extent_;
    const int64_t total = lines_.outer * inner;
    std::fill(dx, dx + size_, 0.0f);
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad)
    for (int64_t line = 0; line < total; ++line) {
      const int64_t o = line / inner, in = line % inner;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * inner + in, to = idx[at];
        if (to < 0 || to >= extent) {
          ++bad;
          continue;
        }
        dx[(o * extent + to) * inner + in] = dv[at];
      }
    }
    if (bad == 0) return;
    const int64_t* first = std::find_if(idx, idx + total * k,
                                        [extent](int64_t i) { return i < 0 || i >= extent; });
    throw StepError("index " + std::to_string(*first) + " out of range [0, " +
                    std::to_string(extent) + ")");
  }

 private:
  int dv_, i_, dx_;
  int64_t size_;
  Lines lines_;
  int64_t extent_;
};

KernelPtr topk(const Node& n) { return std::make_unique<TopK>(n); }
KernelPtr topk_grad(const Node& n) { return std::make_unique<TopKGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(topk) {
  r["TopK"] = topk;
  r["TopKGrad"] = topk_grad;
}

}  // namespace planner
