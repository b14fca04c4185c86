// Reductions with oneDNN's reduction primitive: ReduceSum, ReduceMean and GlobalAvgPool (a mean
// over H and W). The destination is the source's shape with 1 on every reduced axis; keepdims
// only changes the declared shape, not the bytes. A "reduction" that reduces nothing is a copy.
// BiasAddGrad (a sum over every axis but the channel) is a plain loop (channels-last inputs,
// a transformer's (..., C), add whole C-vectors): oneDNN 3.2's reduction
// over the outer and inner axes of a plain NCHW tensor at once runs its reference path, 12 ms for
// LeNet's first convolution (64 x 6 x 28 x 28) where the loop takes a fraction of one.
// A float32 ReduceSum or ReduceMean over one run of axes that leaves a trailing run of at least
// 8 elements (the gradient of a tensor broadcast over the batch: a bias or a position table,
// (B, T, C) -> (T, C); a mean over time, (B, T, C) -> (B, C)) is a plain loop too: oneDNN 3.2
// ran those through its reference path (1.7 ms for (8, 64, 128) summed over B, 5% of a small
// GPT's step; 1.4 ms for a BiLSTM's (8, 32, 256) mean over T). One with a shorter trailing run
// (a whole tensor, the last axis) is a loop in double too (SumLines: oneDNN's adds in float).
// float64 (oneDNN 3.2's reduction has no f64): SumF64, each output's terms added in index
// order by one thread, and BiasAddGrad's float64 loop.
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "../dnnl_kernel.h"
#include "../loops.h"
#include "integer.h"
#include "reduce.h"

namespace planner {
namespace {

// y[o, j] = scale * sum over m of x[o, m, j] for x seen as (outer, mid, inner): whole rows added
// in double, vectorized along j; each thread owns (o, block of columns) pairs, so the order of
// the additions (and the result) is fixed.
class SumRows : public Kernel {
 public:
  SumRows(int x, int y, int64_t outer, int64_t mid, int64_t inner, double scale)
      : x_(x), y_(y), outer_(outer), mid_(mid), inner_(inner), scale_(scale) {}
  void run(const Run& r) override {
    constexpr int64_t kBlock = 256;
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t mid = mid_, inner = inner_, blocks = (inner + kBlock - 1) / kBlock;
    const double scale = scale_;
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < outer_ * blocks; ++task) {
      const int64_t o = task / blocks, b = (task % blocks) * kBlock;
      const int64_t n = std::min(kBlock, inner - b);
      double acc[kBlock] = {};
      for (int64_t m = 0; m < mid; ++m) {
        const float* p = x + (o * mid + m) * inner + b;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) acc[j] += p[j];
      }
      float* out = y + o * inner + b;
      for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(acc[j] * scale);
    }
  }

 private:
  int x_, y_;
  int64_t outer_, mid_, inner_;
  double scale_;
};

// y[o, j] = scale * sum over m of x[o, m, j] with fewer than 8 columns j (a whole tensor summed,
// a sum along the last axis): each line in double. oneDNN's reduction adds in float, an error
// that grows with the count (a loss summed over 16,000 elements: 18x torch's float32 error,
// whose sum is a cascade). Lines run in parallel; fewer lines than kPieces are each cut into
// kPieces fixed pieces summed in parallel and added in order, so the result is the same for
// any thread count.
class SumLines : public Kernel {
 public:
  static constexpr int64_t kPieces = 64;
  SumLines(int x, int y, int64_t outer, int64_t mid, int64_t inner, double scale)
      : x_(x), y_(y), outer_(outer), mid_(mid), inner_(inner), scale_(scale) {}
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t lines = outer_ * inner_, mid = mid_, inner = inner_;
    const double scale = scale_;
    auto piece = [x, mid, inner](int64_t line, int64_t m0, int64_t m1) {
      const float* p = x + (line / inner) * mid * inner + line % inner;
      double acc = 0.0;
      if (inner == 1) {
#pragma omp simd reduction(+ : acc)
        for (int64_t m = m0; m < m1; ++m) acc += p[m];
      } else {
        for (int64_t m = m0; m < m1; ++m) acc += p[m * inner];
      }
      return acc;
    };
    if (lines >= kPieces || lines * mid <= (int64_t{1} << 15)) {
#pragma omp parallel for schedule(static) if (lines * mid > (int64_t{1} << 15))
      for (int64_t line = 0; line < lines; ++line)
        y[line] = static_cast<float>(piece(line, 0, mid) * scale);
      return;
    }
    const int64_t step = (mid + kPieces - 1) / kPieces;
    for (int64_t line = 0; line < lines; ++line) {
      double part[kPieces];
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < kPieces; ++k)
        part[k] = piece(line, std::min(mid, k * step), std::min(mid, (k + 1) * step));
      double sum = 0.0;
      for (int64_t k = 0; k < kPieces; ++k) sum += part[k];
      y[line] = static_cast<float>(sum * scale);
    }
  }

 private:
  int x_, y_;
  int64_t outer_, mid_, inner_;
  double scale_;
};

// The axes [first, last) when the reduced axes (ignoring those of size 1) are one run of
// consecutive axes; {0, 0} when they are not.
std::pair<size_t, size_t> reduced_run(const Shape& src, const std::vector<bool>& reduced) {
  size_t first = src.size(), last = 0;
  for (size_t k = 0; k < src.size(); ++k)
    if (k < reduced.size() && reduced[k] && src[k] != 1) {
      first = std::min(first, k);
      last = k + 1;
    }
  for (size_t k = first; k < last; ++k)
    if (src[k] != 1 && !(k < reduced.size() && reduced[k])) return {0, 0};
  return first < last ? std::make_pair(first, last) : std::make_pair<size_t, size_t>(0, 0);
}

// float64 ReduceSum / ReduceMean: y[j] = scale * (the sum of the x that reduce to j, in x's
// index order). Over one run of axes, (outer, mid, inner), each output line is one thread's;
// otherwise one pass over x adds each element into its output (reduced axes' strides 0).
class SumF64 : public Kernel {
 public:
  SumF64(const Node& n, const std::vector<bool>& reduced, bool mean)
      : x_(n.in[0].id), y_(n.out[0].id), src_(n.in[0].shape.empty() ? Shape{1} : n.in[0].shape) {
    int64_t count = 1, stride = 1;
    to_y_.assign(src_.size(), 0);
    for (int k = static_cast<int>(src_.size()) - 1; k >= 0; --k) {
      const bool r = static_cast<size_t>(k) < reduced.size() && reduced[k];
      if (r) count *= src_[k];
      else {
        to_y_[k] = stride;
        stride *= src_[k];
      }
    }
    scale_ = mean ? 1.0 / static_cast<double>(std::max<int64_t>(count, 1)) : 1.0;
    y_size_ = stride;
    auto [first, last] = reduced_run(src_, reduced);
    run_ = last > 0;
    for (size_t k = 0; k < src_.size(); ++k)
      (k < first ? outer_ : k < last ? mid_ : inner_) *= src_[k];
  }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    double* y = r.at<double>(y_);
    const int64_t mid = mid_, inner = inner_, lines = outer_ * inner_;
    const double scale = scale_;
    if (run_) {
#pragma omp parallel for schedule(static) if(lines * mid >= kGrain)
      for (int64_t line = 0; line < lines; ++line) {
        const double* p = x + (line / inner) * mid * inner + line % inner;
        double sum = 0.0;
        for (int64_t m = 0; m < mid; ++m) sum += p[m * inner];
        y[line] = sum * scale;
      }
      return;
    }
    std::fill(y, y + y_size_, 0.0);
    const int64_t size = numel(src_);
    const int rank = static_cast<int>(src_.size());
    for (int64_t e = 0; e < size; ++e) {
      int64_t rest = e, j = 0;
      for (int k = rank - 1; k >= 0; --k) {
        j += (rest % src_[k]) * to_y_[k];
        rest /= src_[k];
      }
      y[j] += x[e];
    }
    for (int64_t j = 0; j < y_size_; ++j) y[j] *= scale;
  }

 private:
  int x_, y_;
  Shape src_;
  std::vector<int64_t> to_y_;
  double scale_ = 1.0;
  int64_t y_size_ = 1, outer_ = 1, mid_ = 1, inner_ = 1;
  bool run_ = false;
};

KernelPtr reduction(const Node& n, dnnl::algorithm a, const std::vector<bool>& reduced) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  Shape src = x.shape.empty() ? Shape{1} : x.shape;
  Shape dst = src;
  bool any = false;
  for (size_t k = 0; k < src.size(); ++k)
    if (k < reduced.size() && reduced[k] && src[k] != 1) {
      dst[k] = 1;
      any = true;
    }
  if (!any && x.dtype == y.dtype)
    return std::make_unique<Copy>(x.id, y.id, y.size() * dtype_bytes(y.dtype));
  if (!any) {  // nothing to reduce, but a low x to widen (a 1x1 map's GlobalAvgPool)
    auto pd = dnnl::reorder::primitive_desc(n.engine, view_md(src, x.dtype), n.engine,
                                            view_md(dst, y.dtype), user_scratchpad());
    auto k = std::make_unique<DnnlKernel>();
    k->add(dnnl::reorder(pd), pd, {{DNNL_ARG_FROM, x.id}, {DNNL_ARG_TO, y.id}});
    return k;
  }
  const bool mean = a == dnnl::algorithm::reduction_mean;
  if (all_f64(n)) return std::make_unique<SumF64>(n, reduced, mean);
  if ((mean || a == dnnl::algorithm::reduction_sum) && x.dtype == F32 && y.dtype == F32) {
    auto [first, last] = reduced_run(src, reduced);
    int64_t outer = 1, mid = 1, inner = 1;
    for (size_t k = 0; k < src.size(); ++k) (k < first ? outer : k < last ? mid : inner) *= src[k];
    const double scale = mean ? 1.0 / static_cast<double>(mid) : 1.0;
    if (last > 0 && inner >= 8)
      return std::make_unique<SumRows>(x.id, y.id, outer, mid, inner, scale);
    if (last > 0) return std::make_unique<SumLines>(x.id, y.id, outer, mid, inner, scale);
  }
  auto x_md = view_md(src, x.dtype);
  auto y_md = view_md(dst, y.dtype);
  dnnl::reduction::primitive_desc pd(n.engine, a, x_md, y_md, 0.f, 0.f, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::reduction(pd), pd, {{DNNL_ARG_SRC, x.id}, {DNNL_ARG_DST, y.id}});
  return k;
}

KernelPtr reduce_sum(const Node& n) {
  if (is_integer(n.in[0].dtype)) return int_reduction(n, IntOp::Sum);  // oneDNN has no int64
  return reduction(n, dnnl::algorithm::reduction_sum, reduced_axes(n.attrs, n.in[0].shape.size()));
}
KernelPtr reduce_mean(const Node& n) {
  return reduction(n, dnnl::algorithm::reduction_mean, reduced_axes(n.attrs, n.in[0].shape.size()));
}

// mine[k] += sum of x[o, k] over rows o in [first, last) of a row-major (rows, c) x: strips of
// kStrip columns summed in float registers over blocks of kRows rows (a block's float sum is off
// by at most (kRows - 1) u of its absolute sum), each block's sums then added in double. Whole
// rows added into double partials one at a time took twice as long (31 us for a (512, 384) dy
// on one core; PyTorch's sum over rows 10 us; this 13 us).
void add_rows(const float* x, double* mine, int64_t first, int64_t last, int64_t c) {
  constexpr int64_t kRows = 32, kStrip = 128;
  for (int64_t o0 = first; o0 < last; o0 += kRows) {
    const int64_t rows = std::min(last, o0 + kRows) - o0;
    for (int64_t k0 = 0; k0 < c; k0 += kStrip) {
      const float* p = x + o0 * c + k0;
      float acc[kStrip] = {};
      if (k0 + kStrip <= c) {
        for (int64_t o = 0; o < rows; ++o)
#pragma omp simd simdlen(16)
          for (int64_t j = 0; j < kStrip; ++j) acc[j] += p[o * c + j];
#pragma omp simd
        for (int64_t j = 0; j < kStrip; ++j) mine[k0 + j] += acc[j];
      } else {
        const int64_t w = c - k0;
        for (int64_t o = 0; o < rows; ++o)
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) acc[j] += p[o * c + j];
        for (int64_t j = 0; j < w; ++j) mine[k0 + j] += acc[j];
      }
    }
  }
}

// db[c] = sum of dy over the [outer, C, inner] view's outer and inner axes. Its rows (outer
// rows of C channels last, else (outer, c) rows of `inner`) are split into a fixed number of parts chosen from dy's size (bias_grad_parts, the same in
// planner/ops/matmul.py's scratch rule), never from the thread count: each part's sums go to
// its own double partials in the scratch area (the team shares the parts out), and the parts
// are added in part order, so every thread count gives the same bits (a plan's variants
// included: docs/executor.md, "Busy machines").
int64_t bias_grad_parts(int64_t elements, int64_t rows) {
  constexpr int64_t kPartElements = 16384, kMaxParts = 16;
  return std::max<int64_t>(1, std::min({kMaxParts, rows, elements / kPartElements}));
}

class BiasAddGrad : public Kernel {
 public:
  explicit BiasAddGrad(const Node& n) : x_(n.in[0].id), y_(n.out[0].id) {
    require_f32(n);
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);  // the channels along the axis
    outer_ = a.outer;
    channels_ = a.extent;
    inner_ = a.inner;
    units_ = inner_ == 1 ? outer_ : outer_ * channels_;
    parts_ = bias_grad_parts(outer_ * channels_ * inner_, units_);
  }
  size_t scratch_bytes() const override { return sizeof(double) * parts_ * channels_; }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    double* partial = reinterpret_cast<double*>(r.scratch);
    const int64_t c = channels_, inner = inner_, units = units_, parts = parts_;
    const int team = static_cast<int>(std::min<int64_t>(parts, std::max(1, r.threads)));
    std::fill(partial, partial + parts * c, 0.0);
#pragma omp parallel for schedule(static) num_threads(team)
    for (int64_t part = 0; part < parts; ++part) {
      double* mine = partial + part * c;
      const int64_t first = units * part / parts, last = units * (part + 1) / parts;
      if (inner == 1) {  // channels last ((..., C), a transformer's bias)
        add_rows(x, mine, first, last, c);
      } else {
        for (int64_t row = first; row < last; ++row) {
          const float* p = x + row * inner;
          double sum = 0.0;
          for (int64_t i = 0; i < inner; ++i) sum += p[i];
          mine[row % c] += sum;
        }
      }
    }
    for (int64_t k = 0; k < c; ++k) {
      double sum = 0.0;
      for (int64_t part = 0; part < parts; ++part) sum += partial[part * c + k];
      y[k] = static_cast<float>(sum);
    }
  }

 private:
  int x_, y_;
  int64_t outer_ = 1, inner_ = 1, channels_ = 1, units_ = 1, parts_ = 1;
};

// float64: db[c] = the sum over the [outer, C, inner] view's outer and inner axes, in index
// order, one channel a thread (the same bits on any thread count).
class BiasAddGradF64 : public Kernel {
 public:
  explicit BiasAddGradF64(const Node& n) : x_(n.in[0].id), y_(n.out[0].id) {
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);
    outer_ = a.outer;
    channels_ = a.extent;
    inner_ = a.inner;
  }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    double* y = r.at<double>(y_);
    const int64_t outer = outer_, c = channels_, inner = inner_;
#pragma omp parallel for schedule(static) if(outer * c * inner >= kGrain)
    for (int64_t k = 0; k < c; ++k) {
      double sum = 0.0;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) sum += x[(o * c + k) * inner + i];
      y[k] = sum;
    }
  }

 private:
  int x_, y_;
  int64_t outer_ = 1, channels_ = 1, inner_ = 1;
};

KernelPtr bias_add_grad_f32(const Node& n) { return std::make_unique<BiasAddGrad>(n); }
// A bfloat16 / float16 dy (mixed precision; db stays float32): the loop on a widened copy.
KernelPtr bias_add_grad(const Node& n) {
  if (all_f64(n)) return std::make_unique<BiasAddGradF64>(n);
  return widened(n, bias_add_grad_f32);
}

KernelPtr global_avg_pool_any(const Node& n) {
  const TensorRef& x = n.in[0];
  if (x.block && !(x.dtype == F32 && n.out[0].dtype == F32 && x.shape.size() == 4))
    // (The planner blocks float32 images alone; oneDNN's reduction below reads x plain.)
    throw std::runtime_error("GlobalAvgPool: a channel-blocked x must be a float32 image");
  if (x.block) {
    // A channel-blocked x, (N, C/B, H*W, B): each image's block's rows summed, B channels at
    // once, into y's (N, C) means, which a 1x1 map holds the same in either layout.
    const Shape& s = x.shape;
    const int64_t area = s[2] * s[3];
    return std::make_unique<SumRows>(x.id, n.out[0].id, s[0] * (s[1] / x.block), area, x.block,
                                     1.0 / static_cast<double>(area));
  }
  return reduction(n, dnnl::algorithm::reduction_mean, {false, false, true, true});
}
// A bfloat16 / float16 x (mixed precision) with its float32 mean: oneDNN's mixed reduction, or
// float32 on a widened copy where the ISA has none.
KernelPtr global_avg_pool(const Node& n) { return native_or_widened(n, global_avg_pool_any); }

}  // namespace

PLANNER_REGISTER_KERNELS(reduce) {
  r["ReduceSum"] = {reduce_sum, "float32|float64|int64|int32|int16|int8|uint8"};
  r["ReduceMean"] = {reduce_mean, "float32|float64"};
  r["BiasAddGrad"] = {bias_add_grad, "float32|float64"};
  r["GlobalAvgPool"] = global_avg_pool;
}

}  // namespace planner
