// Pools over 1 to 3 spatial axes on the GPU (planner/ops/pool_nd.py), the windows of
// common/pool_nd.h as the CPU walks them: MaxPoolND and AvgPoolND one thread per output;
// AvgPoolNDGrad and PoolScatter one thread per (n, c) plane, walking its outputs in order (no
// atomics, so sums come out in the CPU's order); PoolGather one thread per output. An index
// outside its plane would need a host read to fail the step, so it poisons instead: PoolGather
// writes NaN, PoolScatter NaN over the plane's first element.
#include <cmath>
#include <cstdint>
#include <string>

#include "../groups.cuh"
#include "pool_nd.h"

namespace planner {
namespace {

__global__ void window_pools(const float* __restrict__ x, float* __restrict__ y,
                             int64_t* __restrict__ idx, PoolGeometry g) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < g.planes * g.out_plane;
       k += int64_t{gridDim.x} * blockDim.x)
    pool_output(g, x, y, idx, k);  // common/pool_nd.h
}

__global__ void window_pool_slopes(const float* __restrict__ dy, float* __restrict__ dx,
                                   PoolGeometry g) {
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < g.planes;
       p += int64_t{gridDim.x} * blockDim.x)
    pool_plane_slopes(g, dy, dx, p);
}

__global__ void plane_scatter(const float* __restrict__ v, const int64_t* __restrict__ idx,
                              float* __restrict__ y, int64_t planes, int64_t plane, int64_t per,
                              bool accumulate) {
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < planes;
       p += int64_t{gridDim.x} * blockDim.x) {
    float* out = y + p * plane;
    for (int64_t i = 0; i < plane; ++i) out[i] = 0.0f;
    bool bad = false;
    for (int64_t k = p * per; k < (p + 1) * per; ++k) {
      const int64_t i = idx[k];
      if (i < 0 || i >= plane) bad = true;
      else out[i] = accumulate ? out[i] + v[k] : v[k];
    }
    if (bad && plane > 0) out[0] = NAN;
  }
}

__global__ void plane_gather(const float* __restrict__ x, const int64_t* __restrict__ idx,
                             float* __restrict__ y, int64_t count, int64_t plane, int64_t per) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < count;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx[k];
    y[k] = i >= 0 && i < plane ? x[k / per * plane + i] : NAN;
  }
}

class WindowPool : public Kernel {
 public:
  explicit WindowPool(const Node& n)
      : threads_(block_threads(n)), x_(n.in[0].id), y_(n.out[0].id),
        idx_(n.out.size() > 1 ? n.out[1].id : -1),
        g_(pool_geometry(n, n.in[0].shape, n.out[0].shape)) {  // common/pool_nd.h
    blocks_ = blocks_for(g_.planes * g_.out_plane, threads_);
  }
  void run(const Run& r) override {
    if (g_.planes * g_.out_plane == 0) return;
    window_pools<<<blocks_, threads_, 0, r.stream>>>(
        r.at<float>(x_), r.at<float>(y_), idx_ >= 0 ? r.at<int64_t>(idx_) : nullptr, g_);
    PLANNER_LAUNCHED("window_pools");
  }

 private:
  int threads_;
  int x_, y_, idx_;
  PoolGeometry g_;
  unsigned blocks_ = 1;
};

class WindowPoolGrad : public Kernel {
 public:
  explicit WindowPoolGrad(const Node& n)
      : threads_(block_threads(n)), dy_(n.in[0].id), dx_(n.out[0].id),
        g_(pool_geometry(n, n.out[0].shape, n.in[0].shape)) {
    blocks_ = blocks_for(g_.planes, threads_);
  }
  void run(const Run& r) override {
    if (g_.planes == 0) return;
    window_pool_slopes<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(dy_), r.at<float>(dx_),
                                                           g_);
    PLANNER_LAUNCHED("window_pool_slopes");
  }

 private:
  int threads_;
  int dy_, dx_;
  PoolGeometry g_;
  unsigned blocks_ = 1;
};

class PlaneIndexed : public Kernel {
 public:
  explicit PlaneIndexed(const Node& n)
      : threads_(block_threads(n)), a_(n.in[0].id), idx_(n.in[1].id), y_(n.out[0].id),
        p_(plane_indexing(n)), count_(n.in[1].size()) {  // common/pool_nd.h
    blocks_ = blocks_for(p_.scatter ? p_.planes : count_, threads_);
  }
  void run(const Run& r) override {
    if (p_.planes == 0) return;
    if (p_.scatter)
      plane_scatter<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(a_), r.at<int64_t>(idx_),
                                                        r.at<float>(y_), p_.planes, p_.plane,
                                                        p_.per_plane, p_.accumulate);
    else if (count_ > 0)
      plane_gather<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(a_), r.at<int64_t>(idx_),
                                                       r.at<float>(y_), count_, p_.plane,
                                                       p_.per_plane);
    PLANNER_LAUNCHED("plane_indexed");
  }

 private:
  int threads_;
  int a_, idx_, y_;
  PlaneIndexing p_;
  int64_t count_;
  unsigned blocks_ = 1;
};

KernelPtr window_pool(const Node& n) { return std::make_unique<WindowPool>(n); }
KernelPtr window_pool_grad(const Node& n) { return std::make_unique<WindowPoolGrad>(n); }
KernelPtr plane_indexed(const Node& n) { return std::make_unique<PlaneIndexed>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(pool_nd) {
  r["MaxPoolND"] = window_pool;
  r["AvgPoolND"] = window_pool;
  r["AvgPoolNDGrad"] = window_pool_grad;
  r["PoolScatter"] = plane_indexed;
  r["PoolGather"] = plane_indexed;
}

}  // namespace planner
