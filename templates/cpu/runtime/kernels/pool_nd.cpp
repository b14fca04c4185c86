// Pools over 1 to 3 spatial axes with torch's geometry and indices (planner/ops/pool_nd.py,
// common/pool_nd.h) as plain OpenMP loops: oneDNN's pooling has no adaptive windows of any
// size (its windows are one size per axis) and no indices, and its max drops NaN where torch
// keeps it. Forward ops split the outputs among the threads; the scatters (AvgPoolNDGrad,
// PoolScatter) split the planes, each thread writing its own planes, so sums are in a fixed
// order. An index outside its plane (PoolScatter, PoolGather: a max_unpool's indices are the
// user's) fails the step naming the node's op and the index, before the step runs when the
// indices are fed.
#include <algorithm>
#include <string>

#include "../loops.h"
#include "pool_nd.h"

namespace planner {
namespace {

class WindowPool : public Kernel {
 public:
  explicit WindowPool(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), idx_(n.out.size() > 1 ? n.out[1].id : -1),
        g_(pool_geometry(n, n.in[0].shape, n.out[0].shape)) {}  // common/pool_nd.h
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    int64_t* idx = idx_ >= 0 ? r.at<int64_t>(idx_) : nullptr;
    const PoolGeometry& g = g_;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < g.planes * g.out_plane; ++k) pool_output(g, x, y, idx, k);
  }

 private:
  int x_, y_, idx_;
  PoolGeometry g_;
};

class WindowPoolGrad : public Kernel {
 public:
  explicit WindowPoolGrad(const Node& n)
      : dy_(n.in[0].id), dx_(n.out[0].id),
        g_(pool_geometry(n, n.out[0].shape, n.in[0].shape)) {}
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    float* dx = r.at<float>(dx_);
    const PoolGeometry& g = g_;
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < g.planes; ++plane) pool_plane_slopes(g, dy, dx, plane);
  }

 private:
  int dy_, dx_;
  PoolGeometry g_;
};

void check_plane_indices(const int64_t* idx, const PlaneIndexing& p, const std::string& op) {
  const int64_t count = p.planes * p.per_plane;
  for (int64_t k = 0; k < count; ++k)
    if (idx[k] < 0 || idx[k] >= p.plane)
      throw StepError(op + ": index " + std::to_string(idx[k]) + " of the indices input is out "
                      "of range [0, " + std::to_string(p.plane) + ")");
}

// PoolScatter [v, idx] -> y and PoolGather [x, idx] -> y, plane by plane.
class PlaneIndexed : public Kernel {
 public:
  explicit PlaneIndexed(const Node& n)
      : a_(n.in[0].id), idx_(n.in[1].id), y_(n.out[0].id), op_(n.spec->op),
        p_(plane_indexing(n)) {}  // common/pool_nd.h
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[idx_]) check_plane_indices(r.at<int64_t>(idx_), p_, op_);
  }
  void run(const Run& r) override {
    const float* a = r.at<float>(a_);
    const int64_t* idx = r.at<int64_t>(idx_);
    float* y = r.at<float>(y_);
    check_plane_indices(idx, p_, op_);
    const int64_t plane = p_.plane, per = p_.per_plane;
    const bool scatter = p_.scatter, accumulate = p_.accumulate;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < p_.planes; ++p) {
      if (scatter) std::fill(y + p * plane, y + (p + 1) * plane, 0.0f);
      for (int64_t k = p * per; k < (p + 1) * per; ++k) {
        if (!scatter) y[k] = a[p * plane + idx[k]];
        else if (accumulate) y[p * plane + idx[k]] += a[k];
        else y[p * plane + idx[k]] = a[k];
      }
    }
  }

 private:
  int a_, idx_, y_;
  std::string op_;
  PlaneIndexing p_;
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
