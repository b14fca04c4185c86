// IndexGather and IndexScatter on the GPU, following planner/ops/index.py and the CPU kernels
// (common/index.h's lines).
//
// Why it is built this way:
// - An index out of range is a StepError on the CPU; here that would need a host read of the
//   index (a sync), so a bad index poisons instead, never reading or writing outside a
//   buffer: IndexGather writes NaN for it, IndexScatter writes NaN over the first place of
//   the bad element's line, so the step's loss goes NaN visibly.
// - IndexScatter "sum" and "mean" (scatter_add, index_add, the gathers' gradients) add with
//   float atomics, one thread per written element (mean counts into its scratch, a float per
//   place of x): within rounding of the CPU's index-order sums, not bitwise equal to them. The
//   other reductions run one thread per line, along the index in order as the CPU does, so
//   "none" keeps the last write as the CPU does.
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "../groups.cuh"
#include "index.h"

namespace planner {
namespace {

constexpr int kIndexRank = 8;

// common/index.h's IndexGeometry, as a kernel argument.
struct IndexLines {
  bool rows, wrap;
  int rank, axis;
  int64_t n, inner, m, lines, li;
  int64_t ishape[kIndexRank], xstride[kIndexRank];

  __device__ int64_t take(int64_t v) const {
    if (v < 0 && wrap) v += n;
    return v >= 0 && v < n ? v : -1;
  }
  // the line's place of index 0 in x, and its first gathered element
  __device__ int64_t xbase(int64_t line) const {
    if (rows) return (line / inner) * n * inner + line % inner;
    int64_t o = line / li, c = line % li, off = 0;
    for (int k = rank - 1; k > axis; --k) {
      off += (c % ishape[k]) * xstride[k];
      c /= ishape[k];
    }
    for (int k = axis - 1; k >= 0; --k) {
      off += (o % ishape[k]) * xstride[k];
      o /= ishape[k];
    }
    return off;
  }
  __device__ int64_t sbase(int64_t line) const {
    return (line / li) * m * li + line % li;
  }
  // the gathered side's step along the index, and where element j's index is
  __device__ int64_t sstep() const { return rows ? inner : li; }
  __device__ int64_t iat(int64_t line, int64_t j) const {
    return rows ? j : sbase(line) + j * li;
  }
};

IndexLines index_lines(const IndexGeometry& g) {
  IndexLines l{};
  if (g.ishape.size() > static_cast<size_t>(kIndexRank))
    throw std::runtime_error("IndexGather / IndexScatter: rank above 8");
  l.rows = g.rows;
  l.wrap = g.wrap;
  l.rank = static_cast<int>(g.ishape.size());
  l.axis = g.axis;
  l.n = g.n;
  l.inner = g.inner;
  l.m = g.m;
  l.lines = g.lines;
  l.li = g.li;
  for (size_t k = 0; k < g.ishape.size(); ++k) {
    l.ishape[k] = g.ishape[k];
    l.xstride[k] = g.xstride[k];
  }
  return l;
}

// One thread per gathered element, walked as (line, j).
__global__ void gather(IndexLines l, const float* __restrict__ x,
                       const int64_t* __restrict__ idx, float* __restrict__ y) {
  const int64_t total = l.lines * l.m;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t line = k % l.lines, j = k / l.lines;  // adjacent threads: adjacent lines
    const int64_t s = l.sbase(line) + j * l.sstep();
    const int64_t v = l.take(idx[l.iat(line, j)]);
    y[s] = v >= 0 ? x[l.xbase(line) + v * l.inner] : NAN;
  }
}

__device__ __forceinline__ float combine(int reduce, float a, float s) {
  switch (reduce) {
    case static_cast<int>(IndexReduce::kNone): return s;
    case static_cast<int>(IndexReduce::kProd): return a * s;
    case static_cast<int>(IndexReduce::kMax): return isnan(s) || s > a ? s : a;
    case static_cast<int>(IndexReduce::kMin): return isnan(s) || s < a ? s : a;
    default: return a + s;  // sum, mean
  }
}

__device__ __forceinline__ float identity(int reduce) {
  switch (reduce) {
    case static_cast<int>(IndexReduce::kProd): return 1.0f;
    case static_cast<int>(IndexReduce::kMax): return -INFINITY;
    case static_cast<int>(IndexReduce::kMin): return INFINITY;
    default: return 0.0f;
  }
}

// One thread per line, along the index in order (every reduction but the atomic sum).
__global__ void scatter_lines(IndexLines l, const int64_t* __restrict__ idx,
                              const float* __restrict__ src, float value, int reduce,
                              bool include_self, float* __restrict__ out) {
  for (int64_t line = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; line < l.lines;
       line += int64_t{gridDim.x} * blockDim.x) {
    const int64_t xb = l.xbase(line), sb = l.sbase(line), step = l.sstep();
    bool bad = false;
    for (int64_t j = 0; j < l.m; ++j) bad |= l.take(idx[l.iat(line, j)]) < 0;
    if (bad) {
      out[xb] = NAN;
      continue;
    }
    const bool reduces = reduce != static_cast<int>(IndexReduce::kNone);
    if (reduces && !include_self)
      for (int64_t j = 0; j < l.m; ++j)
        out[xb + l.take(idx[l.iat(line, j)]) * l.inner] = identity(reduce);
    for (int64_t j = 0; j < l.m; ++j) {
      float* p = out + xb + l.take(idx[l.iat(line, j)]) * l.inner;
      *p = combine(reduce, *p, src ? src[sb + j * step] : value);
    }
  }
}

// The atomic sum and mean: one thread per written element, in passes: zero the places
// written (include_self=False), add the values, count them (mean, into `counts`, one per place
// of x).
enum class Pass { kZero, kAdd, kCount };

__global__ void scatter_add(IndexLines l, const int64_t* __restrict__ idx,
                            const float* __restrict__ src, float value, Pass pass,
                            float* __restrict__ out, float* __restrict__ counts) {
  const int64_t total = l.lines * l.m;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t line = k % l.lines, j = k / l.lines;
    const int64_t v = l.take(idx[l.iat(line, j)]);
    const int64_t xb = l.xbase(line), at = xb + v * l.inner;
    if (v < 0) {
      out[xb] = NAN;
    } else if (pass == Pass::kZero) {
      out[at] = 0.0f;
    } else if (pass == Pass::kAdd) {
      atomicAdd(out + at, src ? src[l.sbase(line) + j * l.sstep()] : value);
    } else {
      atomicAdd(counts + at, 1.0f);
    }
  }
}

// mean: each place written divided by its count (plus one for x's own value)
__global__ void divide(int64_t size, const float* __restrict__ counts, float self,
                       float* __restrict__ out) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < size;
       k += int64_t{gridDim.x} * blockDim.x)
    if (counts[k] > 0.0f) out[k] /= counts[k] + self;
}

// IndexScatterGrad (amax / amin): counts[p] = whether x is the result at p, plus the src
// values equal to it (atomics); then dx over x, dsrc over the written elements.
__global__ void extreme_count(IndexLines l, const int64_t* __restrict__ idx,
                              const float* __restrict__ src, const float* __restrict__ out,
                              float* __restrict__ counts) {
  const int64_t total = l.lines * l.m;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t line = k % l.lines, j = k / l.lines;
    const int64_t v = l.take(idx[l.iat(line, j)]), xb = l.xbase(line);
    if (v < 0) counts[xb] = NAN;
    else if (src[l.sbase(line) + j * l.sstep()] == out[xb + v * l.inner])
      atomicAdd(counts + xb + v * l.inner, 1.0f);
  }
}

__global__ void extreme_self(int64_t size, const float* __restrict__ x,
                             const float* __restrict__ out, const float* __restrict__ dy,
                             float* __restrict__ counts, bool init, float* __restrict__ dx) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < size;
       k += int64_t{gridDim.x} * blockDim.x) {
    if (init) counts[k] = x[k] == out[k] ? 1.0f : 0.0f;
    else dx[k] = x[k] == out[k] ? dy[k] / counts[k] : 0.0f;
  }
}

__global__ void extreme_src(IndexLines l, const int64_t* __restrict__ idx,
                            const float* __restrict__ src, const float* __restrict__ out,
                            const float* __restrict__ dy, const float* __restrict__ counts,
                            bool include_self, float* __restrict__ dx, float* __restrict__ dsrc) {
  const int64_t total = l.lines * l.m;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t line = k % l.lines, j = k / l.lines;
    const int64_t v = l.take(idx[l.iat(line, j)]), xb = l.xbase(line);
    const int64_t s = l.sbase(line) + j * l.sstep();
    if (v < 0) {
      dsrc[s] = NAN;
      continue;
    }
    const int64_t p = xb + v * l.inner;
    dsrc[s] = src[s] == out[p] && counts[p] > 0.0f ? dy[p] / counts[p] : 0.0f;
    if (!include_self) dx[p] = 0.0f;
  }
}

// IndexScatterGrad (prod): one thread per line, as the CPU's product_line, the running
// products in `run` (one per place of x; a line's places are its own).
__global__ void product_lines(IndexLines l, const int64_t* __restrict__ idx,
                              const float* __restrict__ x, const float* __restrict__ src,
                              const float* __restrict__ dy, bool self, float* __restrict__ run,
                              float* __restrict__ dx, float* __restrict__ dsrc) {
  for (int64_t line = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; line < l.lines;
       line += int64_t{gridDim.x} * blockDim.x) {
    const int64_t xb = l.xbase(line), sb = l.sbase(line), step = l.sstep();
    bool bad = false;
    for (int64_t j = 0; j < l.m; ++j) bad |= l.take(idx[l.iat(line, j)]) < 0;
    if (bad) {
      dx[xb] = NAN;
      continue;
    }
    auto at = [&](int64_t j) { return xb + l.take(idx[l.iat(line, j)]) * l.inner; };
    for (int64_t j = 0; j < l.m; ++j) run[at(j)] = self ? x[at(j)] : 1.0f;
    for (int64_t j = 0; j < l.m; ++j) {
      dsrc[sb + j * step] = run[at(j)];
      run[at(j)] *= src[sb + j * step];
    }
    for (int64_t j = 0; j < l.m; ++j) run[at(j)] = 1.0f;
    for (int64_t j = l.m - 1; j >= 0; --j) {
      dsrc[sb + j * step] = dsrc[sb + j * step] * run[at(j)] * dy[at(j)];
      run[at(j)] *= src[sb + j * step];
    }
    for (int64_t j = 0; j < l.m; ++j) dx[at(j)] = self ? run[at(j)] * dy[at(j)] : 0.0f;
  }
}

class IndexGather : public Kernel {
 public:
  explicit IndexGather(const Node& n)
      : threads_(block_threads(n)), l_(index_lines(index_geometry(n))), x_(n.in[0].id),
        i_(n.in[1].id), y_(n.out[0].id) {
    require_f32(n);
    blocks_ = blocks_for(l_.lines * l_.m, threads_);
  }
  void run(const Run& r) override {
    if (l_.lines * l_.m == 0) return;
    gather<<<blocks_, threads_, 0, r.stream>>>(l_, r.at<float>(x_), r.at<int64_t>(i_),
                                               r.at<float>(y_));
    PLANNER_LAUNCHED("IndexGather");
  }

 private:
  int threads_;
  IndexLines l_;
  int x_, i_, y_;
  unsigned blocks_ = 1;
};

class IndexScatter : public Kernel {
 public:
  explicit IndexScatter(const Node& n)
      : threads_(block_threads(n)), l_(index_lines(index_geometry(n))), x_(n.in[0].id),
        i_(n.in[1].id), src_(n.in.size() > 2 ? n.in[2].id : -1), out_(n.out[0].id),
        bytes_(sizeof(float) * n.out[0].size()),
        value_(n.attrs.has("value") ? static_cast<float>(n.attrs.f("value")) : 0.0f),
        reduce_(index_reduce(n.attrs.s("reduce"))), include_self_(n.attrs.b("include_self")) {
    require_f32(n);
    element_blocks_ = blocks_for(l_.lines * l_.m, threads_);
    line_blocks_ = blocks_for(l_.lines, threads_);
    size_blocks_ = blocks_for(static_cast<int64_t>(bytes_ / 4), threads_);
  }
  // mean: a float count per place of x
  size_t scratch_bytes() const override { return reduce_ == IndexReduce::kMean ? bytes_ : 0; }
  void run(const Run& r) override {
    float* out = r.at<float>(out_);
    if (r.ptr[x_] != r.ptr[out_] && bytes_ > 0)
      PLANNER_CUDA(cudaMemcpyAsync(out, r.ptr[x_], bytes_, cudaMemcpyDeviceToDevice, r.stream));
    if (l_.lines * l_.m == 0) return;
    const int64_t* idx = r.at<int64_t>(i_);
    const float* src = src_ >= 0 ? r.at<float>(src_) : nullptr;
    if (reduce_ == IndexReduce::kSum || reduce_ == IndexReduce::kMean) {
      float* counts = reinterpret_cast<float*>(r.scratch);
      auto launch = [&](Pass pass) {
        scatter_add<<<element_blocks_, threads_, 0, r.stream>>>(l_, idx, src, value_, pass, out,
                                                                counts);
      };
      if (!include_self_) launch(Pass::kZero);
      launch(Pass::kAdd);
      if (reduce_ == IndexReduce::kMean) {
        PLANNER_CUDA(cudaMemsetAsync(counts, 0, bytes_, r.stream));
        launch(Pass::kCount);
        divide<<<size_blocks_, threads_, 0, r.stream>>>(static_cast<int64_t>(bytes_ / 4), counts,
                                                        include_self_ ? 1.0f : 0.0f, out);
      }
    } else {
      scatter_lines<<<line_blocks_, threads_, 0, r.stream>>>(
          l_, idx, src, value_, static_cast<int>(reduce_), include_self_, out);
    }
    PLANNER_LAUNCHED("IndexScatter");
  }

 private:
  int threads_;
  IndexLines l_;
  int x_, i_, src_, out_;
  size_t bytes_;
  float value_;
  IndexReduce reduce_;
  bool include_self_;
  unsigned element_blocks_ = 1, line_blocks_ = 1, size_blocks_ = 1;
};

class IndexScatterGrad : public Kernel {
 public:
  explicit IndexScatterGrad(const Node& n)
      : threads_(block_threads(n)), l_(index_lines(index_geometry(n))), x_(n.in[0].id),
        i_(n.in[1].id), src_(n.in[2].id), out_(n.in[3].id), dy_(n.in[4].id),
        dx_(n.out[0].id), dsrc_(n.out[1].id), size_(n.out[0].size()),
        include_self_(n.attrs.b("include_self")), prod_(n.attrs.s("reduce") == "prod") {
    require_f32(n);
    element_blocks_ = blocks_for(l_.lines * l_.m, threads_);
    line_blocks_ = blocks_for(l_.lines, threads_);
    size_blocks_ = blocks_for(size_, threads_);
  }
  size_t scratch_bytes() const override { return sizeof(float) * size_; }
  void run(const Run& r) override {
    if (size_ == 0) return;
    float* counts = reinterpret_cast<float*>(r.scratch);
    const float* x = r.at<float>(x_);
    const float* out = r.at<float>(out_);
    const float* dy = r.at<float>(dy_);
    float* dx = r.at<float>(dx_);
    if (prod_) {
      PLANNER_CUDA(cudaMemcpyAsync(dx, dy, sizeof(float) * size_, cudaMemcpyDeviceToDevice,
                                   r.stream));
      if (l_.lines * l_.m > 0)
        product_lines<<<line_blocks_, threads_, 0, r.stream>>>(
            l_, r.at<int64_t>(i_), x, r.at<float>(src_), dy, include_self_, counts, dx,
            r.at<float>(dsrc_));
      PLANNER_LAUNCHED("IndexScatterGrad");
      return;
    }
    extreme_self<<<size_blocks_, threads_, 0, r.stream>>>(size_, x, out, dy, counts, true, dx);
    if (l_.lines * l_.m > 0)
      extreme_count<<<element_blocks_, threads_, 0, r.stream>>>(
          l_, r.at<int64_t>(i_), r.at<float>(src_), out, counts);
    extreme_self<<<size_blocks_, threads_, 0, r.stream>>>(size_, x, out, dy, counts, false, dx);
    if (l_.lines * l_.m > 0)
      extreme_src<<<element_blocks_, threads_, 0, r.stream>>>(
          l_, r.at<int64_t>(i_), r.at<float>(src_), out, dy, counts, include_self_, dx,
          r.at<float>(dsrc_));
    PLANNER_LAUNCHED("IndexScatterGrad");
  }

 private:
  int threads_;
  IndexLines l_;
  int x_, i_, src_, out_, dy_, dx_, dsrc_;
  int64_t size_;
  bool include_self_, prod_;
  unsigned element_blocks_ = 1, line_blocks_ = 1, size_blocks_ = 1;
};

KernelPtr index_gather(const Node& n) { return std::make_unique<IndexGather>(n); }
KernelPtr index_scatter_grad(const Node& n) { return std::make_unique<IndexScatterGrad>(n); }
KernelPtr index_scatter(const Node& n) { return std::make_unique<IndexScatter>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(index) {
  r["IndexGather"] = index_gather;
  r["IndexScatter"] = index_scatter;
  r["IndexScatterGrad"] = index_scatter_grad;
}

}  // namespace planner
