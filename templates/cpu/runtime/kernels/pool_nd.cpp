// Pools over 1 to 3 spatial axes with torch's geometry and indices (planner/ops/pool_nd.py,
// common/pool_nd.h) as plain OpenMP loops: oneDNN's pooling has no adaptive windows of any
// size (its windows are one size per axis) and no indices, and its max drops NaN where torch
// keeps it. Forward ops split the outputs among the threads; the scatters (AvgPoolNDGrad,
// PoolScatter) split the planes, each thread writing its own planes, so sums are in a fixed
// order. An index outside its plane (PoolScatter, PoolGather: a max_unpool's indices are the
// user's) fails the step naming the node's op and the index, before the step runs when the
// indices are fed.
//
// float64 (a float64 model's 3-D and adaptive pools, and LRN's window sum): the same loops on
// doubles, so every thread count gives the same bits (each output, or each plane of a
// scatter, is one thread's, its taps in row-major order).
#include <algorithm>
#include <string>
#include <type_traits>

#include "../loops.h"
#include "pool_nd.h"

namespace planner {
namespace {

template <class T>
constexpr int pool_value_dtype() { return std::is_same_v<T, double> ? F64 : F32; }

// T: float, or double for a float64 node (the same loops, the average's sum in double
// either way).
template <class T>
class WindowPool : public Kernel {
 public:
  explicit WindowPool(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), idx_(n.out.size() > 1 ? n.out[1].id : -1),
        g_(pool_geometry(n, n.in[0].shape, n.out[0].shape,  // common/pool_nd.h
                         pool_value_dtype<T>())) {}
  void run(const Run& r) override {
    const T* x = r.at<T>(x_);
    T* y = r.at<T>(y_);
    int64_t* idx = idx_ >= 0 ? r.at<int64_t>(idx_) : nullptr;
    const PoolGeometry& g = g_;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < g.planes * g.out_plane; ++k) pool_output(g, x, y, idx, k);
  }

 private:
  int x_, y_, idx_;
  PoolGeometry g_;
};

template <class T>
class WindowPoolGrad : public Kernel {
 public:
  explicit WindowPoolGrad(const Node& n)
      : dy_(n.in[0].id), dx_(n.out[0].id),
        g_(pool_geometry(n, n.out[0].shape, n.in[0].shape, pool_value_dtype<T>())) {}
  void run(const Run& r) override {
    const T* dy = r.at<T>(dy_);
    T* dx = r.at<T>(dx_);
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
template <class T>
class PlaneIndexed : public Kernel {
 public:
  explicit PlaneIndexed(const Node& n)
      : a_(n.in[0].id), idx_(n.in[1].id), y_(n.out[0].id), op_(n.spec->op),
        p_(plane_indexing(n, pool_value_dtype<T>())) {}  // common/pool_nd.h
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[idx_]) check_plane_indices(r.at<int64_t>(idx_), p_, op_);
  }
  void run(const Run& r) override {
    const T* a = r.at<T>(a_);
    const int64_t* idx = r.at<int64_t>(idx_);
    T* y = r.at<T>(y_);
    check_plane_indices(idx, p_, op_);
    const int64_t plane = p_.plane, per = p_.per_plane;
    const bool scatter = p_.scatter, accumulate = p_.accumulate;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < p_.planes; ++p) {
      if (scatter) std::fill(y + p * plane, y + (p + 1) * plane, T(0));
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

// float32's kernel or float64's, by the node's values.
template <template <class> class K>
KernelPtr pool_kernel_of(const Node& n) {
  if (n.in[0].dtype == F64) return std::make_unique<K<double>>(n);
  return std::make_unique<K<float>>(n);
}

KernelPtr window_pool(const Node& n) { return pool_kernel_of<WindowPool>(n); }
KernelPtr window_pool_grad(const Node& n) { return pool_kernel_of<WindowPoolGrad>(n); }
KernelPtr plane_indexed(const Node& n) { return pool_kernel_of<PlaneIndexed>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(pool_nd) {
  r["MaxPoolND"] = {window_pool, "float32,int64|float64,int64"};
  r["AvgPoolND"] = {window_pool, "float32|float64"};
  r["AvgPoolNDGrad"] = {window_pool_grad, "float32|float64"};
  r["PoolScatter"] = {plane_indexed, "float32,int64|float64,int64"};
  r["PoolGather"] = {plane_indexed, "float32,int64|float64,int64"};
}

}  // namespace planner
