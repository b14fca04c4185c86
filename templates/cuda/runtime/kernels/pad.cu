// Pad and PadGrad on the GPU, following planner/ops/pad.py (modes constant, reflect, edge; pads
// are the befores of every axis, then the afters).
//   Pad      y[o] = x[src(o)] per axis, or `value` where an axis's src is outside (constant)
//   PadGrad  dx[i] = sum of dy over every padded position copied from i
//
// Why it is built this way:
// - PadGrad is a gather, not the CPU's scatter: each dx element walks, per axis, the few
//   positions of dy it was copied to (constant: one; reflect: up to three; edge: a range at
//   the two ends), so there are no atomics and dx is the same bits every step.
// - The per-axis mapping is closed-form arithmetic on a small struct passed by value (no
//   tables in device memory, nothing allocated); axes without padding are merged at load, so
//   an NCHW pad of H and W walks three axes, and indices are 32-bit when the sizes allow.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "../groups.cuh"
#include "pad.h"

namespace planner {
namespace {

struct PadGeom {
  int rank;
  int mode;
  float value;
  int64_t small[kMaxRank];   // the unpadded extents (x of Pad, dx of PadGrad)
  int64_t big[kMaxRank];     // the padded extents
  int64_t before[kMaxRank];
  int64_t sstride[kMaxRank];  // row-major strides of the small tensor
  int64_t bstride[kMaxRank];  // of the big one
};

// The small index a big position o copies on one axis, or -1 (the constant).
__device__ __forceinline__ int64_t source(int64_t o, int64_t before, int64_t n, int mode) {
  const int64_t i = o - before;
  if (mode == kConstant) return i >= 0 && i < n ? i : -1;
  if (mode == kEdge) return i < 0 ? 0 : (i >= n ? n - 1 : i);
  return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);  // reflect: pads < n, one reflection
}

template <class T, class I>
__global__ void pad_forward(const T* __restrict__ x, T* __restrict__ y, I total, PadGeom g) {
  for (I k = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<I>(gridDim.x) * blockDim.x) {
    I rest = k, off = 0;
    bool constant = false;
    for (int a = g.rank - 1; a >= 0; --a) {
      const I big = static_cast<I>(g.big[a]);
      const I o = rest % big;
      rest /= big;
      const int64_t s = source(o, g.before[a], g.small[a], g.mode);
      if (s < 0) constant = true;
      off += static_cast<I>(s) * static_cast<I>(g.sstride[a]);
    }
    y[k] = constant ? static_cast<T>(g.value) : x[off];
  }
}

// The positions of dy that small index j of one axis was copied to, as up to three inclusive
// ranges; returns how many.
__device__ __forceinline__ int targets(int64_t j, int64_t before, int64_t n, int64_t big,
                                       int mode, int64_t* lo, int64_t* hi) {
  if (mode == kEdge) {
    lo[0] = j == 0 ? 0 : j + before;
    hi[0] = j == n - 1 ? big - 1 : j + before;
    return 1;
  }
  lo[0] = hi[0] = j + before;
  if (mode == kConstant) return 1;
  int k = 1;
  const int64_t after = big - n - before;
  if (j >= 1 && j <= before) lo[k] = hi[k] = before - j, ++k;  // the mirror before
  if (j <= n - 2 && n - 1 - j <= after) lo[k] = hi[k] = before + 2 * (n - 1) - j, ++k;  // after
  return k;
}

template <class I>
__global__ void pad_backward(const float* __restrict__ dy, float* __restrict__ dx, I total,
                             PadGeom g) {
  for (I k = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<I>(gridDim.x) * blockDim.x) {
    int64_t lo[kMaxRank][3], hi[kMaxRank][3];
    int count[kMaxRank], which[kMaxRank];
    int64_t pos[kMaxRank];
    I rest = k;
    for (int a = g.rank - 1; a >= 0; --a) {
      const I n = static_cast<I>(g.small[a]);
      const I j = rest % n;
      rest /= n;
      count[a] = targets(j, g.before[a], g.small[a], g.big[a], g.mode, lo[a], hi[a]);
      which[a] = 0;
      pos[a] = lo[a][0];
    }
    // Odometer over the product of every axis's targets, the last axis fastest.
    float sum = 0.f;
    for (;;) {
      int64_t off = 0;
      for (int a = 0; a < g.rank; ++a) off += pos[a] * g.bstride[a];
      sum += dy[off];
      int a = g.rank - 1;
      for (; a >= 0; --a) {
        if (pos[a] < hi[a][which[a]]) {
          ++pos[a];
          break;
        }
        if (which[a] + 1 < count[a]) {
          pos[a] = lo[a][++which[a]];
          break;
        }
        which[a] = 0;
        pos[a] = lo[a][0];
      }
      if (a < 0) break;
    }
    dx[k] = sum;
  }
}

class Pad : public Kernel {
 public:
  Pad(const Node& n, bool grad)
      : grad_(grad), threads_(block_threads(n)), in_(n.in[0].id), out_(n.out[0].id) {
    const TensorRef& x = n.in[0];
    if (x.dtype != F32 || n.out[0].dtype != F32)
      throw std::runtime_error(std::string(grad ? "PadGrad" : "Pad") + " takes float32 tensors");
    Shape small = grad ? n.out[0].shape : x.shape;
    Shape big = grad ? x.shape : n.out[0].shape;
    const size_t rank = small.size();
    const PadAttrs p = pad_attrs(n.attrs, small, big);  // common/pad.h
    g_.mode = p.mode;
    g_.value = static_cast<float>(p.value);
    // Merge runs of unpadded axes (one axis of their product); keep at least one axis.
    int r = 0;
    for (size_t a = 0; a < rank; ++a) {
      const int64_t b = p.before[a], e = p.after[a];
      if (b == 0 && e == 0 && r > 0 && g_.before[r - 1] == 0 && g_.big[r - 1] == g_.small[r - 1]) {
        g_.small[r - 1] *= small[a];
        g_.big[r - 1] *= small[a];
        continue;
      }
      if (r == kMaxRank) throw std::runtime_error("Pad: rank above 8");
      g_.small[r] = small[a];
      g_.big[r] = big[a];
      g_.before[r] = b;
      ++r;
    }
    if (r == 0) {
      g_.small[0] = g_.big[0] = 1;
      g_.before[0] = 0;
      r = 1;
    }
    g_.rank = r;
    int64_t ss = 1, bs = 1;
    for (int a = r - 1; a >= 0; --a) {
      g_.sstride[a] = ss;
      g_.bstride[a] = bs;
      ss *= g_.small[a];
      bs *= g_.big[a];
    }
    small_size_ = ss;
    big_size_ = bs;
    const int64_t total = grad_ ? small_size_ : big_size_;
    blocks_ = blocks_for(total, threads_);
    // Offsets reach the larger of the two shapes (negative pads crop).
    narrow_ = index32(std::max(big_size_, small_size_), blocks_, threads_);
  }
  void run(const Run& r) override {
    const float* in = r.at<float>(in_);
    float* out = r.at<float>(out_);
    if (grad_) {
      if (small_size_ == 0) return;
      if (narrow_)
        pad_backward<int32_t><<<blocks_, threads_, 0, r.stream>>>(
            in, out, static_cast<int32_t>(small_size_), g_);
      else
        pad_backward<int64_t><<<blocks_, threads_, 0, r.stream>>>(in, out, small_size_, g_);
      PLANNER_LAUNCHED("PadGrad");
      return;
    }
    if (big_size_ == 0) return;
    if (narrow_)
      pad_forward<float, int32_t><<<blocks_, threads_, 0, r.stream>>>(
          in, out, static_cast<int32_t>(big_size_), g_);
    else
      pad_forward<float, int64_t><<<blocks_, threads_, 0, r.stream>>>(in, out, big_size_, g_);
    PLANNER_LAUNCHED("Pad");
  }

 private:
  bool grad_;
  int threads_;
  int in_, out_;
  PadGeom g_{};
  int64_t small_size_ = 0, big_size_ = 0;
  unsigned blocks_ = 1;
  bool narrow_ = true;
};

KernelPtr pad(const Node& n) { return std::make_unique<Pad>(n, false); }
KernelPtr pad_grad(const Node& n) { return std::make_unique<Pad>(n, true); }

}  // namespace

PLANNER_REGISTER_KERNELS(pad) {
  r["Pad"] = pad;
  r["PadGrad"] = pad_grad;
}

}  // namespace planner
