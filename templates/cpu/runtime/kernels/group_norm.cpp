// GroupNorm [x, scale, bias] -> [y, mean, invstd] and GroupNormGrad [dy, x, scale, mean,
// invstd] -> [dx, dscale, dbias] (planner/ops/group_norm.py), as plain OpenMP loops: oneDNN's
// group normalization primitive is not in every oneDNN 3.x build this runtime supports.
// x is viewed as (N, G, m) for the statistics, each (n, g) a contiguous run of m values, and
// as (N, C, S) for the per-channel scale; sums run in double, in a fixed order per thread.
// One loop for float32 and float64 (T): in float64 every step is PyTorch's float64 formula.
#include <omp.h>

#include <cmath>
#include <stdexcept>

#include "../loops.h"
#include "group_norm.h"

namespace planner {
namespace {

template <class T>
class GroupNorm : public Kernel {
 public:
  explicit GroupNorm(const Node& n) {
    if constexpr (sizeof(T) == sizeof(float)) require_f32(n);
    else if (!all_f64(n)) throw std::runtime_error("GroupNorm: float64 operands and results");
    g_ = group_norm_geometry(n.attrs, n.in.size(), n.in[n.in.size() == 5 ? 1 : 0].shape);
    for (const auto& t : n.in) ids_.push_back(t.id);
    for (const auto& t : n.out) ids_.push_back(t.id);
  }
  void run(const Run& r) override { g_.grad ? backward(r) : forward(r); }

 private:
  // ids_: forward x, scale, bias, y, mean, invstd; backward dy, x, scale, mean, invstd, dx,
  // dscale, dbias.
  void forward(const Run& r) {
    const T* x = r.template at<T>(ids_[0]);
    const T* scale = r.template at<T>(ids_[1]);
    const T* bias = r.template at<T>(ids_[2]);
    T* y = r.template at<T>(ids_[3]);
    T* mean = r.template at<T>(ids_[4]);
    T* invstd = r.template at<T>(ids_[5]);
    const int64_t per = g_.channels / g_.groups, m = per * g_.space, space = g_.space;
    const int64_t runs = g_.batch * g_.groups;
    const double eps = g_.eps;
#pragma omp parallel for
    for (int64_t k = 0; k < runs; ++k) {
      const T* xk = x + k * m;
      double sum = 0;
      for (int64_t i = 0; i < m; ++i) sum += xk[i];
      const double mu = m ? sum / static_cast<double>(m) : NAN;
      double sq = 0;
      for (int64_t i = 0; i < m; ++i) sq += (xk[i] - mu) * (xk[i] - mu);
      const T mu_f = static_cast<T>(mu);
      const T inv = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(m) + eps));
      mean[k] = mu_f;
      invstd[k] = inv;
      const int64_t c0 = (k % g_.groups) * per;
      T* yk = y + k * m;
      for (int64_t c = 0; c < per; ++c) {
        const T a = scale[c0 + c], b = bias[c0 + c];
        for (int64_t s = 0; s < space; ++s) {
          const int64_t i = c * space + s;
          yk[i] = (xk[i] - mu_f) * inv * a + b;
        }
      }
    }
  }

  void backward(const Run& r) {
    const T* dy = r.template at<T>(ids_[0]);
    const T* x = r.template at<T>(ids_[1]);
    const T* scale = r.template at<T>(ids_[2]);
    const T* mean = r.template at<T>(ids_[3]);
    const T* invstd = r.template at<T>(ids_[4]);
    T* dx = r.template at<T>(ids_[5]);
    T* dscale = r.template at<T>(ids_[6]);
    T* dbias = r.template at<T>(ids_[7]);
    const int64_t per = g_.channels / g_.groups, m = per * g_.space, space = g_.space;
    const int64_t runs = g_.batch * g_.groups, channels = g_.channels, batch = g_.batch;
    // dscale, dbias: per channel, over the batch and space.
#pragma omp parallel for
    for (int64_t c = 0; c < channels; ++c) {
      double ds = 0, db = 0;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t k = b * g_.groups + c / per;
        const T mu = mean[k], inv = invstd[k];
        const T* dyc = dy + (b * channels + c) * space;
        const T* xc = x + (b * channels + c) * space;
        for (int64_t s = 0; s < space; ++s) {
          db += dyc[s];
          ds += static_cast<double>(dyc[s]) * ((xc[s] - mu) * inv);
        }
      }
      dscale[c] = static_cast<T>(ds);
      dbias[c] = static_cast<T>(db);
    }
    // dx = invstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale, per (n, group).
#pragma omp parallel for
    for (int64_t k = 0; k < runs; ++k) {
      const T mu = mean[k], inv = invstd[k];
      const int64_t c0 = (k % g_.groups) * per, base = k * m;
      double sg = 0, sgx = 0;
      for (int64_t c = 0; c < per; ++c)
        for (int64_t s = 0; s < space; ++s) {
          const int64_t i = base + c * space + s;
          const double g = static_cast<double>(dy[i]) * scale[c0 + c];
          sg += g;
          sgx += g * ((x[i] - mu) * inv);
        }
      const double mg = sg / static_cast<double>(m), mgx = sgx / static_cast<double>(m);
      for (int64_t c = 0; c < per; ++c)
        for (int64_t s = 0; s < space; ++s) {
          const int64_t i = base + c * space + s;
          const double g = static_cast<double>(dy[i]) * scale[c0 + c];
          const double xhat = (x[i] - mu) * inv;
          dx[i] = static_cast<T>(inv * (g - mg - xhat * mgx));
        }
    }
  }

  GroupNormGeometry g_{};  // common/group_norm.h
  std::vector<int> ids_;
};

KernelPtr group_norm(const Node& n) {
  if (n.in[0].dtype == F64) return std::make_unique<GroupNorm<double>>(n);
  return std::make_unique<GroupNorm<float>>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(group_norm) {
  r["GroupNorm"] = {group_norm, "float32|float64"};
  r["GroupNormGrad"] = {group_norm, "float32|float64"};
}

}  // namespace planner
