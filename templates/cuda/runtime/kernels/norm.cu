// Normalisation: BatchNorm (training and inference), BatchNormGrad, LRN, LRNGrad.
//
// Why cuDNN for BatchNorm: its spatial batch norm has the reference's conventions
// (planner/ops/norm.py, which are PyTorch's): y from the biased batch variance, saved
// mean and 1/sqrt(var + eps) for the backward, and the running update
// (1 - f) * running + f * batch with f = momentum and the *unbiased* variance for
// running_var (PyTorch's cuDNN path passes momentum as exponentialAverageFactor for that
// reason). cuDNN updates the running statistics in place, so they are first copied into the
// op's outputs when those do not share the inputs' bytes. Any rank >= 2 is (N, C, rest, 1).
//
// BatchNormGrad with training=False (the gradient of the inference form, running statistics
// as inputs) has no cuDNN call: one small kernel, a block per channel.
//
// Mixed precision: x, y (and dy, dx) may be bfloat16 or float16, all four of one type, with
// the scale, bias and every statistic float32 (cuDNN's batch norm takes that pair: its
// statistics descriptor, derived from x's, is float32), computing in float32.
//
// LRN is a plain kernel too: cuDNN's LRN limits size to [1, 16], beta >= 0.01, bias >= 1e-5
// and does not document its window for even sizes; the reference's ONNX window is
// [c - (size-1)/2, c + size/2] clipped to the channels, any size.
#include <algorithm>
#include <initializer_list>

#include "../cudnn_kernel.h"
#include "../low_float.cuh"
#include "fused_activation.h"
#include "norm.h"

namespace planner {
namespace {

constexpr int kThreads = 256;

// x seen as (N, C, inner): the channel axis is 1, every later axis is spatial.
struct Nci {
  int64_t n, c, inner;
};

Nci channels_of(const Shape& s, const char* op) {
  if (s.size() < 2)
    throw std::runtime_error(std::string(op) + " needs x of rank >= 2 (N, C, ...), got " +
                             shape_text(s));
  int64_t inner = 1;
  for (size_t k = 2; k < s.size(); ++k) inner *= s[k];
  return Nci{s[0], s[1], inner};
}

// The data tensors (by input and output position) share one float type, float32 or a low one;
// every other tensor is float32. Returns the data type.
int data_type(const Node& n, std::initializer_list<size_t> ins, std::initializer_list<size_t> outs,
              const char* op) {
  const int d = n.in[*ins.begin()].dtype;
  if (d != F32 && !is_low_float(d))
    throw std::runtime_error(std::string(op) + ": x must be float32, bfloat16 or float16");
  for (size_t k = 0; k < n.in.size(); ++k) {
    const bool data = std::find(ins.begin(), ins.end(), k) != ins.end();
    if (n.in[k].dtype != (data ? d : F32))
      throw std::runtime_error(std::string(op) + ": input " + std::to_string(k) + " is " +
                               float_name(n.in[k].dtype) + ", expected " +
                               float_name(data ? d : F32));
  }
  for (size_t k = 0; k < n.out.size(); ++k) {
    const bool data = std::find(outs.begin(), outs.end(), k) != outs.end();
    if (n.out[k].dtype != (data ? d : F32))
      throw std::runtime_error(std::string(op) + ": output " + std::to_string(k) + " is " +
                               float_name(n.out[k].dtype) + ", expected " +
                               float_name(data ? d : F32));
  }
  return d;
}

void require_per_channel(const Node& n, size_t first, size_t last, int64_t c) {
  for (size_t k = first; k <= last && k < n.in.size(); ++k)
    if (n.in[k].shape != Shape{c})
      throw std::runtime_error("per-channel input " + std::to_string(k) + " has shape " +
                               shape_text(n.in[k].shape) + ", expected [" +
                               std::to_string(c) + "]");
}

// ---- BatchNorm -------------------------------------------------------------------------------

// A Relu folded into a batch norm is the CPU step's (planner/step/fold_norm_relu.py): a plan
// giving one to cuDNN's batch norm is refused rather than run without it.
void refuse_folded_relu(const Node& n, const std::string& op) {
  if (fused_activation(n.attrs, op) != kActNone)
    throw std::runtime_error(op + ": a folded Relu is the CPU runtime's; re-plan for this GPU");
}

class BatchNorm : public Kernel {
 public:
  explicit BatchNorm(const Node& n) {
    const int type = data_type(n, {0}, {0}, "BatchNorm");
    const Nci d = channels_of(n.in[0].shape, "BatchNorm");
    refuse_folded_relu(n, "BatchNorm");
    // A sixth input is a residual sum the CPU runtime's loops fold in (fold_norm_sum.py):
    // refused, not left unread.
    if (n.in.size() != 5)
      throw std::runtime_error("BatchNorm takes 5 inputs here; a folded residual is the CPU "
                               "runtime's: re-plan for this GPU");
    require_per_channel(n, 1, 4, d.c);
    const BatchNormAttrs a = batch_norm_attrs(n.attrs);  // common/norm.h
    training_ = a.training;
    eps_ = a.epsilon;
    momentum_ = a.momentum;
    if (eps_ < CUDNN_BN_MIN_EPSILON)
      throw std::runtime_error("BatchNorm epsilon " + std::to_string(eps_) +
                               " is below cuDNN's minimum");
    if (n.out.size() != (training_ ? 5u : 1u))
      throw std::runtime_error("BatchNorm has 5 outputs when training, 1 otherwise");
    if (n.out[0].shape != n.in[0].shape)
      throw std::runtime_error("BatchNorm: y " + shape_text(n.out[0].shape) + " differs from x " +
                               shape_text(n.in[0].shape));
    for (size_t k = 1; k < n.out.size(); ++k)
      if (n.out[k].shape != Shape{d.c})
        throw std::runtime_error("BatchNorm: statistics output " + std::to_string(k) +
                                 " must have shape [" + std::to_string(d.c) + "]");
    if (training_ && d.n * d.inner < 2)
      throw std::runtime_error("BatchNorm training needs more than one value per channel");
    for (const TensorRef& t : n.in) ids_.push_back(t.id);
    for (const TensorRef& t : n.out) ids_.push_back(t.id);
    channel_bytes_ = d.c * sizeof(float);
    set_nchw(x_, d.n, d.c, d.inner, 1, cudnn_type(type));
    PLANNER_CUDNN(cudnnDeriveBNTensorDescriptor(stats_, x_, CUDNN_BATCHNORM_SPATIAL));
  }

  void run(const Run& r) override {
    const float one = 1.f, zero = 0.f;
    // ids_: x, scale, bias, running_mean, running_var, y[, mean_new, var_new, mean, invstd]
    auto p = [&](int k) { return static_cast<void*>(r.ptr[ids_[k]]); };
    if (!training_) {
      PLANNER_CUDNN(cudnnBatchNormalizationForwardInference(
          r.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_, p(0), x_, p(5), stats_, p(1), p(2),
          p(3), p(4), eps_));
      return;
    }
    Copy(ids_[3], ids_[6], channel_bytes_).run(r);
    Copy(ids_[4], ids_[7], channel_bytes_).run(r);
    PLANNER_CUDNN(cudnnBatchNormalizationForwardTraining(
        r.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_, p(0), x_, p(5), stats_, p(1), p(2),
        momentum_, p(6), p(7), eps_, p(8), p(9)));
  }

 private:
  bool training_ = true;
  double eps_ = 1e-5, momentum_ = 0.1;
  std::vector<int> ids_;
  int64_t channel_bytes_ = 0;
  TensorDesc x_, stats_;
};

// dx = dy * scale * invstd, dscale = sum(dy * xhat), dbias = sum(dy), invstd from the running
// variance: one block per channel. T: the data's type (float32 statistics, float32 sums).
template <class T>
__global__ void batch_norm_grad_frozen(const T* __restrict__ dy, const T* __restrict__ x,
                                       const float* __restrict__ scale,
                                       const float* __restrict__ mean,
                                       const float* __restrict__ var, float eps,
                                       T* __restrict__ dx, float* __restrict__ dscale,
                                       float* __restrict__ dbias, Nci d) {
  __shared__ float sums[2][kThreads / 32];
  const int64_t m = d.n * d.inner;
  for (int64_t c = blockIdx.x; c < d.c; c += gridDim.x) {
    const float invstd = rsqrtf(var[c] + eps), k = scale[c] * invstd, mu = mean[c];
    float sb = 0.f, ss = 0.f;
    for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
      const int64_t i = (e / d.inner * d.c + c) * d.inner + e % d.inner;
      const float g = widen(dy[i]);
      sb += g;
      ss += g * (widen(x[i]) - mu) * invstd;
      dx[i] = narrow<T>(g * k);
    }
    for (int off = 16; off > 0; off /= 2) {
      sb += __shfl_down_sync(0xffffffffu, sb, off);
      ss += __shfl_down_sync(0xffffffffu, ss, off);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
      sums[0][warp] = sb;
      sums[1][warp] = ss;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float b = 0.f, s = 0.f;
      for (int w = 0; w < kThreads / 32; ++w) {
        b += sums[0][w];
        s += sums[1][w];
      }
      dbias[c] = b;
      dscale[c] = s;
    }
    __syncthreads();
  }
}

// [dy, x, scale, saved_mean, saved_invstd] -> [dx, dscale, dbias]; training=False: the last
// two inputs are running_mean and running_var.
class BatchNormGrad : public Kernel {
 public:
  explicit BatchNormGrad(const Node& n) {
    type_ = data_type(n, {0, 1}, {0}, "BatchNormGrad");
    d_ = channels_of(n.in[1].shape, "BatchNormGrad");
    refuse_folded_relu(n, "BatchNormGrad");
    if (n.in[0].shape != n.in[1].shape || n.out[0].shape != n.in[1].shape)
      throw std::runtime_error("BatchNormGrad: dy, x and dx must have one shape");
    require_per_channel(n, 2, 4, d_.c);
    const BatchNormAttrs a = batch_norm_attrs(n.attrs);  // common/norm.h
    training_ = a.training;
    eps_ = a.epsilon;
    for (const TensorRef& t : n.in) ids_.push_back(t.id);
    for (const TensorRef& t : n.out) ids_.push_back(t.id);
    set_nchw(x_, d_.n, d_.c, d_.inner, 1, cudnn_type(type_));
    PLANNER_CUDNN(cudnnDeriveBNTensorDescriptor(stats_, x_, CUDNN_BATCHNORM_SPATIAL));
  }

  void run(const Run& r) override {
    // ids_: dy, x, scale, mean, invstd|var, dx, dscale, dbias
    auto p = [&](int k) { return r.at<float>(ids_[k]); };  // the float32 ones
    if (training_) {
      const float one = 1.f, zero = 0.f;
      // eps is unused when the saved statistics are given (cuDNN still checks it).
      PLANNER_CUDNN(cudnnBatchNormalizationBackward(
          r.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x_, r.ptr[ids_[1]], x_,
          r.ptr[ids_[0]], x_, r.ptr[ids_[5]], stats_, p(2), p(6), p(7), eps_, p(3), p(4)));
      return;
    }
    if (d_.c == 0) return;
    const unsigned blocks = static_cast<unsigned>(d_.c < 65535 ? d_.c : 65535);
    with_float(type_, [&](auto t) {
      using T = decltype(t);
      batch_norm_grad_frozen<T><<<blocks, kThreads, 0, r.stream>>>(
          r.at<T>(ids_[0]), r.at<T>(ids_[1]), p(2), p(3), p(4), static_cast<float>(eps_),
          r.at<T>(ids_[5]), p(6), p(7), d_);
    });
    PLANNER_LAUNCHED("batch_norm_grad_frozen");
  }

 private:
  Nci d_{};
  int type_ = F32;
  bool training_ = true;
  double eps_ = 1e-5;
  std::vector<int> ids_;
  TensorDesc x_, stats_;
};

// ---- LRN -------------------------------------------------------------------------------------

// D at channel c: bias + alpha/size * sum of x^2 over [c - (size-1)/2, c + size/2] in [0, C).
__device__ inline float lrn_denominator(const float* __restrict__ xs, int64_t stride, int c,
                                        int C, const LrnParams& p) {
  const int lo = max(c - (p.size - 1) / 2, 0), hi = min(c + p.size / 2, C - 1);
  float s = 0.f;
  for (int k = lo; k <= hi; ++k) {
    const float v = xs[k * stride];
    s += v * v;
  }
  return p.bias + p.alpha / p.size * s;
}

// One thread per element of x (N, C, inner).
__global__ void lrn(const float* __restrict__ x, float* __restrict__ y, Nci d, LrnParams p) {
  const int64_t total = d.n * d.c * d.inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int c = static_cast<int>(i / d.inner % d.c);
    const float* xs = x + (i / (d.inner * d.c)) * d.c * d.inner + i % d.inner;  // channel 0
    y[i] = x[i] * powf(lrn_denominator(xs, d.inner, c, static_cast<int>(d.c), p), -p.beta);
  }
}

// dx_j = dy_j D_j^-beta - 2 alpha beta / size * x_j * sum over c in
// [j - size/2, j + (size-1)/2] (the window mirrored) of dy_c y_c / D_c.
__global__ void lrn_grad(const float* __restrict__ dy, const float* __restrict__ x,
                         const float* __restrict__ y, float* __restrict__ dx, Nci d,
                         LrnParams p) {
  const int64_t total = d.n * d.c * d.inner;
  const int C = static_cast<int>(d.c);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int j = static_cast<int>(i / d.inner % d.c);
    const int64_t base = (i / (d.inner * d.c)) * d.c * d.inner + i % d.inner;  // channel 0
    const float* xs = x + base;
    const int lo = max(j - p.size / 2, 0), hi = min(j + (p.size - 1) / 2, C - 1);
    float back = 0.f;
    for (int c = lo; c <= hi; ++c) {
      const int64_t k = base + c * d.inner;
      back += dy[k] * y[k] / lrn_denominator(xs, d.inner, c, C, p);
    }
    const float dj = lrn_denominator(xs, d.inner, j, C, p);
    dx[i] = dy[i] * powf(dj, -p.beta) - 2.f * p.alpha * p.beta / p.size * x[i] * back;
  }
}

// LRN: [x] -> y; LRNGrad: [dy, x, y] -> dx.
class Lrn : public Kernel {
 public:
  Lrn(const Node& n, bool grad) : grad_(grad) {
    require_f32(n);
    d_ = channels_of(n.in[grad ? 1 : 0].shape, grad ? "LRNGrad" : "LRN");
    to_int(d_.c, "channels");
    for (const TensorRef& t : n.in)
      if (t.shape != n.out[0].shape)
        throw std::runtime_error("LRN tensors must share one shape, got " +
                                 shape_text(t.shape) + " and " + shape_text(n.out[0].shape));
    p_ = lrn_params(n.attrs);  // common/norm.h
    for (const TensorRef& t : n.in) ids_.push_back(t.id);
    ids_.push_back(n.out[0].id);
  }

  void run(const Run& r) override {
    const int64_t total = d_.n * d_.c * d_.inner;
    if (total == 0) return;
    auto p = [&](int k) { return r.at<float>(ids_[k]); };
    const unsigned blocks = blocks_for(total, kThreads);
    if (grad_)
      lrn_grad<<<blocks, kThreads, 0, r.stream>>>(p(0), p(1), p(2), p(3), d_, p_);
    else
      lrn<<<blocks, kThreads, 0, r.stream>>>(p(0), p(1), d_, p_);
    PLANNER_LAUNCHED(grad_ ? "lrn_grad" : "lrn");
  }

 private:
  bool grad_;
  Nci d_{};
  LrnParams p_{};
  std::vector<int> ids_;
};

KernelPtr batch_norm(const Node& n) { return std::make_unique<BatchNorm>(n); }
KernelPtr batch_norm_grad(const Node& n) { return std::make_unique<BatchNormGrad>(n); }
KernelPtr lrn_op(const Node& n) { return std::make_unique<Lrn>(n, false); }
KernelPtr lrn_grad_op(const Node& n) { return std::make_unique<Lrn>(n, true); }

}  // namespace

PLANNER_REGISTER_KERNELS(norm) {
  r["BatchNorm"] = batch_norm;
  r["BatchNormGrad"] = batch_norm_grad;
  r["LRN"] = lrn_op;
  r["LRNGrad"] = lrn_grad_op;
}

}  // namespace planner
