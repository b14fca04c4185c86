// Pad and PadGrad as plain loops. Per axis, a table built at load gives the input index each
// output position copies (-1: the constant), the same mapping the numpy reference takes from
// np.pad of an index range; rows along the last axis then read through it.
//   Pad      out = in[src] (or value), rows in parallel
//   PadGrad  dx = 0, then dx[src] += dy for every copied element: serial, since reflect and
//            edge copy one input element to several outputs (a rarely large op)
// float32 or float64 (T: the loops move and add elements of either; float64, a float64 model's
// padding, torch's 3-D convolutions among them).
#include <omp.h>

#include <cstring>

#include "../loops.h"
#include "pad.h"

namespace planner {
namespace {

std::vector<int64_t> source_table(int64_t n, int64_t before, int64_t after, PadMode mode) {
  std::vector<int64_t> src(n + before + after);
  for (int64_t o = 0; o < static_cast<int64_t>(src.size()); ++o) {
    int64_t i = o - before;
    if (mode == kConstant) {
      src[o] = i >= 0 && i < n ? i : -1;
    } else if (mode == kEdge) {
      src[o] = i < 0 ? 0 : i >= n ? n - 1 : i;
    } else {  // reflect: the shape rule keeps pads below n, one reflection
      src[o] = i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
    }
  }
  return src;
}

class Pad : public Kernel {
 public:
  Pad(const Node& n, bool grad)
      : grad_(grad), in_(n.in[0].id), out_(n.out[0].id) {
    if (all_f64(n)) {
      f64_ = true;
    } else {
      require_f32(n);
    }
    small_ = grad ? n.out[0].shape : n.in[0].shape;
    big_ = grad ? n.in[0].shape : n.out[0].shape;
    PadAttrs p = pad_attrs(n.attrs, small_, big_);  // common/pad.h
    value_ = n.attrs.has("value") ? n.attrs.f("value") : 0.0;  // float32 rounds it as p.value
    if (small_.empty()) {  // a scalar: one element, nothing padded
      small_ = big_ = {1};
      p.before = p.after = {0};
    }
    const size_t rank = small_.size();
    for (size_t a = 0; a < rank; ++a)
      table_.push_back(source_table(small_[a], p.before[a], p.after[a], p.mode));
    strides_.assign(rank, 1);
    for (int a = static_cast<int>(rank) - 2; a >= 0; --a) strides_[a] = strides_[a + 1] * small_[a + 1];
    inner_ = big_.back();
    rows_ = inner_ ? numel(big_) / inner_ : 0;
  }
  void run(const Run& r) override {
    if (f64_) return moves<double>(r);
    moves<float>(r);
  }

 private:
  // Offset of the input row that big row `row` copies, or -1 when the row is all constant.
  int64_t base(int64_t row) const {
    int64_t off = 0;
    bool constant = false;
    for (int a = static_cast<int>(big_.size()) - 2; a >= 0; --a) {
      const int64_t s = table_[a][row % big_[a]];
      row /= big_[a];
      if (s < 0) constant = true;
      off += s * strides_[a];
    }
    return constant ? -1 : off;
  }
  template <class T>
  void moves(const Run& r) const {
    if (grad_) {
      scatter(r.at<T>(in_), r.at<T>(out_));
    } else {
      gather(r.at<T>(in_), r.at<T>(out_));
    }
  }
  template <class T>
  void gather(const T* x, T* y) const {
    const T value = static_cast<T>(value_);
    const std::vector<int64_t>& last = table_.back();
    const int64_t inner = inner_;
#pragma omp parallel for
    for (int64_t row = 0; row < rows_; ++row) {
      const int64_t b = base(row);
      T* py = y + row * inner;
      for (int64_t i = 0; i < inner; ++i) py[i] = b < 0 || last[i] < 0 ? value : x[b + last[i]];
    }
  }
  template <class T>
  void scatter(const T* dy, T* dx) const {
    std::memset(dx, 0, sizeof(T) * numel(small_));
    const std::vector<int64_t>& last = table_.back();
    for (int64_t row = 0; row < rows_; ++row) {
      const int64_t b = base(row);
      if (b < 0) continue;
      const T* p = dy + row * inner_;
      for (int64_t i = 0; i < inner_; ++i)
        if (last[i] >= 0) dx[b + last[i]] += p[i];
    }
  }

  bool grad_, f64_ = false;
  int in_, out_;
  Shape small_, big_, strides_;
  std::vector<std::vector<int64_t>> table_;
  int64_t inner_ = 1, rows_ = 0;
  double value_ = 0.0;
};

KernelPtr pad(const Node& n) { return std::make_unique<Pad>(n, false); }
KernelPtr pad_grad(const Node& n) { return std::make_unique<Pad>(n, true); }

}  // namespace

PLANNER_REGISTER_KERNELS(pad) {
  r["Pad"] = {pad, "float32|float64"};
  r["PadGrad"] = {pad_grad, "float32|float64"};
}

}  // namespace planner
