// Softmax, LogSoftmax and SoftmaxGrad with cuDNN's softmax along any axis.
//
// Why this shape: cuDNN's channel mode normalises over C at every (N, H, W), so a tensor seen
// as (outer, axis, inner, 1) gives softmax along any axis of a row-major tensor with no copy.
// CUDNN_SOFTMAX_ACCURATE subtracts the maximum first, as the references do (activation.py,
// log_softmax.py). SoftmaxGrad [dy, y] -> dx = y * (dy - sum(dy * y)) is cuDNN's backward.
#include "../cudnn_kernel.h"

namespace planner {
namespace {

enum class SoftmaxKind { Softmax, LogSoftmax, Grad };

class Softmax : public Kernel {
 public:
  Softmax(const Node& n, SoftmaxKind kind) : kind_(kind) {
    require_f32(n);
    const Shape& s = n.in[0].shape;
    for (const TensorRef& t : n.in)
      if (t.shape != s)
        throw std::runtime_error("softmax tensors must share one shape, got " +
                                 shape_text(t.shape) + " and " + shape_text(s));
    if (n.out[0].shape != s)
      throw std::runtime_error("softmax output " + shape_text(n.out[0].shape) +
                               " differs from its input " + shape_text(s));
    const AxisSplit a = axis_split(n.attrs, s);
    const int64_t outer = a.outer, len = a.extent, inner = a.inner;
    empty_ = outer * len * inner == 0;
    if (!empty_) set_nchw(desc_, outer, len, inner, 1);
    for (const TensorRef& t : n.in) ids_.push_back(t.id);
    ids_.push_back(n.out[0].id);
  }

  void run(const Run& r) override {
    if (empty_) return;
    const float one = 1.f, zero = 0.f;
    auto p = [&](int k) { return r.at<float>(ids_[k]); };
    if (kind_ == SoftmaxKind::Grad) {  // [dy, y] -> dx
      PLANNER_CUDNN(cudnnSoftmaxBackward(r.cudnn, CUDNN_SOFTMAX_ACCURATE,
                                         CUDNN_SOFTMAX_MODE_CHANNEL, &one, desc_, p(1), desc_,
                                         p(0), &zero, desc_, p(2)));
      return;
    }
    PLANNER_CUDNN(cudnnSoftmaxForward(
        r.cudnn, kind_ == SoftmaxKind::LogSoftmax ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
        CUDNN_SOFTMAX_MODE_CHANNEL, &one, desc_, p(0), &zero, desc_, p(1)));
  }

 private:
  SoftmaxKind kind_;
  bool empty_ = false;
  std::vector<int> ids_;
  TensorDesc desc_;
};

KernelPtr softmax(const Node& n) { return std::make_unique<Softmax>(n, SoftmaxKind::Softmax); }
KernelPtr log_softmax(const Node& n) { return std::make_unique<Softmax>(n, SoftmaxKind::LogSoftmax); }
KernelPtr softmax_grad(const Node& n) { return std::make_unique<Softmax>(n, SoftmaxKind::Grad); }

}  // namespace

PLANNER_REGISTER_KERNELS(softmax) {
  r["Softmax"] = softmax;
  r["LogSoftmax"] = log_softmax;
  r["SoftmaxGrad"] = softmax_grad;
}

}  // namespace planner
