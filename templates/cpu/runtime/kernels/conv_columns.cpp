// The columns kernels of conv_columns.h.
#include "conv_columns.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include <omp.h>

#include "../fused_relu.h"

namespace planner {

void Columns::copy(const float* image, float* columns) const {
  const int64_t batch = x[0], channels = x[1], h = x[2], w_ = x[3];
  const int64_t oh = y[2], ow = y[3], kh = w[2], kw = w[3];
  const int64_t n_positions = positions();
  const ConvGeometry geo = g;
#pragma omp for schedule(static)
  for (int64_t row = 0; row < channels * kh * kw; ++row) {
    const int64_t c = row / (kh * kw), i = row / kw % kh, j = row % kw;
    const int64_t row_tap = i * geo.dilations[0] - geo.pads[0];
    const int64_t col_tap = j * geo.dilations[1] - geo.pads[1];
    const int64_t y0 = std::min(oh, first_inside(row_tap, geo.strides[0]));
    const int64_t y1 = std::max(y0, end_inside(row_tap, geo.strides[0], h, oh));
    const int64_t x0 = std::min(ow, first_inside(col_tap, geo.strides[1]));
    const int64_t x1 = std::max(x0, end_inside(col_tap, geo.strides[1], w_, ow));
    float* out = columns + row * n_positions;
    std::fill(out, out + n_positions, 0.0f);
    const int64_t step = xs.step(), across = geo.strides[1] * step;
    for (int64_t b = 0; b < batch; ++b) {
      const float* plane = image + xs.at(b, c);
      for (int64_t oy = y0; oy < y1; ++oy) {
        const float* in_row = plane + ((oy * geo.strides[0] + row_tap) * w_ + col_tap) * step;
        float* out_row = out + (b * oh + oy) * ow;
        for (int64_t ox = x0; ox < x1; ++ox) out_row[ox] = in_row[ox * across];
      }
    }
  }
}

void Columns::add_plane(const float* image_columns, int64_t tap_step, int64_t position_step,
                        int64_t b, int64_t c, float* dx) const {
  // Locals, not members, in the loops: GCC then keeps the geometry in registers.
  const int64_t h = x[2], wd = x[3], oh = y[2], ow = y[3], kh = w[2], kw = w[3];
  const ConvGeometry geo = g;
  const int64_t step = xs.step(), across = geo.strides[1] * step;
  float* plane = dx + xs.at(b, c);
  for (int64_t q = 0; q < h * wd; ++q) plane[q * step] = 0.0f;
  for (int64_t i = 0; i < kh; ++i) {
    const int64_t row_tap = i * geo.dilations[0] - geo.pads[0];
    const int64_t y0 = std::min(oh, first_inside(row_tap, geo.strides[0]));
    const int64_t y1 = std::max(y0, end_inside(row_tap, geo.strides[0], h, oh));
    for (int64_t j = 0; j < kw; ++j) {
      const int64_t col_tap = j * geo.dilations[1] - geo.pads[1];
      const int64_t x0 = std::min(ow, first_inside(col_tap, geo.strides[1]));
      const int64_t x1 = std::max(x0, end_inside(col_tap, geo.strides[1], wd, ow));
      const float* tap = image_columns + ((c * kh + i) * kw + j) * tap_step;
      for (int64_t oy = y0; oy < y1; ++oy) {
        float* in_row = plane + ((oy * geo.strides[0] + row_tap) * wd + col_tap) * step;
        const float* at = tap + oy * ow * position_step;
        if (position_step == 1) {  // an image's own columns: a row read in order
          for (int64_t ox = x0; ox < x1; ++ox) in_row[ox * across] += at[ox];
        } else {
          for (int64_t ox = x0; ox < x1; ++ox) in_row[ox * across] += at[ox * position_step];
        }
      }
    }
  }
}

bool float32_only(const Node& n) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype != F32) return false;
  return true;
}

bool columns_apply(const Node& n) {
  return float32_only(n) && conv_geometry(n.attrs).groups == 1;
}

namespace {

void throw_if_failed(int status) {
  if (status != dnnl_success)
    throw std::runtime_error("oneDNN sgemm failed with status " + std::to_string(status));
}

// What the columns kernels share: their geometry and scratch (Columns::bytes).
class ColumnsKernel : public Kernel {
 public:
  explicit ColumnsKernel(Columns geometry) : geometry_(std::move(geometry)) {}
  size_t scratch_bytes() const override { return geometry_.bytes(); }
  std::string impl() const override { return "direct:columns + sgemm"; }

 protected:
  Columns geometry_;
};

// oneDNN's direct kernels run a convolution image by image, a few output pixels per register
// block: on ResNet's last stage (2x2 maps) each image streams the whole weight tensor for four
// positions (a 256x256x3x3 forward at batch 8 took ~1 ms on two threads of the 2-core EPYC).
// Here the batch's columns are copied once and the weights read once, by one GEMM whose
// rows (output channels) are split into fixed blocks of kRows: each block is one
// single-threaded sgemm (oneDNN runs sequentially inside the team's parallel region) on one
// thread, so every thread count computes the same bits, as oneDNN's forward kernels do (a
// schedule variant may run a Conv2D on another count). Each block then writes its rows of y
// (plus the bias) while they are in cache.
class ColumnsConv2D : public ColumnsKernel {
 public:
  static constexpr int64_t kRows = 64;

  explicit ColumnsConv2D(const Node& n)
      : ColumnsKernel({n.in[0].shape, n.out[0].shape, n.in[1].shape, conv_geometry(n.attrs),
                       {n.in[0].shape, n.in[0].block}, {n.out[0].shape, n.out[0].block}}),
        x_(n.in[0].id), w_(n.in[1].id), bias_(n.in.size() == 3 ? n.in[2].id : -1),
        y_(n.out[0].id) {}

  void run(const Run& r) override {
    float* columns = reinterpret_cast<float*>(r.scratch);
    float* products = reinterpret_cast<float*>(r.scratch + geometry_.columns_bytes());
    const float *x = r.at<float>(x_), *w = r.at<float>(w_);
    const float* bias = bias_ >= 0 ? r.at<float>(bias_) : nullptr;
    float* y = r.at<float>(y_);
    std::atomic<int> failed{dnnl_success};
    // One parallel region, its phases split by the loops' barriers: on the 2-core VM each
    // region's start woke the team's sleeping thread (25-55 us), as much as a small op's work.
#pragma omp parallel
    {
      geometry_.copy(x, columns);
      multiply(w, columns, bias, products, y, &failed);
    }
    throw_if_failed(failed);
  }

 private:
  // (In the team's parallel region.) Each block of kRows output channels: its rows of the
  // product, then of y (plus the bias) while they are in cache.
  void multiply(const float* w, const float* columns, const float* bias, float* products,
                float* y, std::atomic<int>* failed) const {
    const int64_t outs = geometry_.w[0], taps = geometry_.taps(), p = geometry_.positions();
    const int64_t batch = geometry_.y[0], area = geometry_.y[2] * geometry_.y[3];
    const Planes ys = geometry_.ys;
    const int64_t step = ys.step();
#pragma omp for schedule(static)
    for (int64_t k = 0; k < (outs + kRows - 1) / kRows; ++k) {
      const int64_t first = k * kRows, rows = std::min(kRows, outs - first);
      const dnnl_status_t st = dnnl_sgemm('N', 'N', rows, p, taps, 1.0f, w + first * taps,
                                          taps, columns, p, 0.0f, products + first * p, p);
      if (st != dnnl_success) *failed = st;
      for (int64_t o = first; o < first + rows; ++o) {
        const float add = bias ? bias[o] : 0.0f;
        const float* from = products + o * p;
        for (int64_t b = 0; b < batch; ++b) {
          float* to = y + ys.at(b, o);
          for (int64_t q = 0; q < area; ++q) to[q * step] = from[b * area + q] + add;
        }
      }
    }
  }

  int x_, w_, bias_, y_;
};

// The data gradient the same way: dx's columns (positions x taps) = dy' (positions x O) w,
// one GEMM whose columns (taps) are split into fixed blocks of kTaps, each a single-threaded
// sgemm (the same bits on every thread count, as for the forward), then each input channel's
// taps summed into dx in one fixed order (col2im, the team splitting channels). The whole
// batch's dy is read once against the weights, where oneDNN's data gradient streams the
// weights again for every image (on 2x2 maps, ResNet-18's 256x256x3x3 one took 0.62-0.68 ms
// on two threads of the 2-core EPYC against its forward's 0.42 on the columns).
class ColumnsConv2DBackpropInput : public ColumnsKernel {
 public:
  static constexpr int64_t kTaps = 256;

  explicit ColumnsConv2DBackpropInput(const Node& n)
      : ColumnsKernel({n.out[0].shape, n.in[0].shape, n.in[1].shape, conv_geometry(n.attrs),
                       {n.out[0].shape, n.out[0].block}, {n.in[0].shape, n.in[0].block}}),
        dy_(n.in[0].id), w_(n.in[1].id), dx_(n.out[0].id) {}

  void run(const Run& r) override {
    float* columns = reinterpret_cast<float*>(r.scratch);
    float* regrouped = reinterpret_cast<float*>(r.scratch + geometry_.columns_bytes());
    const float *dy = r.at<float>(dy_), *w = r.at<float>(w_);
    float* dx = r.at<float>(dx_);
    std::atomic<int> failed{dnnl_success};
#pragma omp parallel  // one region, as the forward's
    {
      regroup(dy, regrouped);
      multiply(regrouped, w, columns, &failed);
      add_columns(columns, dx);
    }
    throw_if_failed(failed);
  }

 private:
  // (In the team's parallel region, as the two below.) regrouped[(b, q)][o] = dy[b, o, q].
  void regroup(const float* dy, float* regrouped) const {
    const int64_t outs = geometry_.w[0], area = geometry_.y[2] * geometry_.y[3];
    const Planes ys = geometry_.ys;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < geometry_.positions(); ++row) {
      const int64_t b = row / area, q = row % area;
      for (int64_t o = 0; o < outs; ++o)
        regrouped[row * outs + o] = dy[ys.at(b, o) + q * ys.step()];
    }
  }

  // columns = regrouped w, kTaps columns at a time.
  void multiply(const float* regrouped, const float* w, float* columns,
                std::atomic<int>* failed) const {
    const int64_t outs = geometry_.w[0], taps = geometry_.taps(), p = geometry_.positions();
#pragma omp for schedule(static)
    for (int64_t k = 0; k < (taps + kTaps - 1) / kTaps; ++k) {
      const int64_t first = k * kTaps, cols = std::min(kTaps, taps - first);
      const dnnl_status_t st = dnnl_sgemm('N', 'N', p, cols, outs, 1.0f, regrouped, outs,
                                          w + first, taps, 0.0f, columns + first, taps);
      if (st != dnnl_success) *failed = st;
    }
  }

  // dx = col2im of the batch's columns (positions x taps), the team splitting channels.
  void add_columns(const float* columns, float* dx) const {
    const int64_t batch = geometry_.x[0], taps = geometry_.taps();
    const int64_t area = geometry_.y[2] * geometry_.y[3];
#pragma omp for schedule(static)
    for (int64_t c = 0; c < geometry_.x[1]; ++c)
      for (int64_t b = 0; b < batch; ++b)
        geometry_.add_plane(columns + b * area * taps, 1, taps, b, c, dx);
  }

  int dy_, w_, dx_;
};

// The weight gradient: dw (O x taps) = dy' (O x positions) columns^T, the batch's columns and
// dy regrouped by channel copied once, dw's rows split into fixed blocks of kRows, each a
// single-threaded sgemm reading the columns as its transposed operand (the layout oneDNN's f32
// GEMM runs fastest), so every thread count computes the same bits. ResNet-18's 256x256x3x3
// layer on 2x2 maps at batch 8 took 1.2-1.8 ms a call on oneDNN 3.2's GEMM fallback (one
// 4-deep GEMM per image, the 2.4 MB gradient read and written per image), a stride-2 one onto
// 2x2 maps 1.1 ms on its direct kernel; 0.4-0.9 ms here.
class ColumnsConv2DBackpropFilter : public ColumnsKernel {
 public:
  static constexpr int64_t kRows = 64;

  explicit ColumnsConv2DBackpropFilter(const Node& n)
      : ColumnsKernel({n.in[0].shape, n.in[1].shape, n.out[0].shape, conv_geometry(n.attrs),
                       {n.in[0].shape, n.in[0].block}, {n.in[1].shape, n.in[1].block}}),
        x_(n.in[0].id), dy_(n.in[1].id), dw_(n.out[0].id) {}

  void run(const Run& r) override {
    float* columns = reinterpret_cast<float*>(r.scratch);
    float* regrouped = reinterpret_cast<float*>(r.scratch + geometry_.columns_bytes());
    const float *x = r.at<float>(x_), *dy = r.at<float>(dy_);
    float* dw = r.at<float>(dw_);
    std::atomic<int> failed{dnnl_success};
#pragma omp parallel  // one region, as the forward's
    {
      geometry_.copy(x, columns);
      regroup(dy, regrouped);
      multiply(regrouped, columns, dw, &failed);
    }
    throw_if_failed(failed);
  }

 private:
  // (In the team's parallel region, as the one below.) regrouped[o][(b, q)] = dy[b, o, q].
  void regroup(const float* dy, float* regrouped) const {
    const int64_t batch = geometry_.y[0], outs = geometry_.y[1];
    const int64_t area = geometry_.y[2] * geometry_.y[3];
    const Planes ys = geometry_.ys;
#pragma omp for schedule(static)
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t q = 0; q < area; ++q)
          regrouped[(o * batch + b) * area + q] = dy[ys.at(b, o) + q * ys.step()];
  }

  void multiply(const float* regrouped, const float* columns, float* dw,
                std::atomic<int>* failed) const {
    const int64_t outs = geometry_.w[0], taps = geometry_.taps(), p = geometry_.positions();
#pragma omp for schedule(static)
    for (int64_t k = 0; k < (outs + kRows - 1) / kRows; ++k) {
      const int64_t first = k * kRows, rows = std::min(kRows, outs - first);
      const dnnl_status_t st = dnnl_sgemm('N', 'T', rows, taps, p, 1.0f, regrouped + first * p,
                                          p, columns, p, 0.0f, dw + first * taps, taps);
      if (st != dnnl_success) *failed = st;
    }
  }

  int x_, dy_, dw_;
};

// A data gradient (or a transposed convolution, the same sum) image by image: each image's
// columns (taps x area) = w' (taps x O) dy_b (O x area), one single-threaded sgemm, summed back
// into dx_b (col2im) while they are in cache. Where dx has a few channels (a network's first
// layer seen from its gradient, a generator's last transposed convolution onto RGB), oneDNN's
// blocked kernels pad them to a whole block of 16 and run at a fifth of their pace (DCGAN's
// 3-channel ones at 45 GFLOP/s on the 2-core Xeon against ~280 for its other convolutions),
// and the whole batch's columns (above) would not stay in cache; here an image's columns are
// its taps x its output map (196 KB for DCGAN's), in each thread's own share of the scratch.
// One image is one thread's, start to end, whichever thread: every thread count computes the
// same bits. A dy the step keeps channel-blocked is regrouped to (O x area) first.
class ImageColumnsDataGradient : public Kernel {
 public:
  explicit ImageColumnsDataGradient(const Node& n)
      : geometry_({n.out[0].shape, n.in[0].shape, n.in[1].shape, conv_geometry(n.attrs),
                   {n.out[0].shape, n.out[0].block}, {n.in[0].shape, n.in[0].block}}),
        threads_(std::max(1, n.threads)), dy_(n.in[0].id), w_(n.in[1].id), dx_(n.out[0].id) {}

  size_t scratch_bytes() const override { return threads_ * per_thread(); }
  std::string impl() const override { return "direct:image columns + sgemm"; }

  void run(const Run& r) override {
    const float *dy = r.at<float>(dy_), *w = r.at<float>(w_);
    float* dx = r.at<float>(dx_);
    std::atomic<int> failed{dnnl_success};
#pragma omp parallel num_threads(std::max(1, std::min(r.threads, threads_)))
    {
      char* mine = r.scratch + static_cast<size_t>(omp_get_thread_num()) * per_thread();
      float* columns = reinterpret_cast<float*>(mine);
      float* regrouped = reinterpret_cast<float*>(mine + columns_bytes());
#pragma omp for schedule(static)
      for (int64_t b = 0; b < geometry_.y[0]; ++b) {
        const float* dy_b = geometry_.ys.block ? regroup(dy, b, regrouped)
                                               : dy + geometry_.ys.at(b, 0);
        const int64_t outs = geometry_.w[0], taps = geometry_.taps(), area = map();
        const dnnl_status_t st = dnnl_sgemm('T', 'N', taps, area, outs, 1.0f, w, taps, dy_b,
                                            area, 0.0f, columns, area);
        if (st != dnnl_success) failed = st;
        add_columns(columns, dx, b);
      }
    }
    throw_if_failed(failed);
  }

 private:
  int64_t map() const { return geometry_.y[2] * geometry_.y[3]; }
  size_t columns_bytes() const { return Columns::align64(geometry_.taps() * map() * 4); }
  size_t per_thread() const {
    return columns_bytes() + Columns::align64(geometry_.w[0] * map() * 4);
  }

  // regrouped[o][q] = dy[b, o, q]: image b of a channel-blocked dy as a plain matrix.
  const float* regroup(const float* dy, int64_t b, float* regrouped) const {
    const int64_t outs = geometry_.w[0], area = map();
    const Planes ys = geometry_.ys;
    for (int64_t o = 0; o < outs; ++o) {
      const float* plane = dy + ys.at(b, o);
      for (int64_t q = 0; q < area; ++q) regrouped[o * area + q] = plane[q * ys.step()];
    }
    return regrouped;
  }

  // dx[b] = col2im of image b's columns (taps x area).
  void add_columns(const float* columns, float* dx, int64_t b) const {
    for (int64_t c = 0; c < geometry_.x[1]; ++c)
      geometry_.add_plane(columns, map(), 1, b, c, dx);
  }

  Columns geometry_;
  int threads_;
  int dy_, w_, dx_;
};

}  // namespace

KernelPtr columns_conv2d(const Node& n) {
  return with_fused_activation(std::make_unique<ColumnsConv2D>(n), n, "Conv2D");
}

KernelPtr columns_conv2d_backprop_input(const Node& n) {
  return std::make_unique<ColumnsConv2DBackpropInput>(n);
}

KernelPtr image_columns_data_gradient(const Node& n) {
  return std::make_unique<ImageColumnsDataGradient>(n);
}

KernelPtr columns_conv2d_backprop_filter(const Node& n, size_t budget) {
  if (!columns_apply(n)) return nullptr;
  auto k = std::make_unique<ColumnsConv2DBackpropFilter>(n);
  if (k->scratch_bytes() > budget) return nullptr;
  return k;
}

}  // namespace planner
