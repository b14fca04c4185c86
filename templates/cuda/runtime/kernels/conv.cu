// Convolutions with cuDNN's legacy convolution API, running the algorithm the plan chose.
//
// Why it looks like this: the plan picked each convolution's algorithm family and sized its
// workspace (plan.memory.convs), so the kernel honours that family instead of asking cuDNN
// again; only when cuDNN does not support the family for this shape (or the plan named none)
// does it fall back, deterministically, to the heuristics' fastest algorithm whose workspace
// fits the planned bytes, and finally to the zero-workspace ALGO_0 / IMPLICIT_GEMM. Which one
// runs is kept (`algorithm()`), so a fallback is visible.
//
// All four ops are one cuDNN convolution seen from three directions: Conv2D is forward,
// Conv2DBackpropInput and ConvTranspose2D are backward data (a transposed convolution is the
// data gradient of the convolution from its output back to its input, with the same IOHW
// weight bytes as that convolution's OIHW filter), Conv2DBackpropFilter is backward filter.
//
// cuDNN's legacy API pads symmetrically; our pads are [top, left, bottom, right]. Asymmetric
// pads go through a zero-padded copy of the image in the scratch area (forward / filter), or
// a padded data gradient that is cropped after (backward data), with the convolution itself
// unpadded: exact, at the cost of that temporary.
//
// Math: float32 convolutions run CUDNN_FMA_MATH, float32 stays float32 (no TF32), as the
// float64 references expect; under a tf32 plan on an sm_80+ device (Node::tf32) they run
// CUDNN_DEFAULT_MATH, which lets cuDNN pick TF32 tensor-core algorithms for float32 data
// (operands rounded to TF32's 10-bit mantissa, float32 accumulation), as PyTorch's
// cudnn.allow_tf32 does. Mixed precision's
// bfloat16 / float16 convolutions (every tensor of the op in the low type) run
// CUDNN_TENSOR_OP_MATH with float32 compute (the convolution descriptor's type): tensor cores,
// float32 accumulation, each output rounded once. The algorithms kept from cuDNN's heuristics
// and find are those of the op's math type.
//
// A Conv2D carrying a folded bias and Relu (planner/frontend/passes/fold_conv_bias.py) adds them in one
// pass over y after the convolution, in float32 before y's one rounding: one pass instead of
// BiasAdd's and Relu's two (bias_activation.cuh, shared with MatMul). The Relu keeps NaN, as
// the Relu kernel and the reference do.
// (cudnnConvolutionBiasActivationForward would save that pass too, but takes IMPLICIT_PRECOMP_GEMM
// alone for some of its modes, where the plan chose the algorithm per convolution.)
//
// Profiling (`planner profile --target gpu`, Kernel::find) asks cuDNN's find
// (cudnnFind*AlgorithmEx, the legacy API's benchmark) to run every algorithm on the kernel's
// own descriptors and tensors, and names each by the plan's family for this direction, so
// the cost table's names are the conv_algo values this kernel honours.
#include <string>
#include <vector>

#include "../bias_activation.cuh"
#include "../cudnn_kernel.h"
#include "../low_float.cuh"
#include "conv.h"

namespace planner {
namespace {

enum class Dir { Forward, Data, Filter };

struct Algo {
  const char* family;  // the plan's name
  int value;           // the direction's cuDNN enum
  const char* name;    // cuDNN's name, for algorithm()
};

// The plan's families mapped per direction (backward: the nearest cuDNN has), and every
// algorithm cuDNN has for the direction (family nullptr), in fallback order.
const std::vector<Algo>& algos(Dir d) {
  static const std::vector<Algo> fwd = {
      {"IMPLICIT_GEMM", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, "FWD_IMPLICIT_GEMM"},
      {"IMPLICIT_PRECOMP_GEMM", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
       "FWD_IMPLICIT_PRECOMP_GEMM"},
      {"GEMM", CUDNN_CONVOLUTION_FWD_ALGO_GEMM, "FWD_GEMM"},
      {"DIRECT", CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, "FWD_DIRECT"},
      {"FFT", CUDNN_CONVOLUTION_FWD_ALGO_FFT, "FWD_FFT"},
      {"FFT_TILING", CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, "FWD_FFT_TILING"},
      {"WINOGRAD", CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, "FWD_WINOGRAD"},
      {"WINOGRAD_NONFUSED", CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
       "FWD_WINOGRAD_NONFUSED"},
  };
  static const std::vector<Algo> data = {
      {"IMPLICIT_GEMM", CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, "BWD_DATA_ALGO_0"},
      {"IMPLICIT_PRECOMP_GEMM", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, "BWD_DATA_ALGO_1"},
      {"GEMM", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, "BWD_DATA_ALGO_1"},
      {"FFT", CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, "BWD_DATA_FFT"},
      {"FFT_TILING", CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, "BWD_DATA_FFT_TILING"},
      {"WINOGRAD", CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, "BWD_DATA_WINOGRAD"},
      {"WINOGRAD_NONFUSED", CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
       "BWD_DATA_WINOGRAD_NONFUSED"},
  };
  // cuDNN has no fused Winograd for the filter gradient: WINOGRAD maps to the non-fused one.
  static const std::vector<Algo> filter = {
      {"IMPLICIT_GEMM", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, "BWD_FILTER_ALGO_0"},
      {"IMPLICIT_PRECOMP_GEMM", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, "BWD_FILTER_ALGO_1"},
      {"GEMM", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, "BWD_FILTER_ALGO_1"},
      {"ALGO_3", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, "BWD_FILTER_ALGO_3"},
      {"FFT", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, "BWD_FILTER_FFT"},
      {"FFT_TILING", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, "BWD_FILTER_FFT_TILING"},
      {"WINOGRAD", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
       "BWD_FILTER_WINOGRAD_NONFUSED"},
      {"WINOGRAD_NONFUSED", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
       "BWD_FILTER_WINOGRAD_NONFUSED"},
  };
  return d == Dir::Forward ? fwd : d == Dir::Data ? data : filter;
}

const char* algo_name(Dir d, int value) {
  for (const Algo& a : algos(d))
    if (a.value == value) return a.name;
  return "UNKNOWN";
}

// The plan's family for a cuDNN algorithm of the direction: the one spelled like cuDNN's
// name when there is one (BWD_FILTER_WINOGRAD_NONFUSED is WINOGRAD_NONFUSED, not WINOGRAD),
// else the first that maps to it (BWD_DATA_ALGO_1 is IMPLICIT_PRECOMP_GEMM); "" for none.
std::string algo_family(Dir d, int value) {
  const Algo* first = nullptr;
  for (const Algo& a : algos(d)) {
    if (a.value != value || !a.family[0]) continue;
    const std::string name = a.name, family = a.family;
    if (name.size() > family.size() &&
        name.compare(name.size() - family.size(), family.size(), family) == 0 &&
        name[name.size() - family.size() - 1] == '_')
      return family;
    if (!first) first = &a;
  }
  return first ? first->family : "";
}

// Whether an algorithm of cuDNN's math type `m` runs in the op's `math`: FMA math takes no
// tensor-op algorithm (float32 stays float32); default and tensor-op math take any.
bool math_allows(cudnnMathType_t math, cudnnMathType_t m) {
  return math != CUDNN_FMA_MATH ||
         (m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

// cuDNN's find results that the plan could run: measured successfully, in a math type the
// op allows, named by a family. cuDNN's times are in ms.
template <class Perf>
std::vector<Measured> kept(Dir d, cudnnMathType_t math, const std::vector<Perf>& perf, int got) {
  std::vector<Measured> out;
  for (int i = 0; i < got; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || !math_allows(math, p.mathType) || !(p.time > 0))
      continue;
    const int value = static_cast<int>(p.algo);
    const std::string family = algo_family(d, value);
    if (family.empty()) continue;
    const Measured m{family, algo_name(d, value), p.time * 1e-3, p.memory};
    bool seen = false;  // an algorithm may come back once per math type: keep the faster
    for (Measured& o : out)
      if (o.family == family) {
        seen = true;
        if (m.seconds < o.seconds) o = m;
      }
    if (!seen) out.push_back(m);
  }
  return out;
}

// ---- explicit padding for asymmetric pads ------------------------------------------------

// xp (planes, Hp, Wp) = x (planes, H, W) placed at (top, left), zeros around it.
template <class T>
__global__ void pad_planes(const T* __restrict__ x, T* __restrict__ xp, int64_t total,
                           int H, int W, int Hp, int Wp, int top, int left) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int w = static_cast<int>(i % Wp), h = static_cast<int>(i / Wp % Hp);
    const int64_t p = i / (int64_t{Wp} * Hp);
    const int ih = h - top, iw = w - left;
    xp[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[(p * H + ih) * W + iw] : narrow<T>(0.f);
  }
}

// x (planes, H, W) = the region of xp (planes, Hp, Wp) at (top, left).
template <class T>
__global__ void crop_planes(const T* __restrict__ xp, T* __restrict__ x, int64_t total,
                            int H, int W, int Hp, int Wp, int top, int left) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int w = static_cast<int>(i % W), h = static_cast<int>(i / W % H);
    const int64_t p = i / (int64_t{W} * H);
    x[i] = xp[(p * Hp + h + top) * Wp + w + left];
  }
}

}  // namespace

// ---- the kernel ----------------------------------------------------------------------------
// Outside the anonymous namespace so that a caller holding the Kernel can ask which algorithm
// runs (dynamic_cast<CudnnConv*>, algorithm()).

// Tensors by role in the equivalent forward convolution: the image (its input), the output
// and the filter (O, C/groups, kh, kw).
struct Roles {
  int image, output, filter;
};

class CudnnConv : public Kernel {
 public:
  CudnnConv(const Node& n, Dir dir, const Roles& ids, const Shape& image, const Shape& output,
            const Shape& filter)
      : dir_(dir), ids_(ids) {
    std::vector<TensorRef> all = n.in;
    all.insert(all.end(), n.out.begin(), n.out.end());
    dtype_ = one_float_type(all, "convolution");
    esize_ = dtype_bytes(dtype_);
    math_ = is_low_float(dtype_)       ? CUDNN_TENSOR_OP_MATH
            : dtype_ == F32 && n.tf32 ? CUDNN_DEFAULT_MATH
                                      : CUDNN_FMA_MATH;
    if (image.size() != 4 || output.size() != 4 || filter.size() != 4)
      throw std::runtime_error("convolution tensors must be 4-D (NCHW, OIHW), got image " +
                               shape_text(image) + ", output " + shape_text(output) +
                               ", filter " + shape_text(filter));
    const ConvGeometry g = conv_geometry(n.attrs);  // common/conv.h
    const int64_t *s = g.strides, *p = g.pads, *d = g.dilations;
    const int64_t groups = g.groups;
    if (dir == Dir::Forward) {  // Conv2D: its folded bias and activation
      bias_ = n.in.size() == 3 ? n.in[2].id : -1;
      relu_ = g.activation == kActRelu;
      if (g.activation == kActLeakyRelu)
        throw std::runtime_error("Conv2D: the CUDA runtime runs no folded leaky_relu (a CPU "
                                 "step's fold); plan the graph for this GPU target");
      if (bias_ >= 0 && n.in[2].shape != Shape{output[1]})
        throw std::runtime_error("Conv2D bias must have shape [" + std::to_string(output[1]) +
                                 "], got " + shape_text(n.in[2].shape));
    }
    if (filter[1] * groups != image[1] || filter[0] % groups || filter[0] != output[1])
      throw std::runtime_error("filter " + shape_text(filter) + " with groups=" +
                               std::to_string(groups) + " does not map image " +
                               shape_text(image) + " to output " + shape_text(output));

    // Symmetric pads go to cuDNN; asymmetric ones make the image explicitly padded.
    padded_ = !g.symmetric();
    H_ = to_int(image[2], "H");
    W_ = to_int(image[3], "W");
    top_ = to_int(p[0], "pad top");
    left_ = to_int(p[1], "pad left");
    Hp_ = padded_ ? to_int(image[2] + p[0] + p[2], "padded H") : H_;
    Wp_ = padded_ ? to_int(image[3] + p[1] + p[3], "padded W") : W_;
    planes_ = image[0] * image[1];
    out_total_ = output[0] * output[1] * output[2] * output[3];
    out_plane_ = output[2] * output[3];
    out_channels_ = output[1];
    if (padded_) temp_bytes_ = align256(esize_ * planes_ * Hp_ * Wp_);

    set_nchw(image_, image[0], image[1], Hp_, Wp_, cudnn_type(dtype_));
    set_nchw(output_, output[0], output[1], output[2], output[3], cudnn_type(dtype_));
    PLANNER_CUDNN(cudnnSetFilter4dDescriptor(filter_, cudnn_type(dtype_), CUDNN_TENSOR_NCHW,
                                             to_int(filter[0], "O"), to_int(filter[1], "C/g"),
                                             to_int(filter[2], "kh"), to_int(filter[3], "kw")));
    PLANNER_CUDNN(cudnnSetConvolution2dDescriptor(
        conv_, padded_ ? 0 : top_, padded_ ? 0 : left_, to_int(s[0], "stride"),
        to_int(s[1], "stride"), to_int(d[0], "dilation"), to_int(d[1], "dilation"),
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));  // float32 compute in every type
    PLANNER_CUDNN(cudnnSetConvolutionGroupCount(conv_, static_cast<int>(groups)));
    PLANNER_CUDNN(cudnnSetConvolutionMathType(conv_, math_));

    int on, oc, oh, ow;
    PLANNER_CUDNN(cudnnGetConvolution2dForwardOutputDim(conv_, image_, filter_, &on, &oc, &oh,
                                                        &ow));
    if (Shape{on, oc, oh, ow} != output)
      throw std::runtime_error("cuDNN computes output " + shape_text(Shape{on, oc, oh, ow}) +
                               " for image " + shape_text(image) + ", the op has " +
                               shape_text(output));
    choose(n);
  }

  size_t scratch_bytes() const override { return temp_bytes_ + workspace_; }
  size_t temp_bytes() const override { return temp_bytes_; }
  const char* algorithm() const { return algo_name(dir_, algo_); }
  std::string detail() const override { return algorithm(); }

  // alpha and beta are float for float32, bfloat16 and float16 data alike (cuDNN's rule).
  void run(const Run& r) override {
    const float one = 1.f, zero = 0.f;
    void* temp = r.scratch;
    void* ws = workspace_ ? r.scratch + temp_bytes_ : nullptr;
    if (dir_ == Dir::Data) {
      void* dx = padded_ ? temp : r.ptr[ids_.image];
      PLANNER_CUDNN(cudnnConvolutionBackwardData(
          r.cudnn, &one, filter_, r.ptr[ids_.filter], output_, r.ptr[ids_.output],
          conv_, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo_), ws, workspace_, &zero,
          image_, dx));
      if (padded_) crop(r, temp);
      return;
    }
    const void* x = image(r, temp);
    if (dir_ == Dir::Forward) {
      PLANNER_CUDNN(cudnnConvolutionForward(
          r.cudnn, &one, image_, x, filter_, r.ptr[ids_.filter], conv_,
          static_cast<cudnnConvolutionFwdAlgo_t>(algo_), ws, workspace_, &zero, output_,
          r.ptr[ids_.output]));
      if (bias_ >= 0 || relu_) bias_and_activation(r);
    } else {
      PLANNER_CUDNN(cudnnConvolutionBackwardFilter(
          r.cudnn, &one, image_, x, output_, r.ptr[ids_.output], conv_,
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo_), ws, workspace_, &zero, filter_,
          r.ptr[ids_.filter]));
    }
  }

  // Every algorithm cuDNN's find runs here within `workspace_bytes` (Kernel::find). Writes
  // the op's output (as a step would); the image of an asymmetric-pad convolution is padded
  // into the temporaries first, as run() does.
  std::vector<Measured> find(const Run& r, size_t workspace_bytes) override {
    void* temp = r.scratch;
    void* ws = workspace_bytes ? r.scratch + temp_bytes_ : nullptr;
    int count = 0, got = 0;
    if (dir_ == Dir::Data) {
      void* dx = padded_ ? temp : r.ptr[ids_.image];
      PLANNER_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(r.cudnn, &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(count);
      PLANNER_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(
          r.cudnn, filter_, r.ptr[ids_.filter], output_, r.ptr[ids_.output], conv_,
          image_, dx, count, &got, perf.data(), ws, workspace_bytes));
      return kept(dir_, math_, perf, got);
    }
    const void* x = image(r, temp);
    if (dir_ == Dir::Forward) {
      PLANNER_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(r.cudnn, &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(count);
      PLANNER_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(
          r.cudnn, image_, x, filter_, r.ptr[ids_.filter], conv_, output_,
          r.ptr[ids_.output], count, &got, perf.data(), ws, workspace_bytes));
      return kept(dir_, math_, perf, got);
    }
    PLANNER_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(r.cudnn, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(count);
    PLANNER_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        r.cudnn, image_, x, output_, r.ptr[ids_.output], conv_, filter_,
        r.ptr[ids_.filter], count, &got, perf.data(), ws, workspace_bytes));
    return kept(dir_, math_, perf, got);
  }

 private:
  // The image a forward or filter-gradient convolution reads: the op's own, or for an
  // asymmetric pad its copy padded into the temporaries.
  const void* image(const Run& r, void* temp) const {
    const void* x = r.ptr[ids_.image];
    if (!padded_) return x;
    const int64_t total = planes_ * Hp_ * Wp_;
    const unsigned threads = 256;
    with_float(dtype_, [&](auto t) {
      using T = decltype(t);
      pad_planes<T><<<blocks_for(total, threads), threads, 0, r.stream>>>(
          static_cast<const T*>(x), static_cast<T*>(temp), total, H_, W_, Hp_, Wp_, top_, left_);
    });
    PLANNER_LAUNCHED("pad_planes");
    return temp;
  }

  // A Conv2D's folded bias and Relu, over the output cuDNN wrote.
  void bias_and_activation(const Run& r) const {
    launch_bias_activation(dtype_, r.ptr[ids_.output], bias_ >= 0 ? r.ptr[bias_] : nullptr,
                           out_total_, out_plane_, out_channels_, relu_, r.stream);
  }

  // The padded data gradient in the temporaries, cropped into the op's dx.
  void crop(const Run& r, const void* temp) const {
    const int64_t total = planes_ * H_ * W_;
    const unsigned threads = 256;
    with_float(dtype_, [&](auto t) {
      using T = decltype(t);
      crop_planes<T><<<blocks_for(total, threads), threads, 0, r.stream>>>(
          static_cast<const T*>(temp), reinterpret_cast<T*>(r.ptr[ids_.image]), total, H_, W_,
          Hp_, Wp_, top_, left_);
    });
    PLANNER_LAUNCHED("crop_planes");
  }

  // Whether `algo` rounds each output once: a low-type gradient never runs the algorithms
  // that add partial sums atomically into the output (BWD_DATA_ALGO_0, BWD_FILTER_ALGO_0 and
  // ALGO_3), each add a rounding to bfloat16 / float16 (planner/costs/convalgo.py
  // ATOMIC_GRADIENT_FAMILIES: the planner offers them to float32 only).
  bool rounds_once(int algo) const {
    if (!is_low_float(dtype_)) return true;
    if (dir_ == Dir::Data) return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    if (dir_ == Dir::Filter)
      return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
             algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    return true;
  }

  // The workspace `algo` needs here, or cuDNN's status when it does not support it.
  cudnnStatus_t query(cudnnHandle_t h, int algo, size_t* bytes) const {
    *bytes = 0;
    switch (dir_) {
      case Dir::Forward:
        return cudnnGetConvolutionForwardWorkspaceSize(
            h, image_, filter_, conv_, output_, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
            bytes);
      case Dir::Data:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, filter_, output_, conv_, image_, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
            bytes);
      default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, image_, output_, conv_, filter_,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
    }
  }

  // cuDNN's heuristic ranking (no timing, nothing allocated): the op's math type's.
  std::vector<int> ranked(cudnnHandle_t h) const {
    std::vector<int> out;
    int count = 0, got = 0;
    auto keep = [&](auto& perf) {
      for (int i = 0; i < got; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && math_allows(math_, perf[i].mathType) &&
            rounds_once(static_cast<int>(perf[i].algo)))
          out.push_back(static_cast<int>(perf[i].algo));
    };
    if (dir_ == Dir::Forward) {
      PLANNER_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(count);
      PLANNER_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, image_, filter_, conv_, output_,
                                                           count, &got, perf.data()));
      keep(perf);
    } else if (dir_ == Dir::Data) {
      PLANNER_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(count);
      PLANNER_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, filter_, output_, conv_,
                                                                image_, count, &got,
                                                                perf.data()));
      keep(perf);
    } else {
      PLANNER_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(count);
      PLANNER_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, image_, output_, conv_,
                                                                  filter_, count, &got,
                                                                  perf.data()));
      keep(perf);
    }
    return out;
  }

  // The plan's family when cuDNN supports it here and its workspace fits the planned bytes
  // (the plan's modelled workspace may be smaller than cuDNN's real one: the memory plan is
  // kept, the algorithm gives way); else the heuristics' first supported one whose workspace
  // fits; else ALGO_0 / IMPLICIT_GEMM (no workspace) where cuDNN supports it for the op's
  // data type, else the supported one with the smallest workspace (a block of its own at
  // load, which stats() reports).
  void choose(const Node& n) {
    size_t bytes = 0;
    const size_t budget = n.planned_scratch > 0 ? static_cast<size_t>(n.planned_scratch) : 0;
    if (n.attrs.has("conv_algo")) {
      const std::string family = n.attrs.s("conv_algo");
      const Algo* mapped = nullptr;
      for (const Algo& a : algos(dir_))
        if (a.family[0] && family == a.family) mapped = &a;
      if (!mapped)
        throw std::runtime_error("unknown conv_algo '" + family + "' (expected a cuDNN family: "
                                 "IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM, GEMM, WINOGRAD, "
                                 "WINOGRAD_NONFUSED, FFT, FFT_TILING; ALGO_3 for a "
                                 "filter gradient)");
      if (rounds_once(mapped->value) &&
          query(n.cudnn, mapped->value, &bytes) == CUDNN_STATUS_SUCCESS &&
          bytes + temp_bytes_ <= budget) {
        algo_ = mapped->value;
        workspace_ = bytes;
        return;
      }
    }
    for (int a : ranked(n.cudnn)) {
      if (query(n.cudnn, a, &bytes) == CUDNN_STATUS_SUCCESS && bytes + temp_bytes_ <= budget) {
        algo_ = a;
        workspace_ = bytes;
        return;
      }
    }
    algo_ = 0;  // FWD_IMPLICIT_GEMM, BWD_DATA_ALGO_0, BWD_FILTER_ALGO_0
    if (rounds_once(algo_) && query(n.cudnn, algo_, &bytes) == CUDNN_STATUS_SUCCESS) {
      workspace_ = bytes;
      return;
    }
    bool found = false;
    for (int a : ranked(n.cudnn)) {
      if (query(n.cudnn, a, &bytes) == CUDNN_STATUS_SUCCESS && (!found || bytes < workspace_)) {
        algo_ = a;
        workspace_ = bytes;
        found = true;
      }
    }
    if (!found)
      throw std::runtime_error(std::string("cuDNN has no algorithm for this convolution in ") +
                               float_name(dtype_) + " on this GPU");
  }

  Dir dir_;
  Roles ids_;
  TensorDesc image_, output_;
  FilterDesc filter_;
  ConvDesc conv_;
  int algo_ = 0;
  int dtype_ = F32;
  size_t esize_ = 4;
  cudnnMathType_t math_ = CUDNN_FMA_MATH;
  size_t workspace_ = 0, temp_bytes_ = 0;
  bool padded_ = false;
  int H_ = 0, W_ = 0, Hp_ = 0, Wp_ = 0, top_ = 0, left_ = 0;
  int64_t planes_ = 0;
  int bias_ = -1;  // a Conv2D's folded bias tensor, or none
  bool relu_ = false;
  int64_t out_total_ = 0, out_plane_ = 0, out_channels_ = 0;
};

namespace {

// [x, w] or [x, w, bias] -> y
KernelPtr conv2d(const Node& n) {
  return std::make_unique<CudnnConv>(n, Dir::Forward, Roles{n.in[0].id, n.out[0].id, n.in[1].id},
                                n.in[0].shape, n.out[0].shape, n.in[1].shape);
}

// [dy, w] -> dx of shape input_shape
KernelPtr conv2d_backprop_input(const Node& n) {
  return std::make_unique<CudnnConv>(n, Dir::Data, Roles{n.out[0].id, n.in[0].id, n.in[1].id},
                                n.out[0].shape, n.in[0].shape, n.in[1].shape);
}

// [x, dy] -> dw of shape filter_shape
KernelPtr conv2d_backprop_filter(const Node& n) {
  return std::make_unique<CudnnConv>(n, Dir::Filter, Roles{n.in[0].id, n.in[1].id, n.out[0].id},
                                n.in[0].shape, n.in[1].shape, n.out[0].shape);
}

// [x (N,C,H,W), w (C,O/g,kh,kw)] -> y: the data gradient of the convolution y -> x whose
// filter is w (C outputs, O/g inputs per group). output_padding needs nothing more: cuDNN
// sizes the backward pass by floor division, so the extra bottom/right rows get zeros, as the
// reference's (they are reached by no window).
KernelPtr conv_transpose2d(const Node& n) {
  return std::make_unique<CudnnConv>(n, Dir::Data, Roles{n.out[0].id, n.in[0].id, n.in[1].id},
                                n.out[0].shape, n.in[0].shape, n.in[1].shape);
}

}  // namespace

PLANNER_REGISTER_KERNELS(conv) {
  r["Conv2D"] = conv2d;
  r["Conv2DBackpropInput"] = conv2d_backprop_input;
  r["Conv2DBackpropFilter"] = conv2d_backprop_filter;
  r["ConvTranspose2D"] = conv_transpose2d;
}

}  // namespace planner
