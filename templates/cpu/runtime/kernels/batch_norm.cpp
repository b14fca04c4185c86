// BatchNorm (forward training with batch statistics, or inference with the running ones) and
// BatchNormGrad. Inputs (N, C, ...) are seen as (N, C, rest, 1), the same bytes.
//
// float32 with batch statistics runs plain loops, one channel per thread at a time, each pass
// over that channel's N runs of `rest` elements while they sit in the core's cache: oneDNN 3.2
// has only its generic implementation (ncsp_bnorm) for the plain NCHW layout the plan keeps,
// ~2-3x slower than these loops on DCGAN's and ResNet's shapes, 1.4-2x on 2x2 maps
// (bench/RESULTS.md). Sums are in double, in a fixed order per channel: the result does not
// depend on the thread count. Where a channel's elements are not runs at all (rest 1:
// BatchNorm1d on (N, C)), the inference form, and bfloat16 / float16 x, y, dy and dx (mixed
// precision, float32 parameters and statistics: oneDNN's own mixed batch norm, float32 math
// inside) keep oneDNN; where the ISA has no bf16 batch norm, the widened float32 copies take
// these loops. The
// running-statistics update (PyTorch's: unbiased variance, new = (1 - momentum) old + momentum
// batch) and saved_invstd are small loops after the statistics; oneDNN's BatchNormGrad gets the
// variance back from saved_invstd.
//
// A folded Relu (`activation: relu`, planner/step/fold_norm_relu.py) is applied as y is
// written (Relu's rule, fused_relu.h relu_value), and a folded ReluGrad evaluates the Relu's
// output r again from x in every pass (`normalised`, the forward's own arithmetic on the saved
// mean and invstd, scale and the BatchNorm's bias, its sixth input) and applies ReluGrad's rule
// (r <= 0 ? 0 : dy): the same bits as the two ops apart, one image fewer to read. The loops
// take both; other forms of the forward take the Relu as one pass after (fused_relu.h), and
// the gradient's other forms refuse it (the fold makes none). A folded LeakyRelu
// (`activation: leaky_relu`, attr alpha) is taken the same way with its rules (fused_relu.h's
// FoldedActivation, x the normalised value before it). A folded residual sum (a sixth
// input, planner/step/fold_norm_sum.py) is added to the normalised x before the activation as
// y is written: the Add's bits, without writing the normalised image and reading it back.
//
// An image the step keeps channel-blocked (TensorRef::block: (N, C/B, H, W, B), between
// oneDNN's convolutions, planner/step/blocked.py) takes the same loops with channels in the
// vector lanes: the sums kTaskLanes channels and a chunk of images a task, each channel's terms
// added in the plain loops' order (`block_sums`, `channel_sums`), so the bits are the plain
// layout's; then the elementwise pass an image's block a task. (A whole block a task left one
// thread idle on ResNet's 16-channel first stage and a third of the team on 48 channels.)
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../dnnl_kernel.h"
#include "../fused_relu.h"
#include "norm.h"
#include "norms_f64.h"

namespace planner {
namespace {

using prop = dnnl::prop_kind;
using flags = dnnl::normalization_flags;

// The order of a channel's sums (plain and blocked loops alike, so both give the same bits,
// on any thread count): the images in chunks of kChunkImages; within a chunk, kLoopRun partials
// (element k of each run into partial k % kLoopRun, the runs' remainders into one more) added in
// turn to the remainders' one; the chunks' sums added in chunk order. The chunks let the team
// split a blocked image by images where it has few channels (ResNet's 16-channel first stage:
// the sums ran 3x the plain loops' time with one task per half block); 8 partials, not 16, keep
// a blocked task's partials in registers (8 x 2 sums x 8 lanes of double), where 16 went
// through memory. With the forward's one sweep: ResNet-50's (batch 32) BatchNorm 2.9 -> 1.85
// ms a step, its gradient 4.4 -> 3.1 (bench/RESULTS.md).
constexpr int64_t kLoopRun = 8;
constexpr int64_t kChunkImages = 8;

struct ChannelRuns {
  int64_t n, c, rest;  // x as (n, c, rest): channel k's runs start at (i * c + k) * rest
  int64_t block = 0;   // blocked: (n, c / block, rest, block) (header comment)
  explicit ChannelRuns(const Shape& x, int64_t channel_block = 0)
      : n(x[0]), c(x[1]), rest(1), block(channel_block) {
    for (size_t k = 2; k < x.size(); ++k) rest *= x[k];
  }
  // Blocked: where image i's block b starts; its element k of lane j is at + k * block + j.
  int64_t block_at(int64_t i, int64_t b) const { return (i * (c / block) + b) * rest * block; }
  Shape as4d() const { return {n, c, rest, 1}; }
  int64_t per_channel() const { return n * rest; }
  int64_t at(int64_t i, int64_t channel) const { return (i * c + channel) * rest; }
  // Where channel k's first element (image 0's) lies, in either layout.
  int64_t first(int64_t k) const { return block ? block_at(0, k / block) + k % block : at(0, k); }
  int64_t chunks() const { return (n + kChunkImages - 1) / kChunkImages; }
  int64_t chunk_end(int64_t i0) const { return std::min(n, i0 + kChunkImages); }
};

// The sums over channel c's elements e of f(e) for each functor f, in double, in the order
// above: the partials carried across a chunk's runs and added once at its end (a vector
// reduction per run cost more than the run on 4x4 feature maps), in a fixed order whatever
// other sums ride in the same sweep (BatchNormGrad's two share one read of dy and x). The
// functors are separate (not one returning an array): the loops vectorize so.
template <class... F>
std::array<double, sizeof...(F)> channel_sums(const ChannelRuns& g, int64_t c, F... f) {
  constexpr size_t S = sizeof...(F);
  std::array<double, S> total = {};
  const int64_t whole = g.rest / kLoopRun * kLoopRun;
  for (int64_t i0 = 0; i0 < g.n; i0 += kChunkImages) {
    double lanes[S][kLoopRun] = {};
    std::array<double, S> rest = {};
    for (int64_t i = i0; i < g.chunk_end(i0); ++i) {
      const int64_t at = g.at(i, c);
      for (int64_t k = 0; k < whole; k += kLoopRun)
#pragma omp simd
        for (int64_t j = 0; j < kLoopRun; ++j) {
          size_t q = 0;
          ((lanes[q++][j] += f(at + k + j)), ...);
        }
      for (int64_t k = whole; k < g.rest; ++k) {
        size_t q = 0;
        ((rest[q++] += f(at + k)), ...);
      }
    }
    for (size_t q = 0; q < S; ++q) {
      for (double v : lanes[q]) rest[q] += v;
      total[q] += rest[q];
    }
  }
  return total;
}

// Channels per task of the blocked loops' sums: half an AVX-512 block (a whole one's partials,
// 8 x 2 sums x 16 lanes of double, would take all 32 vector registers).
constexpr int64_t kTaskLanes = 8;

// channel_sums' chunk from image i0 of lanes [j0, j0 + L) of block b of a blocked image at once:
// out[q][j] is channel b * B + j0 + j's chunk sum of the q-th functor's f(e, j0 + j), its terms
// in channel_sums' order.
template <int64_t B, int64_t L, class... F>
void block_sums(const ChannelRuns& g, int64_t b, int64_t j0, int64_t i0,
                double (&out)[sizeof...(F)][L], F... f) {
  constexpr size_t S = sizeof...(F);
  double lanes[kLoopRun][S][L] = {};
  double rest[S][L] = {};
  const int64_t whole = g.rest / kLoopRun * kLoopRun;
  for (int64_t i = i0; i < g.chunk_end(i0); ++i) {
    const int64_t at = g.block_at(i, b) + j0;
    for (int64_t k0 = 0; k0 < whole; k0 += kLoopRun)
#pragma GCC unroll 8
      for (int64_t p = 0; p < kLoopRun; ++p)
#pragma omp simd
        for (int64_t j = 0; j < L; ++j) {
          size_t q = 0;
          ((lanes[p][q++][j] += f(at + (k0 + p) * B + j, j0 + j)), ...);
        }
    for (int64_t k = whole; k < g.rest; ++k)
#pragma omp simd
      for (int64_t j = 0; j < L; ++j) {
        size_t q = 0;
        ((rest[q++][j] += f(at + k * B + j, j0 + j)), ...);
      }
  }
  for (size_t q = 0; q < S; ++q)
    for (int64_t j = 0; j < L; ++j) {
      double sum = rest[q][j];
      for (int64_t p = 0; p < kLoopRun; ++p) sum += lanes[p][q][j];
      out[q][j] = sum;
    }
}

// `each(e, j)` for every element e of image i's block b of a blocked image (j: its lane).
template <int64_t B, class F>
void block_elements(const ChannelRuns& g, int64_t i, int64_t b, F each) {
  const int64_t at = g.block_at(i, b);
  for (int64_t k = 0; k < g.rest; ++k)
#pragma omp simd
    for (int64_t j = 0; j < B; ++j) each(at + k * B + j, j);
}

// f(std::integral_constant<int64_t, B>{}) for a blocked image's block B (16 or 8): the blocked
// loops with their vector width known to the compiler.
template <class F>
void on_block(int64_t block, F f) {
  if (block == 16) return f(std::integral_constant<int64_t, 16>{});
  f(std::integral_constant<int64_t, 8>{});
}

// The scratch bytes of blocked_phases' chunk sums of S sums.
size_t chunk_sums_bytes(const ChannelRuns& g, size_t sums) {
  return static_cast<size_t>(g.chunks()) * sums * static_cast<size_t>(g.c) * sizeof(double);
}

// The blocked loops' three phases, in one parallel region: `sums(width, b, j0, i0, out)` (a
// block_sums call) for each task of kTaskLanes channels and one chunk of images, into `part`
// (chunk_sums_bytes of scratch); each channel's chunks added in order and `finish(c, totals)`;
// then `elements(width, i, b)` for each image's block. `width` is the block as a compile-time
// constant (on_block).
template <size_t S, class Sums, class Finish, class Elements>
void blocked_phases(const ChannelRuns& g, double* part, Sums sums, Finish finish,
                    Elements elements) {
  on_block(g.block, [&](auto width) {
    constexpr int64_t B = decltype(width)::value, L = kTaskLanes;
    const int64_t blocks = g.c / B, groups = g.c / L, chunks = g.chunks();
#pragma omp parallel
    {
      // Chunk-major: one thread takes both halves of a block's chunk, the second from cache.
#pragma omp for schedule(static)
      for (int64_t t = 0; t < chunks * groups; ++t) {
        const int64_t r = t / groups, first = t % groups * L;
        double out[S][L];
        sums(width, first / B, first % B, r * kChunkImages, out);
        for (size_t q = 0; q < S; ++q)
          for (int64_t j = 0; j < L; ++j) part[(r * S + q) * g.c + first + j] = out[q][j];
      }
#pragma omp for schedule(static)
      for (int64_t ch = 0; ch < g.c; ++ch) {
        std::array<double, S> total = {};
        for (int64_t r = 0; r < chunks; ++r)
          for (size_t q = 0; q < S; ++q) total[q] += part[(r * S + q) * g.c + ch];
        finish(ch, total);
      }
#pragma omp for schedule(static)
      for (int64_t u = 0; u < g.n * blocks; ++u) elements(width, u / blocks, u % blocks);
    }
  });
}

// x's (or dy's, dx's) descriptor for oneDNN's batch norm: (N, C, rest, 1), or the blocked image
// as it lies (oneDNN's batch norm reads nChw16c / nChw8c).
memory::desc image_md(const TensorRef& t) {
  return t.block ? held_md(t) : view_md(ChannelRuns(t.shape).as4d(), t.dtype);
}

// Refuses images of other shapes (the loops walk them all by the first's), images held unlike
// (one blocked, one plain), and blocked ones where `blocked_ok` is false (the inference
// gradient's plain loop).
void check_alike(std::initializer_list<const TensorRef*> images, bool blocked_ok = true) {
  for (const TensorRef* t : images) {
    if (t->shape != (*images.begin())->shape || t->shape.size() < 2)
      throw std::runtime_error("a batch norm's images must be of one shape (N, C, ...)");
    if (t->block != (*images.begin())->block || (t->block && !blocked_ok))
      throw std::runtime_error("a batch norm's images must be held alike (all blocked or "
                               "plain; plain in an inference-mode gradient)");
  }
}

// Refuses operand counts other than `ins` and `outs`, and per-channel operands (`channel_ins`,
// `channel_outs`) of other than x's C elements: the loops index them by channel.
void check_operands(const Node& n, const std::string& op, size_t ins, size_t outs,
                    std::initializer_list<size_t> channel_ins,
                    std::initializer_list<size_t> channel_outs, size_t x) {
  if (n.in.size() != ins || n.out.size() != outs)
    throw std::runtime_error(op + " takes " + std::to_string(ins) + " inputs and " +
                             std::to_string(outs) + " outputs here");
  const Shape& image = n.in[x].shape;
  if (image.size() < 2) throw std::runtime_error(op + ": x must be (N, C, ...)");
  for (const auto& [side, slots, what] :
       {std::tuple(&n.in, channel_ins, "input "), std::tuple(&n.out, channel_outs, "output ")})
    for (size_t k : slots)
      if ((*side)[k].size() != image[1])
        throw std::runtime_error(op + ": " + what + std::to_string(k) + " must hold C values");
}

bool loops_fit(const Node& n, const ChannelRuns& g) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype != F32) return false;
  return g.rest >= 2;
}

// y before its activation: (x - mean) * k + shift with k = invstd * scale, one fused
// multiply-add, in the forward and wherever a folded ReluGrad needs its Relu's output again:
// written once so that both round alike (a contraction left to the compiler could differ
// between two loops).
inline float normalised(float x, float mean, float k, float shift) {
  return std::fma(x - mean, k, shift);
}

// (mean, biased variance) in float of m elements from the sums of d = x - x0 and of d * d
// (BatchNormLoops' one sweep); the variance is kept >= 0 against the last rounding.
inline std::pair<float, float> shifted_moments(double x0, double sum, double squares, double m) {
  const double d = sum / m;
  return {static_cast<float>(x0 + d), static_cast<float>(std::max(squares / m - d * d, 0.0))};
}

// PyTorch's running update and the saved invstd from channel c's batch mean and (biased)
// variance.
struct RunningUpdate {
  float eps, momentum, unbias;
  RunningUpdate(const BatchNormAttrs& a, int64_t m)
      : eps(static_cast<float>(a.epsilon)), momentum(static_cast<float>(a.momentum)),
        unbias(static_cast<float>(static_cast<double>(m) / static_cast<double>(m - 1))) {}
  void operator()(int64_t c, float mean, float var, const float* rm, const float* rv,
                  float* rm_out, float* rv_out, float* invstd) const {
    invstd[c] = 1.f / std::sqrt(var + eps);
    rm_out[c] = (1.f - momentum) * rm[c] + momentum * mean;
    rv_out[c] = (1.f - momentum) * rv[c] + momentum * (var * unbias);
  }
};

// [x, scale, bias, running_mean, running_var] -> [y, running_mean', running_var', saved_mean,
// saved_invstd], float32: the statistics in one sweep, then y = (x - mean) * (invstd * scale) +
// bias. The sweep sums d = x - x0 and d * d in double, x0 the channel's first element
// (`shifted_moments`): x0 being one of the m elements, (mean - x0)^2 <= m var, so the variance
// E[d^2] - E[d]^2 loses at most ~m * 2^-53 of itself to cancellation, far under float32's
// rounding for any m a step holds, where a second sweep over x (the centred squares) cost a
// read of the whole image.
class BatchNormLoops : public Kernel {
 public:
  BatchNormLoops(const Node& n, const BatchNormAttrs& a)
      : g_(n.in[0].shape, n.in[0].block), update_(a, g_.per_channel()),
        act_(n.attrs, "BatchNorm") {
    for (const TensorRef& t : n.in) in_.push_back(t.id);
    for (const TensorRef& t : n.out) out_.push_back(t.id);
  }
  // The blocked loops' chunk sums.
  size_t scratch_bytes() const override { return g_.block ? chunk_sums_bytes(g_, 2) : 0; }
  void run(const Run& r) override {
    // The activation's rule (fused_relu.h's Relu, or LeakyRelu's) after a folded residual,
    // added first as the Add would (float addition commutes: its bits).
    const float* s = in_.size() == 6 ? r.at<float>(in_[5]) : nullptr;
    act_.with_rule([&](auto act) {
      if (s) return normalise(r, [s, act](float v, int64_t e) { return act(v + s[e]); });
      normalise(r, [act](float v, int64_t) { return act(v); });
    });
  }

 private:
  // The loops, y's element e written as act(normalised x, e).
  template <class Act>
  void normalise(const Run& r, Act act) const {
    const float *x = r.at<float>(in_[0]), *scale = r.at<float>(in_[1]),
                *bias = r.at<float>(in_[2]), *rm = r.at<float>(in_[3]),
                *rv = r.at<float>(in_[4]);
    float *y = r.at<float>(out_[0]), *rm_out = r.at<float>(out_[1]),
          *rv_out = r.at<float>(out_[2]), *mean_out = r.at<float>(out_[3]),
          *invstd = r.at<float>(out_[4]);
    const ChannelRuns g = g_;
    const RunningUpdate update = update_;
    const double m = static_cast<double>(g.per_channel());
    if (g.block) {
      // The sums kTaskLanes channels and a chunk of images a task, the statistics a channel a
      // task, then y an image's block a task.
      blocked_phases<2>(g, reinterpret_cast<double*>(r.scratch),
                        [&](auto width, int64_t b, int64_t j0, int64_t i0,
                            double(&sums)[2][kTaskLanes]) {
        constexpr int64_t B = decltype(width)::value, L = kTaskLanes;
        double x0[L];
        for (int64_t j = 0; j < L; ++j) x0[j] = x[g.block_at(0, b) + j0 + j];
        block_sums<B, L>(
            g, b, j0, i0, sums,
            [x, &x0, j0](int64_t e, int64_t j) { return x[e] - x0[j - j0]; },
            [x, &x0, j0](int64_t e, int64_t j) {
              const double d = x[e] - x0[j - j0];
              return d * d;
            });
      }, [&](int64_t c, const std::array<double, 2>& sums) {
        const auto [mean, var] = shifted_moments(x[g.first(c)], sums[0], sums[1], m);
        update(c, mean, var, rm, rv, rm_out, rv_out, invstd);
        mean_out[c] = mean;
      }, [&](auto width, int64_t i, int64_t b) {
        constexpr int64_t B = decltype(width)::value;
        float mean_f[B], k[B], shift[B];
        for (int64_t j = 0; j < B; ++j) {
          const int64_t c = b * B + j;
          mean_f[j] = mean_out[c];
          k[j] = invstd[c] * scale[c];
          shift[j] = bias[c];
        }
        block_elements<B>(g, i, b, [&](int64_t e, int64_t j) {
          y[e] = act(normalised(x[e], mean_f[j], k[j], shift[j]), e);
        });
      });
      return;
    }
#pragma omp parallel for schedule(static) firstprivate(g, update)
    for (int64_t c = 0; c < g.c; ++c) {
      const double x0 = x[g.first(c)];
      const auto [sum, squares] = channel_sums(
          g, c, [x, x0](int64_t e) { return x[e] - x0; },
          [x, x0](int64_t e) {
            const double d = x[e] - x0;
            return d * d;
          });
      const auto [mean_f, var] = shifted_moments(x0, sum, squares, m);
      update(c, mean_f, var, rm, rv, rm_out, rv_out, invstd);
      mean_out[c] = mean_f;
      const float k = invstd[c] * scale[c], b = bias[c];
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t at = g.at(i, c);
#pragma omp simd
        for (int64_t e = at; e < at + g.rest; ++e) y[e] = act(normalised(x[e], mean_f, k, b), e);
      }
    }
  }

  ChannelRuns g_;
  RunningUpdate update_;
  FoldedActivation act_;
  std::vector<int> in_, out_;
};

// [dy, x, scale, saved_mean, saved_invstd] -> [dx, dscale, dbias], float32, batch statistics:
// dbias = sum dy, dscale = sum dy * xhat, dx = scale * invstd * (dy - dbias / m - xhat *
// dscale / m) with xhat = (x - mean) * invstd.
class BatchNormGradLoops : public Kernel {
 public:
  explicit BatchNormGradLoops(const Node& n)
      : g_(n.in[1].shape, n.in[1].block), act_(n.attrs, "BatchNormGrad") {
    for (const TensorRef& t : n.in) in_.push_back(t.id);
    for (const TensorRef& t : n.out) out_.push_back(t.id);
  }
  // The blocked loops' chunk sums, then their per-channel terms of dx (dy's mean, dscale / m).
  size_t scratch_bytes() const override {
    return g_.block ? chunk_sums_bytes(g_, 2) + 2 * static_cast<size_t>(g_.c) * sizeof(float)
                    : 0;
  }
  void run(const Run& r) override {
    const float* dy = r.at<float>(in_[0]);
    if (in_.size() == 6) {  // a folded ReluGrad (LeakyReluGrad): its rule on dy
      const float *x = r.at<float>(in_[1]), *scale = r.at<float>(in_[2]),
                  *mean = r.at<float>(in_[3]), *invstd = r.at<float>(in_[4]),
                  *bias = r.at<float>(in_[5]);
      if (act_.kind == FoldedActivation::kLeaky) {
        const float a = act_.alpha;
        return gradient(r, [=](int64_t e, int64_t c) {
          const float d = dy[e], scaled = d * a;  // (with_rule's reason)
          return normalised(x[e], mean[c], invstd[c] * scale[c], bias[c]) > 0.f ? d : scaled;
        });
      }
      // relu_value(v) <= 0 exactly where v <= 0 (a NaN is neither), so ReluGrad's rule
      // on v is its rule on the Relu's output; asked of relu_value's output, the NaN test in
      // it kept GCC from vectorizing the loops.
      return gradient(r, [=](int64_t e, int64_t c) {
        return relu_grad_value(dy[e], normalised(x[e], mean[c], invstd[c] * scale[c], bias[c]));
      });
    }
    gradient(r, [dy](int64_t e, int64_t) { return dy[e]; });
  }

 private:
  // The loops, dy's element e of channel c read as dy(e, c).
  template <class Dy>
  void gradient(const Run& r, Dy dy) const {
    const float *x = r.at<float>(in_[1]), *scale = r.at<float>(in_[2]),
                *mean = r.at<float>(in_[3]), *invstd = r.at<float>(in_[4]);
    float *dx = r.at<float>(out_[0]), *dscale = r.at<float>(out_[1]),
          *dbias = r.at<float>(out_[2]);
    const ChannelRuns g = g_;
    const double m = static_cast<double>(g.per_channel());
    if (g.block) {
      // As the forward: the sums (dbias, dscale) kTaskLanes channels and a chunk of images a
      // task, the per-channel terms of dx (in the scratch area after the chunk sums) a channel
      // a task, then dx an image's block a task.
      double* part = reinterpret_cast<double*>(r.scratch);
      float* dy_mean = reinterpret_cast<float*>(r.scratch + chunk_sums_bytes(g, 2));
      float* xhat_k = dy_mean + g.c;
      blocked_phases<2>(g, part, [&](auto width, int64_t b, int64_t j0, int64_t i0,
                                     double(&sums)[2][kTaskLanes]) {
        constexpr int64_t B = decltype(width)::value, L = kTaskLanes;
        const float* mu = mean + b * B;
        const float* inv = invstd + b * B;
        block_sums<B, L>(
            g, b, j0, i0, sums,
            [dy, b](int64_t e, int64_t j) -> double { return dy(e, b * B + j); },
            [dy, x, mu, inv, b](int64_t e, int64_t j) {
              return static_cast<double>(dy(e, b * B + j)) * ((x[e] - mu[j]) * inv[j]);
            });
      }, [&](int64_t c, const std::array<double, 2>& sums) {
        dbias[c] = static_cast<float>(sums[0]);
        dscale[c] = static_cast<float>(sums[1]);
        dy_mean[c] = static_cast<float>(sums[0] / m);
        xhat_k[c] = static_cast<float>(sums[1] / m);
      }, [&](auto width, int64_t i, int64_t b) {
        constexpr int64_t B = decltype(width)::value;
        const float *mu = mean + b * B, *inv = invstd + b * B;
        const float *dym = dy_mean + b * B, *xk = xhat_k + b * B;
        float k[B];
        for (int64_t j = 0; j < B; ++j) k[j] = scale[b * B + j] * inv[j];
        block_elements<B>(g, i, b, [&](int64_t e, int64_t j) {
          dx[e] = k[j] * (dy(e, b * B + j) - dym[j] - (x[e] - mu[j]) * inv[j] * xk[j]);
        });
      });
      return;
    }
#pragma omp parallel for schedule(static) firstprivate(g)
    for (int64_t c = 0; c < g.c; ++c) {
      const float mu = mean[c], inv = invstd[c];
      const auto [db, ds] = channel_sums(
          g, c, [dy, c](int64_t e) -> double { return dy(e, c); },
          [dy, x, mu, inv, c](int64_t e) {
            return static_cast<double>(dy(e, c)) * ((x[e] - mu) * inv);
          });
      dbias[c] = static_cast<float>(db);
      dscale[c] = static_cast<float>(ds);
      const float k = scale[c] * inv, dy_mean = static_cast<float>(db / m),
                  xhat_k = static_cast<float>(ds / m);
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t at = g.at(i, c);
#pragma omp simd
        for (int64_t e = 0; e < g.rest; ++e)
          dx[at + e] = k * (dy(at + e, c) - dy_mean - (x[at + e] - mu) * inv * xhat_k);
      }
    }
  }

  ChannelRuns g_;
  FoldedActivation act_;
  std::vector<int> in_, out_;
};

// The oneDNN form of the same: its statistics, then the running update.
class BatchNormTraining : public DnnlKernel {
 public:
  BatchNormTraining(const Node& n, const BatchNormAttrs& a)
      : channels_(n.in[0].shape[1]), update_(a, ChannelRuns(n.in[0].shape).per_channel()),
        rm_(n.in[3].id), rv_(n.in[4].id),
        rm_out_(n.out[1].id), rv_out_(n.out[2].id), mean_(n.out[3].id), invstd_(n.out[4].id) {
    auto md = image_md(n.in[0]);
    dnnl::batch_normalization_forward::primitive_desc pd(
        n.engine, prop::forward_training, md, md, update_.eps,
        flags::use_scale | flags::use_shift, user_scratchpad());
    var_ = temp(channels_ * sizeof(float));
    add(dnnl::batch_normalization_forward(pd), pd,
        {{DNNL_ARG_SRC, n.in[0].id}, {DNNL_ARG_SCALE, n.in[1].id}, {DNNL_ARG_SHIFT, n.in[2].id},
         {DNNL_ARG_DST, n.out[0].id}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, -1, var_}});
  }
  void run(const Run& r) override {
    run_all(r);
    const float* var = reinterpret_cast<const float*>(r.scratch + var_);
    const float* mean = r.at<float>(mean_);
    for (int64_t c = 0; c < channels_; ++c)
      update_(c, mean[c], var[c], r.at<float>(rm_), r.at<float>(rv_), r.at<float>(rm_out_),
              r.at<float>(rv_out_), r.at<float>(invstd_));
  }

 private:
  int64_t channels_;
  RunningUpdate update_;
  int rm_, rv_, rm_out_, rv_out_, mean_, invstd_;
  int64_t var_;
};

KernelPtr batch_norm_inference(const Node& n, const BatchNormAttrs& a) {
  auto md = image_md(n.in[0]);
  dnnl::batch_normalization_forward::primitive_desc pd(
      n.engine, prop::forward_inference, md, md, static_cast<float>(a.epsilon),
      flags::use_global_stats | flags::use_scale | flags::use_shift, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::batch_normalization_forward(pd), pd,
         {{DNNL_ARG_SRC, n.in[0].id}, {DNNL_ARG_SCALE, n.in[1].id}, {DNNL_ARG_SHIFT, n.in[2].id},
          {DNNL_ARG_MEAN, n.in[3].id}, {DNNL_ARG_VARIANCE, n.in[4].id}, {DNNL_ARG_DST, n.out[0].id}});
  return k;
}

// The inference form's folded residual or LeakyRelu (the evaluation graph of a step that
// folded one): oneDNN's y, then y + residual and the activation in one pass.
class ActivationAfter : public Kernel {
 public:
  ActivationAfter(KernelPtr op, const Node& n)
      : op_(std::move(op)), y_(n.out[0].id), s_(n.in.size() == 6 ? n.in[5].id : -1),
        size_(n.out[0].size()), act_(n.attrs, "BatchNorm") {}
  size_t scratch_bytes() const override { return op_->scratch_bytes(); }
  std::string impl() const override { return op_->impl() + (s_ >= 0 ? " + residual" : "") +
                                              " + activation"; }
  void run(const Run& r) override {
    op_->run(r);
    float* y = r.at<float>(y_);
    const float* s = s_ >= 0 ? r.at<float>(s_) : nullptr;
    const int64_t size = size_;
    act_.with_rule([&](auto act) {
#pragma omp parallel for num_threads(r.threads) schedule(static)
      for (int64_t i = 0; i < size; ++i) y[i] = act(s ? y[i] + s[i] : y[i]);
    });
  }

 private:
  KernelPtr op_;
  int y_, s_;
  int64_t size_;
  FoldedActivation act_;
};

KernelPtr batch_norm_any(const Node& n) {
  const BatchNormAttrs a = batch_norm_attrs(n.attrs);  // common/norm.h
  // The loops apply a folded residual and Relu as they write y; oneDNN's forms get the Relu as
  // one pass after, and in inference the residual with it.
  if (a.training && loops_fit(n, ChannelRuns(n.in[0].shape, n.in[0].block)))
    return std::make_unique<BatchNormLoops>(n, a);
  const bool leaky = FoldedActivation(n.attrs, "BatchNorm").kind == FoldedActivation::kLeaky;
  if ((n.in.size() == 6 || leaky) && (a.training || n.in[0].dtype != F32))
    throw std::runtime_error("BatchNorm: a folded residual or leaky_relu needs the float32 "
                             "loops (runs of 2 or more elements per channel) or float32 "
                             "inference");
  if (!a.training && (n.in.size() == 6 || leaky))
    return std::make_unique<ActivationAfter>(batch_norm_inference(n, a), n);
  if (!a.training) return with_fused_activation(batch_norm_inference(n, a), n, "BatchNorm");
  return with_fused_activation(std::make_unique<BatchNormTraining>(n, a), n, "BatchNorm");
}

KernelPtr batch_norm(const Node& n) {
  if (n.in[0].dtype == F64) return batch_norm_f64(n);  // norms_f64.cpp
  const bool training = batch_norm_attrs(n.attrs).training;
  const size_t ins = n.in.size() == 6 ? 6 : 5;  // a folded residual: x's shape, input 5
  if (training)
    check_operands(n, "BatchNorm", ins, 5, {1, 2, 3, 4}, {1, 2, 3, 4}, 0);
  else
    check_operands(n, "BatchNorm", ins, 1, {1, 2, 3, 4}, {}, 0);
  if (ins == 6)
    check_alike({&n.in[0], &n.out[0], &n.in[5]});
  else
    check_alike({&n.in[0], &n.out[0]});
  return native_or_widened(n, batch_norm_any);
}

// [dy, x, scale, saved_mean, saved_invstd] -> [dx, dscale, dbias].
class BatchNormGradTraining : public DnnlKernel {
 public:
  explicit BatchNormGradTraining(const Node& n)
      : channels_(n.in[1].shape[1]), eps_(static_cast<float>(batch_norm_attrs(n.attrs).epsilon)),
        invstd_(n.in[4].id) {
    auto md = image_md(n.in[1]);
    auto f = flags::use_scale | flags::use_shift;
    dnnl::batch_normalization_forward::primitive_desc hint(n.engine, prop::forward_training, md,
                                                           md, eps_, f, user_scratchpad());
    dnnl::batch_normalization_backward::primitive_desc pd(n.engine, prop::backward, md, md, md,
                                                          eps_, f, hint, user_scratchpad());
    var_ = temp(channels_ * sizeof(float));
    add(dnnl::batch_normalization_backward(pd), pd,
        {{DNNL_ARG_DIFF_DST, n.in[0].id}, {DNNL_ARG_SRC, n.in[1].id}, {DNNL_ARG_SCALE, n.in[2].id},
         {DNNL_ARG_MEAN, n.in[3].id}, {DNNL_ARG_VARIANCE, -1, var_},
         {DNNL_ARG_DIFF_SRC, n.out[0].id}, {DNNL_ARG_DIFF_SCALE, n.out[1].id},
         {DNNL_ARG_DIFF_SHIFT, n.out[2].id}});
  }
  void run(const Run& r) override {
    float* var = reinterpret_cast<float*>(r.scratch + var_);
    const float* invstd = r.at<float>(invstd_);
    for (int64_t c = 0; c < channels_; ++c)
      var[c] = static_cast<float>(1.0 / (static_cast<double>(invstd[c]) * invstd[c]) - eps_);
    run_all(r);
  }

 private:
  int64_t channels_;
  float eps_;
  int invstd_;
  int64_t var_;
};

// training=False: the statistics are constants, dx = dy * scale * invstd (a loop).
class BatchNormGradInference : public Kernel {
 public:
  explicit BatchNormGradInference(const Node& n)
      : n_(n.in[1].shape[0]), c_(n.in[1].shape[1]), rest_(n.in[1].size() / (n_ * c_)),
        eps_(static_cast<float>(batch_norm_attrs(n.attrs).epsilon)), dy_(n.in[0].id),
        x_(n.in[1].id),
        scale_(n.in[2].id), mean_(n.in[3].id), var_(n.in[4].id), dx_(n.out[0].id),
        dscale_(n.out[1].id), dbias_(n.out[2].id) {}
  void run(const Run& r) override {
    const float *dy = r.at<float>(dy_), *x = r.at<float>(x_), *scale = r.at<float>(scale_);
    const float *mean = r.at<float>(mean_), *var = r.at<float>(var_);
    float *dx = r.at<float>(dx_), *dscale = r.at<float>(dscale_), *dbias = r.at<float>(dbias_);
    const int64_t N = n_, C = c_, R = rest_;
#pragma omp parallel for
    for (int64_t c = 0; c < C; ++c) {
      float inv = 1.f / std::sqrt(var[c] + eps_);
      double ds = 0, db = 0;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t k = 0; k < R; ++k) {
          int64_t e = (i * C + c) * R + k;
          db += dy[e];
          ds += dy[e] * (x[e] - mean[c]) * inv;
          dx[e] = dy[e] * scale[c] * inv;
        }
      dscale[c] = static_cast<float>(ds);
      dbias[c] = static_cast<float>(db);
    }
  }

 private:
  int64_t n_, c_, rest_;
  float eps_;
  int dy_, x_, scale_, mean_, var_, dx_, dscale_, dbias_;
};

KernelPtr batch_norm_grad_inference(const Node& n) {
  return std::make_unique<BatchNormGradInference>(n);
}

KernelPtr batch_norm_grad_training(const Node& n) {
  if (loops_fit(n, ChannelRuns(n.in[1].shape))) return std::make_unique<BatchNormGradLoops>(n);
  return std::make_unique<BatchNormGradTraining>(n);
}

KernelPtr batch_norm_grad(const Node& n) {
  if (n.in[0].dtype == F64) return batch_norm_grad_f64(n);  // norms_f64.cpp
  const bool training = batch_norm_attrs(n.attrs).training;
  // (a folded Relu or LeakyRelu alike)
  const bool relu = FoldedActivation(n.attrs, "BatchNormGrad").kind != FoldedActivation::kNone;
  // (A folded Relu's sixth input is the BatchNorm's bias, per channel like 2, 3 and 4.)
  if (relu)
    check_operands(n, "BatchNormGrad", 6, 3, {2, 3, 4, 5}, {1, 2}, 1);
  else
    check_operands(n, "BatchNormGrad", 5, 3, {2, 3, 4}, {1, 2}, 1);
  if (relu && !(training && loops_fit(n, ChannelRuns(n.in[1].shape))))
    throw std::runtime_error("BatchNormGrad: a folded Relu needs the float32 training loops "
                             "(an image of two or more elements per channel)");
  check_alike({&n.in[0], &n.in[1], &n.out[0]}, training);
  if (training) return native_or_widened(n, batch_norm_grad_training);
  return widened(n, batch_norm_grad_inference);
}

}  // namespace

PLANNER_REGISTER_KERNELS(batch_norm) {
  r["BatchNorm"] = {batch_norm, "float32|float64"};
  r["BatchNormGrad"] = {batch_norm_grad, "float32|float64"};
}

}  // namespace planner
