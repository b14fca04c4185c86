// LSTMCell and LSTMCellGrad on the GPU (planner/ops/lstm.py, as the CPU kernel): one thread per
// hidden unit of a row, reading the four gate blocks where `order` puts them, grid-stride.
//   LSTMCell     [gates, c_prev, recurrent?] -> [h, c, acts]
//   LSTMCellGrad [dh, dc, acts, c_prev, c, dh2?] -> [dgates, dc_prev]   (dh2 summed into dh)
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../kernel.h"
#include "lstm.h"

namespace planner {
namespace {

using Blocks = LstmGates;  // common/lstm.h

// The reference's sigmoid: exp of a non-positive number only.
__device__ __forceinline__ float sigmoid(float x) {
  const float e = expf(-fabsf(x));
  return x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

__global__ void lstm_cell(const float* __restrict__ z, const float* __restrict__ zr,
                          const float* __restrict__ cp, float* __restrict__ h,
                          float* __restrict__ c, float* __restrict__ acts, int64_t total,
                          int64_t hidden, Blocks at) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = (k / hidden) * 4 * hidden, j = k % hidden;
    auto pre = [&](int64_t b) { return z[row + b + j] + (zr ? zr[row + b + j] : 0.f); };
    const float i = sigmoid(pre(at.i)), f = sigmoid(pre(at.f)), g = tanhf(pre(at.g)),
                o = sigmoid(pre(at.o));
    const float cn = f * cp[k] + i * g;
    acts[row + at.i + j] = i;
    acts[row + at.f + j] = f;
    acts[row + at.g + j] = g;
    acts[row + at.o + j] = o;
    c[k] = cn;
    h[k] = o * tanhf(cn);
  }
}

__global__ void lstm_cell_grad(const float* __restrict__ dh, const float* __restrict__ dh2,
                               const float* __restrict__ dc,
                               const float* __restrict__ acts, const float* __restrict__ cp,
                               const float* __restrict__ c, float* __restrict__ dz,
                               float* __restrict__ dcp, int64_t total, int64_t hidden,
                               Blocks at) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = (k / hidden) * 4 * hidden, j = k % hidden;
    const float i = acts[row + at.i + j], f = acts[row + at.f + j], g = acts[row + at.g + j],
                o = acts[row + at.o + j];
    const float tc = tanhf(c[k]), dhk = dh2 ? dh[k] + dh2[k] : dh[k];
    const float dct = dc[k] + dhk * o * (1.f - tc * tc);
    dz[row + at.i + j] = dct * g * i * (1.f - i);
    dz[row + at.f + j] = dct * cp[k] * f * (1.f - f);
    dz[row + at.g + j] = dct * i * (1.f - g * g);
    dz[row + at.o + j] = dhk * tc * o * (1.f - o);
    dcp[k] = dct * f;
  }
}

class LSTMCell : public Kernel {
 public:
  LSTMCell(const Node& n, bool grad)
      : grad_(grad), threads_(block_threads(n)), hidden_(n.out[grad ? 1 : 0].shape[1]),
        total_(n.out[grad ? 1 : 0].size()), at_(lstm_gates(n.attrs, hidden_)) {
    for (const auto& t : n.in) {
      if (t.dtype != F32) throw std::runtime_error("LSTMCell: float32 only on the GPU");
      in_.push_back(t.id);
    }
    for (const auto& t : n.out) out_.push_back(t.id);
    blocks_ = blocks_for(total_, threads_);
  }
  void run(const Run& r) override {
    if (total_ == 0) return;
    auto in = [&](size_t k) { return k < in_.size() ? r.at<const float>(in_[k]) : nullptr; };
    auto out = [&](size_t k) { return r.at<float>(out_[k]); };
    if (grad_) {
      lstm_cell_grad<<<blocks_, threads_, 0, r.stream>>>(in(0), in(5), in(1), in(2), in(3),
                                                        in(4), out(0), out(1), total_,
                                                        hidden_, at_);
      PLANNER_LAUNCHED("LSTMCellGrad");
    } else {
      lstm_cell<<<blocks_, threads_, 0, r.stream>>>(in(0), in(2), in(1), out(0), out(1),
                                                   out(2), total_, hidden_, at_);
      PLANNER_LAUNCHED("LSTMCell");
    }
  }

 private:
  bool grad_;
  int threads_;
  int64_t hidden_, total_;
  Blocks at_;
  std::vector<int> in_, out_;
  unsigned blocks_ = 1;
};

KernelPtr make_lstm_cell(const Node& n) { return std::make_unique<LSTMCell>(n, false); }
KernelPtr make_lstm_cell_grad(const Node& n) { return std::make_unique<LSTMCell>(n, true); }

}  // namespace

PLANNER_REGISTER_KERNELS(lstm) {
  r["LSTMCell"] = make_lstm_cell;
  r["LSTMCellGrad"] = make_lstm_cell_grad;
}

}  // namespace planner
