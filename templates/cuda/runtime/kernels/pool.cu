// Pooling as plain CUDA kernels: MaxPool, MaxPoolGrad, AvgPool, AvgPoolGrad, GlobalAvgPool.
//
// Why not cuDNN pooling: its semantics differ from the reference (planner/ops/pool.py) in
// exactly the cases that matter here. It pads symmetrically (ours are [top, left, bottom,
// right]); it has no dilation; ceil_mode's last partial window and PyTorch's divisor (the
// window clipped to the padded input, or only its input elements) are not its averages; and
// its max backward needs y and routes ties its own way, where the reference takes [dy, x] and
// gives the gradient to the first maximum in row-major tap order. Pools are bandwidth-bound,
// so a direct kernel costs little.
//
// Every tap outside the input (padding, or ceil_mode's rows beyond it) is -inf for max and 0
// for average. The backward kernels gather (one thread per dx element, over the windows that
// hold it): no atomics, deterministic, nothing in scratch; MaxPoolGrad recomputes each
// candidate window's first maximum instead of storing indices.
//
// Mixed precision: every kernel is a template over the data's type (float32, bfloat16,
// float16): loads widen to float32, sums are float32, each output is rounded once. A max of
// low values is one of them, so MaxPool in a low type is exact. GlobalAvgPool of a low x writes
// a float32 mean (a reduction stays float32: planner/frontend/passes/precision.py).
#include "../cudnn_kernel.h"
#include "../low_float.cuh"
#include "pool.h"

namespace planner {
namespace {

struct Geo {
  int64_t planes;  // N * C
  int H, W, OH, OW;
  int kh, kw, sh, sw, dh, dw;
  int top, left, bottom, right;
};

// Window w of a pool over input x (N,C,H,W) with output y, in the kernels' ints.
Geo geometry(const PoolWindow& w, const Shape& x, const Shape& y) {
  return Geo{x[0] * x[1], to_int(x[2], "H"), to_int(x[3], "W"), to_int(y[2], "OH"),
             to_int(y[3], "OW"), to_int(w.kernel[0], "kernel"), to_int(w.kernel[1], "kernel"),
             to_int(w.stride[0], "stride"), to_int(w.stride[1], "stride"),
             to_int(w.dilation[0], "dilation"), to_int(w.dilation[1], "dilation"),
             to_int(w.pad_begin[0], "pad"), to_int(w.pad_begin[1], "pad"),
             to_int(w.pad_end[0], "pad"), to_int(w.pad_end[1], "pad")};
}

constexpr int kPoolThreads = 256;

#define PLANNER_GRID_STRIDE(i, total)                                               \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (total); \
       i += int64_t{gridDim.x} * blockDim.x)

// The first maximum of window (oh, ow) of plane xp: its tap (row-major index) and value.
// Taps outside the input are -inf; NaN wins as in numpy's max / argmax.
template <class T>
__device__ inline int window_argmax(const T* __restrict__ xp, const Geo& g, int oh, int ow,
                                    float* value) {
  int best_tap = -1;
  float best = 0.f;
  const int h0 = oh * g.sh - g.top, w0 = ow * g.sw - g.left;
  for (int i = 0; i < g.kh; ++i) {
    const int h = h0 + i * g.dh;
    for (int j = 0; j < g.kw; ++j) {
      const int w = w0 + j * g.dw;
      const float v = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? widen(xp[h * g.W + w]) : -INFINITY;
      if (best_tap < 0 || v > best || (v != v && best == best)) {
        best = v;
        best_tap = i * g.kw + j;
      }
    }
  }
  *value = best;
  return best_tap;
}

template <class T>
__global__ void max_pool(const T* __restrict__ x, T* __restrict__ y, Geo g) {
  const int64_t total = g.planes * g.OH * g.OW;
  PLANNER_GRID_STRIDE(i, total) {
    const int ow = static_cast<int>(i % g.OW), oh = static_cast<int>(i / g.OW % g.OH);
    const int64_t p = i / (int64_t{g.OW} * g.OH);
    float v;
    window_argmax(x + p * g.H * g.W, g, oh, ow, &v);
    y[i] = narrow<T>(v);
  }
}

// Visits every (window, tap) that reads input element (h, w): windows oh with
// oh * s + tap * d == h + pad_lo, 0 <= oh < out.
template <class F>
__device__ inline void for_windows(int h, int pad, int s, int d, int k, int out, F f) {
  const int ph = h + pad;
  for (int t = 0; t < k; ++t) {
    const int r = ph - t * d;
    if (r < 0) break;
    if (r % s) continue;
    const int o = r / s;
    if (o < out) f(o, t);
  }
}

template <class T>
__global__ void max_pool_grad(const T* __restrict__ dy, const T* __restrict__ x,
                              T* __restrict__ dx, Geo g) {
  const int64_t total = g.planes * g.H * g.W;
  PLANNER_GRID_STRIDE(i, total) {
    const int w = static_cast<int>(i % g.W), h = static_cast<int>(i / g.W % g.H);
    const int64_t p = i / (int64_t{g.W} * g.H);
    const T* xp = x + p * g.H * g.W;
    const T* dyp = dy + p * g.OH * g.OW;
    float sum = 0.f;
    for_windows(h, g.top, g.sh, g.dh, g.kh, g.OH, [&](int oh, int ti) {
      for_windows(w, g.left, g.sw, g.dw, g.kw, g.OW, [&](int ow, int tj) {
        float v;
        if (window_argmax(xp, g, oh, ow, &v) == ti * g.kw + tj) sum += widen(dyp[oh * g.OW + ow]);
      });
    });
    dx[i] = narrow<T>(sum);
  }
}

// How many taps of the window starting at `start` (padded coordinates) fall in [lo, hi).
__device__ inline int taps_in(int start, int k, int lo, int hi) {
  const int a = max(start, lo), b = min(start + k, hi);
  return b > a ? b - a : 0;
}

// The reference's divisor of window (oh, ow): its input elements, or with count_include_pad
// the window clipped to the padded input (never ceil_mode's rows beyond it).
__device__ inline float avg_divisor(const Geo& g, bool include_pad, int oh, int ow) {
  const int sh = oh * g.sh, sw = ow * g.sw;  // window start, padded coordinates
  if (include_pad)
    return static_cast<float>(taps_in(sh, g.kh, 0, g.top + g.H + g.bottom) *
                              taps_in(sw, g.kw, 0, g.left + g.W + g.right));
  return static_cast<float>(taps_in(sh, g.kh, g.top, g.top + g.H) *
                            taps_in(sw, g.kw, g.left, g.left + g.W));
}

template <class T>
__global__ void avg_pool(const T* __restrict__ x, T* __restrict__ y, Geo g, bool include_pad) {
  const int64_t total = g.planes * g.OH * g.OW;
  PLANNER_GRID_STRIDE(i, total) {
    const int ow = static_cast<int>(i % g.OW), oh = static_cast<int>(i / g.OW % g.OH);
    const T* xp = x + i / (int64_t{g.OW} * g.OH) * g.H * g.W;
    const int h0 = oh * g.sh - g.top, w0 = ow * g.sw - g.left;
    float sum = 0.f;
    for (int h = max(h0, 0); h < min(h0 + g.kh, g.H); ++h)
      for (int w = max(w0, 0); w < min(w0 + g.kw, g.W); ++w) sum += widen(xp[h * g.W + w]);
    y[i] = narrow<T>(sum / avg_divisor(g, include_pad, oh, ow));
  }
}

template <class T>
__global__ void avg_pool_grad(const T* __restrict__ dy, T* __restrict__ dx, Geo g,
                              bool include_pad) {
  const int64_t total = g.planes * g.H * g.W;
  PLANNER_GRID_STRIDE(i, total) {
    const int w = static_cast<int>(i % g.W), h = static_cast<int>(i / g.W % g.H);
    const T* dyp = dy + i / (int64_t{g.W} * g.H) * g.OH * g.OW;
    float sum = 0.f;
    for_windows(h, g.top, g.sh, 1, g.kh, g.OH, [&](int oh, int) {
      for_windows(w, g.left, g.sw, 1, g.kw, g.OW, [&](int ow, int) {
        sum += widen(dyp[oh * g.OW + ow]) / avg_divisor(g, include_pad, oh, ow);
      });
    });
    dx[i] = narrow<T>(sum);
  }
}

// One warp per plane: the mean of its hw elements.
template <class T>
__global__ void global_avg_pool(const T* __restrict__ x, float* __restrict__ y,
                                int64_t planes, int64_t hw) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t p = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; p < planes;
       p += warps) {
    const T* xp = x + p * hw;
    float sum = 0.f;
    for (int64_t k = lane; k < hw; k += 32) sum += widen(xp[k]);
    for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) y[p] = sum / static_cast<float>(hw);
  }
}

// ---- kernels ---------------------------------------------------------------------------------

enum class PoolKind { Max, MaxGrad, Avg, AvgGrad };

class Pool : public Kernel {
 public:
  Pool(const Node& n, PoolKind kind)
      : kind_(kind),
        in0_(n.in[0].id),
        in1_(n.in.size() > 1 ? n.in[1].id : -1),
        out_(n.out[0].id) {
    std::vector<TensorRef> all = n.in;
    all.insert(all.end(), n.out.begin(), n.out.end());
    type_ = one_float_type(all, "pooling");
    // The forward pool's x and y, whichever op this is.
    const Shape *x = &n.in[0].shape, *y = &n.out[0].shape;  // MaxPool, AvgPool: [x] -> y
    if (kind == PoolKind::MaxGrad) {  // [dy, x] -> dx
      if (n.out[0].shape != n.in[1].shape)
        throw std::runtime_error("MaxPoolGrad: dx " + shape_text(n.out[0].shape) +
                                 " differs from x " + shape_text(n.in[1].shape));
      x = &n.in[1].shape;
      y = &n.in[0].shape;
    } else if (kind == PoolKind::AvgGrad) {  // [dy] -> dx of shape input_shape
      x = &n.out[0].shape;
      y = &n.in[0].shape;
    }
    const PoolWindow w = pool_window(n.attrs, *x, *y);  // common/pool.h
    g_ = geometry(w, *x, *y);
    if (kind == PoolKind::Avg || kind == PoolKind::AvgGrad) {
      if (g_.dh != 1 || g_.dw != 1) throw std::runtime_error("AvgPool has no dilations");
      include_pad_ = w.count_include_pad;
    }
  }

  void run(const Run& r) override {
    const bool backward = kind_ == PoolKind::MaxGrad || kind_ == PoolKind::AvgGrad;
    const int64_t total = g_.planes * (backward ? int64_t{g_.H} * g_.W : int64_t{g_.OH} * g_.OW);
    const unsigned blocks = blocks_for(total, kPoolThreads);
    with_float(type_, [&](auto t) {
      using T = decltype(t);
      const T* a = r.at<T>(in0_);
      T* out = r.at<T>(out_);
      switch (kind_) {
        case PoolKind::Max:
          max_pool<T><<<blocks, kPoolThreads, 0, r.stream>>>(a, out, g_);
          break;
        case PoolKind::MaxGrad:
          max_pool_grad<T><<<blocks, kPoolThreads, 0, r.stream>>>(a, r.at<T>(in1_), out, g_);
          break;
        case PoolKind::Avg:
          avg_pool<T><<<blocks, kPoolThreads, 0, r.stream>>>(a, out, g_, include_pad_);
          break;
        case PoolKind::AvgGrad:
          avg_pool_grad<T><<<blocks, kPoolThreads, 0, r.stream>>>(a, out, g_, include_pad_);
          break;
      }
    });
    PLANNER_LAUNCHED("pooling kernel");
  }

 private:
  PoolKind kind_;
  int type_ = F32;
  int in0_, in1_, out_;  // MaxPoolGrad's second input is x
  Geo g_{};
  bool include_pad_ = false;
};

class GlobalAvgPool : public Kernel {
 public:
  explicit GlobalAvgPool(const Node& n) : x_(n.in[0].id), y_(n.out[0].id), type_(n.in[0].dtype) {
    if ((type_ != F32 && !is_low_float(type_)) || n.out[0].dtype != F32)
      throw std::runtime_error("GlobalAvgPool: x must be float32, bfloat16 or float16 and its "
                               "mean float32");
    const Shape& s = n.in[0].shape;
    if (s.size() != 4 || n.out[0].shape != Shape{s[0], s[1], 1, 1})
      throw std::runtime_error("GlobalAvgPool maps (N,C,H,W) to (N,C,1,1), got " +
                               shape_text(s) + " -> " + shape_text(n.out[0].shape));
    planes_ = s[0] * s[1];
    hw_ = s[2] * s[3];
  }
  void run(const Run& r) override {
    if (planes_ == 0) return;
    const unsigned blocks = blocks_for(planes_, kPoolThreads / 32);
    with_float(type_, [&](auto t) {
      using T = decltype(t);
      global_avg_pool<T><<<blocks, kPoolThreads, 0, r.stream>>>(r.at<T>(x_), r.at<float>(y_),
                                                            planes_, hw_);
    });
    PLANNER_LAUNCHED("global_avg_pool");
  }

 private:
  int x_, y_, type_;
  int64_t planes_ = 0, hw_ = 0;
};

KernelPtr max_pool_op(const Node& n) { return std::make_unique<Pool>(n, PoolKind::Max); }
KernelPtr max_pool_grad_op(const Node& n) { return std::make_unique<Pool>(n, PoolKind::MaxGrad); }
KernelPtr avg_pool_op(const Node& n) { return std::make_unique<Pool>(n, PoolKind::Avg); }
KernelPtr avg_pool_grad_op(const Node& n) { return std::make_unique<Pool>(n, PoolKind::AvgGrad); }
KernelPtr global_avg_pool_op(const Node& n) { return std::make_unique<GlobalAvgPool>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(pool) {
  r["MaxPool"] = max_pool_op;
  r["MaxPoolGrad"] = max_pool_grad_op;
  r["AvgPool"] = avg_pool_op;
  r["AvgPoolGrad"] = avg_pool_grad_op;
  r["GlobalAvgPool"] = global_avg_pool_op;
}

}  // namespace planner
