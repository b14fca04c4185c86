// GroupNorm [x, scale, bias] -> [y, mean, invstd] and GroupNormGrad [dy, x, scale, mean,
// invstd] -> [dx, dscale, dbias] (planner/ops/group_norm.py), as plain OpenMP loops: oneDNN's
// group normalization primitive is not in every oneDNN 3.x build this runtime supports.
// x is viewed as (N, G, m) for the statistics, each (n, g) a contiguous run of m values, and
// as (N, C, S) for the per-channel scale; sums run in double, in a fixed order per thread.
#include <omp.h>

#include <cmath>

#include "../loops.h"
#include "group_norm.h"

namespace planner {
namespace {

class GroupNorm : public Kernel {
 public:
  explicit GroupNorm(const Node& n) {
    require_f32(n);
    g_ = group_norm_geometry(n.attrs, n.in.size(), n.in[n.in.size() == 5 ? 1 : 0].shape);
    for (const auto& t : n.in) ids_.push_back(t.id);
    for (const auto& t : n.out) ids_.push_back(t.id);
  }
  void run(const Run& r) override { g_.grad ? backward(r) : forward(r); }

 private:
  // ids_: forward x, scale, bias, y, mean, invstd; backward dy, x, scale, mean, invstd, dx,
  // dscale, dbias.
  void forward(const Run& r) {
    const float* x = r.at<float>(ids_[0]);
    const float* scale = r.at<float>(ids_[1]);
    const float* bias = r.at<float>(ids_[2]);
    float* y = r.at<float>(ids_[3]);
    float* mean = r.at<float>(ids_[4]);
    float* invstd = r.at<float>(ids_[5]);
    const int64_t per = g_.channels / g_.groups, m = per * g_.space, space = g_.space;
    const int64_t runs = g_.batch * g_.groups;
    const double eps = g_.eps;
#pragma omp parallel for
    for (int64_t k = 0; k < runs; ++k) {
      const float* xk = x + k * m;
      double sum = 0;
      for (int64_t i = 0; i < m; ++i) sum += xk[i];
      const double mu = m ? sum / static_cast<double>(m) : NAN;
      double sq = 0;
      for (int64_t i = 0; i < m; ++i) sq += (xk[i] - mu) * (xk[i] - mu);
      const float mu_f = static_cast<float>(mu);
      const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(m) + eps));
      mean[k] = mu_f;
      invstd[k] = inv;
      const int64_t c0 = (k % g_.groups) * per;
      float* yk = y + k * m;
      for (int64_t c = 0; c < per; ++c) {
        const float a = scale[c0 + c], b = bias[c0 + c];
        for (int64_t s = 0; s < space; ++s) {
          const int64_t i = c * space + s;
          yk[i] = (xk[i] - mu_f) * inv * a + b;
        }
      }
    }
  }

  void backward(const Run& r) {
    const float* dy = r.at<float>(ids_[0]);
    const float* x = r.at<float>(ids_[1]);
    const float* scale = r.at<float>(ids_[2]);
    const float* mean = r.at<float>(ids_[3]);
    const float* invstd = r.at<float>(ids_[4]);
    float* dx = r.at<float>(ids_[5]);
    float* dscale = r.at<float>(ids_[6]);
    float* dbias = r.at<float>(ids_[7]);
    const int64_t per = g_.channels / g_.groups, m = per * g_.space, space = g_.space;
    const int64_t runs = g_.batch * g_.groups, channels = g_.channels, batch = g_.batch;
    // dscale, dbias: per channel, over the batch and space.
#pragma omp parallel for
    for (int64_t c = 0; c < channels; ++c) {
      double ds = 0, db = 0;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t k = b * g_.groups + c / per;
        const float mu = mean[k], inv = invstd[k];
        const float* dyc = dy + (b * channels + c) * space;
        const float* xc = x + (b * channels + c) * space;
        for (int64_t s = 0; s < space; ++s) {
          db += dyc[s];
          ds += static_cast<double>(dyc[s]) * ((xc[s] - mu) * inv);
        }
      }
      dscale[c] = static_cast<float>(ds);
      dbias[c] = static_cast<float>(db);
    }
    // dx = invstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale, per (n, group).
#pragma omp parallel for
    for (int64_t k = 0; k < runs; ++k) {
      const float mu = mean[k], inv = invstd[k];
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
          dx[i] = static_cast<float>(inv * (g - mg - xhat * mgx));
        }
    }
  }

  GroupNormGeometry g_{};  // common/group_norm.h
  std::vector<int> ids_;
};

KernelPtr group_norm(const Node& n) { return std::make_unique<GroupNorm>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(group_norm) {
  r["GroupNorm"] = group_norm;
  r["GroupNormGrad"] = group_norm;
}

}  // namespace planner
