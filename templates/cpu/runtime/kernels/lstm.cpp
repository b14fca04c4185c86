// LSTMCell and LSTMCellGrad (planner/ops/lstm.py): one LSTM step's element-wise part in one
// pass over the rows, each row's H hidden units an `omp simd` loop reading the four gate
// blocks where `order` puts them. Sigmoid and tanh are vmath.h's vectorizable float forms.
//   LSTMCell     [gates, c_prev, recurrent?] -> [h, c, acts]
//   LSTMCellGrad [dh, dc, acts, c_prev, c, dh2?] -> [dgates, dc_prev]   (dh2 summed into dh)
#include <stdexcept>
#include <string>

#include "../kernel.h"
#include "lstm.h"
#include "../loops.h"
#include "../vmath.h"

namespace planner {
namespace {

using Blocks = LstmGates;  // common/lstm.h

class LSTMCell : public Kernel {
 public:
  explicit LSTMCell(const Node& n)
      : z_(n.in[0].id), cp_(n.in[1].id), zr_(n.in.size() > 2 ? n.in[2].id : -1),
        h_(n.out[0].id), c_(n.out[1].id), acts_(n.out[2].id), rows_(n.out[0].shape[0]),
        hidden_(n.out[0].shape[1]), at_(lstm_gates(n.attrs, hidden_)) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float* z = r.at<float>(z_);
    const float* zr = zr_ >= 0 ? r.at<float>(zr_) : nullptr;
    const float* cp = r.at<float>(cp_);
    float *h = r.at<float>(h_), *c = r.at<float>(c_), *acts = r.at<float>(acts_);
    const int64_t hidden = hidden_, width = 4 * hidden_;
    const Blocks at = at_;
#pragma omp parallel for
    for (int64_t n = 0; n < rows_; ++n) {
      const float* zn = z + n * width;
      const float* rn = zr ? zr + n * width : nullptr;
      float* an = acts + n * width;
      const float* cpn = cp + n * hidden;
      float *cn = c + n * hidden, *hn = h + n * hidden;
      if (rn) {
#pragma omp simd
        for (int64_t j = 0; j < hidden; ++j)
          step(zn[at.i + j] + rn[at.i + j], zn[at.f + j] + rn[at.f + j],
               zn[at.g + j] + rn[at.g + j], zn[at.o + j] + rn[at.o + j], cpn[j], at, j, an,
               cn, hn);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < hidden; ++j)
          step(zn[at.i + j], zn[at.f + j], zn[at.g + j], zn[at.o + j], cpn[j], at, j, an, cn,
               hn);
      }
    }
  }

 private:
  static inline void step(float zi, float zf, float zg, float zo, float cp, const Blocks& at,
                          int64_t j, float* an, float* cn, float* hn) {
    const float i = sigmoid_f(zi), f = sigmoid_f(zf), g = tanh_f(zg), o = sigmoid_f(zo);
    const float c = f * cp + i * g;
    an[at.i + j] = i;
    an[at.f + j] = f;
    an[at.g + j] = g;
    an[at.o + j] = o;
    cn[j] = c;
    hn[j] = o * tanh_f(c);
  }
  int z_, cp_, zr_, h_, c_, acts_;
  int64_t rows_, hidden_;
  Blocks at_;
};

class LSTMCellGrad : public Kernel {
 public:
  explicit LSTMCellGrad(const Node& n)
      : dh_(n.in[0].id), dc_(n.in[1].id), acts_(n.in[2].id), cp_(n.in[3].id), c_(n.in[4].id),
        dh2_(n.in.size() > 5 ? n.in[5].id : -1), dz_(n.out[0].id), dcp_(n.out[1].id), rows_(n.out[1].shape[0]),
        hidden_(n.out[1].shape[1]), at_(lstm_gates(n.attrs, hidden_)) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float *dh = r.at<float>(dh_), *dc = r.at<float>(dc_), *acts = r.at<float>(acts_);
    const float *cp = r.at<float>(cp_), *c = r.at<float>(c_);
    const float* dh2 = dh2_ >= 0 ? r.at<float>(dh2_) : nullptr;
    float *dz = r.at<float>(dz_), *dcp = r.at<float>(dcp_);
    const int64_t hidden = hidden_, width = 4 * hidden_;
    const Blocks at = at_;
#pragma omp parallel for
    for (int64_t n = 0; n < rows_; ++n) {
      const float* an = acts + n * width;
      float* dzn = dz + n * width;
      const int64_t s = n * hidden;
      if (dh2) {
#pragma omp simd
        for (int64_t j = 0; j < hidden; ++j)
          step(dh[s + j] + dh2[s + j], dc[s + j], cp[s + j], c[s + j], an, at, j, dzn,
               dcp + s);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < hidden; ++j)
          step(dh[s + j], dc[s + j], cp[s + j], c[s + j], an, at, j, dzn, dcp + s);
      }
    }
  }

 private:
  static inline void step(float dh, float dc, float cp, float c, const float* an,
                          const Blocks& at, int64_t j, float* dzn, float* dcpn) {
    const float i = an[at.i + j], f = an[at.f + j], g = an[at.g + j], o = an[at.o + j];
    const float tc = tanh_f(c);
    const float dct = dc + dh * o * (1.f - tc * tc);
    dzn[at.i + j] = dct * g * i * (1.f - i);
    dzn[at.f + j] = dct * cp * f * (1.f - f);
    dzn[at.g + j] = dct * i * (1.f - g * g);
    dzn[at.o + j] = dh * tc * o * (1.f - o);
    dcpn[j] = dct * f;
  }
  int dh_, dc_, acts_, cp_, c_, dh2_, dz_, dcp_;
  int64_t rows_, hidden_;
  Blocks at_;
};

KernelPtr lstm_cell(const Node& n) { return std::make_unique<LSTMCell>(n); }
KernelPtr lstm_cell_grad(const Node& n) { return std::make_unique<LSTMCellGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(lstm) {
  r["LSTMCell"] = lstm_cell;
  r["LSTMCellGrad"] = lstm_cell_grad;
}

}  // namespace planner
