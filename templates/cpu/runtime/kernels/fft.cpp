// FFT (planner/ops/fft.py): the complex-to-complex DFT of a complex tensor's planes ([..., 2],
// each element a std::complex<float> or <double> in memory) along the node's axes, by pocketfft's
// c2c (third_party/pocketfft, BSD-3: the header NumPy, SciPy and PyTorch build their CPU FFTs
// on), one axis after the other, the scale applied in the first pass.
// Along one axis of length n the tensor is (outer, n, inner) complex elements: outer * inner
// lines. They are cut into pieces of consecutive lines, as many as the line count and length
// give (at most kFftMaxPieces, each of at least kFftPieceWork points), never by the thread count, and
// the op's team shares the pieces out: pocketfft groups a piece's lines into SIMD vectors and
// does the rest one by one, so the same pieces give the same bits at every thread count.
// pocketfft itself runs single-threaded (POCKETFFT_NO_MULTITHREADING: no pool of its own beside
// OpenMP's) and allocates its plan (twiddles) and line buffers per call, O(n) each: the op
// has no planned scratch.
#include <omp.h>

#include <algorithm>
#include <complex>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#define POCKETFFT_NO_MULTITHREADING
#include "pocketfft_hdronly.h"

#include "../loops.h"

namespace planner {
namespace {

// A block of lines along the transformed axis: outer indices [o0, o1) by inner [i0, i1).
struct FftBlock {
  int64_t o0, o1, i0, i1;
};

// The lines [first, last) of an (outer, inner) grid, inner fastest, as at most three blocks:
// a partial row, whole rows, a partial row.
void fft_blocks(int64_t first, int64_t last, int64_t inner, std::vector<FftBlock>& out) {
  while (first < last) {
    const int64_t o = first / inner, i = first % inner;
    if (i == 0 && last - first >= inner) {
      const int64_t rows = (last - first) / inner;
      out.push_back({o, o + rows, 0, inner});
      first += rows * inner;
    } else {
      const int64_t end = std::min(inner, i + (last - first));
      out.push_back({o, o + 1, i, end});
      first += end - i;
    }
  }
}

// One axis's pass: its (outer, n, inner) view and the blocks of each piece.
struct FftPass {
  int64_t outer, n, inner;
  std::vector<std::vector<FftBlock>> pieces;
};

constexpr int64_t kFftMaxPieces = 64, kFftPieceWork = 1 << 14;

FftPass fft_pass(const Shape& complex_shape, int axis) {
  FftPass p{1, complex_shape[axis], 1, {}};
  for (int k = 0; k < static_cast<int>(complex_shape.size()); ++k) {
    if (k < axis) p.outer *= complex_shape[k];
    if (k > axis) p.inner *= complex_shape[k];
  }
  const int64_t lines = p.outer * p.inner;
  if (lines == 0) return p;
  const int64_t by_work = std::max<int64_t>(1, lines * p.n / kFftPieceWork);
  const int64_t count = std::min({kFftMaxPieces, lines, by_work});
  for (int64_t k = 0; k < count; ++k) {
    p.pieces.emplace_back();
    fft_blocks(lines * k / count, lines * (k + 1) / count, p.inner, p.pieces.back());
  }
  return p;
}

template <class T>
class Fft : public Kernel {
 public:
  explicit Fft(const Node& n) : x_(n.in[0].id), y_(n.out[0].id), threads_(std::max(1, n.threads)) {
    const Shape& shape = n.in[0].shape;
    if (shape.size() < 2 || shape.back() != 2)
      throw std::runtime_error("FFT: x must be of shape [..., 2], got " + shape_text(shape));
    const Shape planes(shape.begin(), shape.end() - 1);
    for (int64_t a : n.attrs.ints("axes")) {
      const int axis = norm_axis(a, planes.size());
      if (planes[axis] == 0) throw std::runtime_error("FFT: a transformed axis of length 0");
      passes_.push_back(fft_pass(planes, axis));
    }
    inverse_ = n.attrs.b("inverse");
    scale_ = static_cast<T>(n.attrs.f("scale"));
    points_ = numel(planes);
  }
  std::string impl() const override { return "pocketfft:c2c"; }
  void run(const Run& r) override {
    const auto* x = reinterpret_cast<const std::complex<T>*>(r.at<T>(x_));
    auto* y = reinterpret_cast<std::complex<T>*>(r.at<T>(y_));
    for (size_t k = 0; k < passes_.size(); ++k)
      pass(passes_[k], k == 0 ? x : y, y, k == 0 ? scale_ : T(1), r.threads);
  }

 private:
  void pass(const FftPass& p, const std::complex<T>* in, std::complex<T>* out, T fct,
            int granted) const {
    const int64_t pieces = static_cast<int64_t>(p.pieces.size());
    const int team = points_ < kGrain ? 1 : static_cast<int>(
        std::min<int64_t>(pieces, std::max(1, std::min(granted, threads_))));
    const bool forward = !inverse_;
#pragma omp parallel for schedule(static) num_threads(team) if(team > 1)
    for (int64_t k = 0; k < pieces; ++k)
      for (const FftBlock& b : p.pieces[k]) block(p, b, in, out, fct, forward);
  }

  static void block(const FftPass& p, const FftBlock& b, const std::complex<T>* in,
                    std::complex<T>* out, T fct, bool forward) {
    constexpr ptrdiff_t e = sizeof(std::complex<T>);
    const pocketfft::shape_t shape{static_cast<size_t>(b.o1 - b.o0), static_cast<size_t>(p.n),
                                   static_cast<size_t>(b.i1 - b.i0)};
    const pocketfft::stride_t strides{p.n * p.inner * e, p.inner * e, e};
    const int64_t at = b.o0 * p.n * p.inner + b.i0;
    pocketfft::c2c(shape, strides, strides, {1}, forward, in + at, out + at, fct);
  }

  int x_, y_, threads_;
  std::vector<FftPass> passes_;
  bool inverse_ = false;
  T scale_ = 1;
  int64_t points_ = 0;
};

KernelPtr fft(const Node& n) {
  if (n.in[0].dtype == F64) return std::make_unique<Fft<double>>(n);
  return std::make_unique<Fft<float>>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(fft) { r["FFT"] = {fft, "float32|float64"}; }

}  // namespace planner
