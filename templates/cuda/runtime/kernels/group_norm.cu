// GroupNorm and GroupNormGrad on the GPU, following planner/ops/group_norm.py (the CPU kernel's
// loops): [x, scale, bias] -> [y, mean, invstd]; [dy, x, scale, mean, invstd] -> [dx, dscale,
// dbias].
//
// Why it is built this way:
// - One block per (n, group) run of m contiguous values for the statistics and dx, one block
//   per channel for dscale and dbias: block reductions in double over a fixed tree
//   (groups.cuh), so results are the same bits every step, with no atomics.
// - Statistics in two passes (mean, then centred squares), as the CPU kernel.
#include <cmath>
#include <cstdint>

#include "../groups.cuh"
#include "group_norm.h"

namespace planner {
namespace {

__global__ void gn_forward(const float* __restrict__ x, const float* __restrict__ scale,
                           const float* __restrict__ bias, float* __restrict__ y,
                           float* __restrict__ mean, float* __restrict__ invstd, int64_t runs,
                           int64_t groups, int64_t per, int64_t space, double eps) {
  const int64_t m = per * space;
  for (int64_t k = blockIdx.x; k < runs; k += gridDim.x) {
    const float* xk = x + k * m;
    double s = 0;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) s += xk[i];
    const double mu = block_reduce(s, SumOp{}, 0.0) / static_cast<double>(m);
    double q = 0;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) q += (xk[i] - mu) * (xk[i] - mu);
    q = block_reduce(q, SumOp{}, 0.0);
    const float mu_f = static_cast<float>(mu);
    const float inv = static_cast<float>(1.0 / sqrt(q / static_cast<double>(m) + eps));
    if (threadIdx.x == 0) {
      mean[k] = mu_f;
      invstd[k] = inv;
    }
    const int64_t c0 = (k % groups) * per;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const int64_t c = c0 + i / space;
      y[k * m + i] = (xk[i] - mu_f) * inv * scale[c] + bias[c];
    }
  }
}

__global__ void gn_channel_grads(const float* __restrict__ dy, const float* __restrict__ x,
                                 const float* __restrict__ mean,
                                 const float* __restrict__ invstd, float* __restrict__ dscale,
                                 float* __restrict__ dbias, int64_t batch, int64_t channels,
                                 int64_t groups, int64_t per, int64_t space) {
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    double ds = 0, db = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t k = b * groups + c / per;
      const float mu = mean[k], inv = invstd[k];
      const int64_t base = (b * channels + c) * space;
      for (int64_t s = threadIdx.x; s < space; s += blockDim.x) {
        db += dy[base + s];
        ds += static_cast<double>(dy[base + s]) * ((x[base + s] - mu) * inv);
      }
    }
    ds = block_reduce(ds, SumOp{}, 0.0);
    db = block_reduce(db, SumOp{}, 0.0);
    if (threadIdx.x == 0) {
      dscale[c] = static_cast<float>(ds);
      dbias[c] = static_cast<float>(db);
    }
  }
}

__global__ void gn_dx(const float* __restrict__ dy, const float* __restrict__ x,
                      const float* __restrict__ scale, const float* __restrict__ mean,
                      const float* __restrict__ invstd, float* __restrict__ dx, int64_t runs,
                      int64_t groups, int64_t per, int64_t space) {
  const int64_t m = per * space;
  for (int64_t k = blockIdx.x; k < runs; k += gridDim.x) {
    const float mu = mean[k], inv = invstd[k];
    const int64_t c0 = (k % groups) * per, base = k * m;
    double sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const double g = static_cast<double>(dy[base + i]) * scale[c0 + i / space];
      sg += g;
      sgx += g * ((x[base + i] - mu) * inv);
    }
    const double mg = block_reduce(sg, SumOp{}, 0.0) / static_cast<double>(m);
    const double mgx = block_reduce(sgx, SumOp{}, 0.0) / static_cast<double>(m);
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const double g = static_cast<double>(dy[base + i]) * scale[c0 + i / space];
      const double xhat = (x[base + i] - mu) * inv;
      dx[base + i] = static_cast<float>(inv * (g - mg - xhat * mgx));
    }
  }
}

class GroupNorm : public Kernel {
 public:
  explicit GroupNorm(const Node& n)
      : threads_(block_threads(n)) {
    require_f32(n);
    g_ = group_norm_geometry(n.attrs, n.in.size(), n.in[n.in.size() == 5 ? 1 : 0].shape);
    for (const auto& t : n.in) ids_.push_back(t.id);
    for (const auto& t : n.out) ids_.push_back(t.id);
  }
  void run(const Run& r) override {
    const int64_t per = g_.channels / g_.groups, runs = g_.batch * g_.groups;
    if (runs == 0 || per * g_.space == 0) return;
    const unsigned run_blocks = static_cast<unsigned>(runs < 65535 ? runs : 65535);
    if (!g_.grad) {
      gn_forward<<<run_blocks, threads_, 0, r.stream>>>(
          r.at<float>(ids_[0]), r.at<float>(ids_[1]), r.at<float>(ids_[2]), r.at<float>(ids_[3]),
          r.at<float>(ids_[4]), r.at<float>(ids_[5]), runs, g_.groups, per, g_.space, g_.eps);
      PLANNER_LAUNCHED("GroupNorm");
      return;
    }
    const unsigned channel_blocks =
        static_cast<unsigned>(g_.channels < 65535 ? g_.channels : 65535);
    gn_channel_grads<<<channel_blocks, threads_, 0, r.stream>>>(
        r.at<float>(ids_[0]), r.at<float>(ids_[1]), r.at<float>(ids_[3]), r.at<float>(ids_[4]),
        r.at<float>(ids_[6]), r.at<float>(ids_[7]), g_.batch, g_.channels, g_.groups, per,
        g_.space);
    PLANNER_LAUNCHED("GroupNormGrad dscale dbias");
    gn_dx<<<run_blocks, threads_, 0, r.stream>>>(
        r.at<float>(ids_[0]), r.at<float>(ids_[1]), r.at<float>(ids_[2]), r.at<float>(ids_[3]),
        r.at<float>(ids_[4]), r.at<float>(ids_[5]), runs, g_.groups, per, g_.space);
    PLANNER_LAUNCHED("GroupNormGrad dx");
  }

 private:
  int threads_;
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
