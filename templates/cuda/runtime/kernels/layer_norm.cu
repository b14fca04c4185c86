// LayerNorm and LayerNormGrad on the GPU, following planner/ops/layer_norm.py: x is viewed as
// (rows, n), n the product of the axes from `axis` on; scale and bias are (n), mean and var
// (rows), the biased variance (what the backward reads).
//   LayerNorm     [x, scale, bias?] -> [y, mean, var]
//   LayerNormGrad [dy, x, scale, mean, var] -> [dx, dscale, dbias]
//
// Why it is built this way:
// - One warp per row for rows up to 1024 elements (a block per row would idle most threads on
//   transformer widths), one block per longer row; the row sums are fixed trees (groups.cuh),
//   so y, mean and var are the same bits every step.
// - The variance is the mean of centred squares, a second pass over the row (which the first
//   left in L1/L2), not E[x^2] - mean^2: float accumulation then loses nothing to cancellation.
// - dscale and dbias are sums over rows, a reduction across the row kernel's groups: they go
//   through per-chunk partials in the op's scratch area and a second, column-parallel pass in a
//   fixed order instead of atomics, so they are deterministic too.
#include <algorithm>
#include <cmath>

#include "../groups.cuh"

namespace planner {
namespace {

template <bool kWarp>
__global__ void ln_forward(const float* __restrict__ x, const float* __restrict__ scale,
                           const float* __restrict__ bias, int64_t rows, int64_t n, float eps,
                           float* __restrict__ y, float* __restrict__ mean_out,
                           float* __restrict__ var_out) {
  const RowGroup<kWarp> g;
  const float inv_n = 1.f / static_cast<float>(n);
  for (int64_t row = g.first(); row < rows; row += g.stride()) {
    const float* xr = x + row * n;
    float s = 0.f;
    for (int64_t c = g.lane(); c < n; c += g.size()) s += xr[c];
    const float mean = g.sum(s) * inv_n;
    float q = 0.f;
    for (int64_t c = g.lane(); c < n; c += g.size()) {
      const float d = xr[c] - mean;
      q += d * d;
    }
    const float var = g.sum(q) * inv_n;
    const float sd = sqrtf(var + eps);
    float* yr = y + row * n;
    for (int64_t c = g.lane(); c < n; c += g.size()) {
      const float v = (xr[c] - mean) / sd * scale[c];
      yr[c] = bias ? v + bias[c] : v;
    }
    if (g.lane() == 0) {
      mean_out[row] = mean;
      var_out[row] = var;
    }
  }
}

// dx = invstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale, per row.
template <bool kWarp>
__global__ void ln_backward_rows(const float* __restrict__ dy, const float* __restrict__ x,
                                 const float* __restrict__ scale, const float* __restrict__ mean,
                                 const float* __restrict__ var, int64_t rows, int64_t n, float eps,
                                 float* __restrict__ dx) {
  const RowGroup<kWarp> g;
  const float inv_n = 1.f / static_cast<float>(n);
  for (int64_t row = g.first(); row < rows; row += g.stride()) {
    const float* xr = x + row * n;
    const float* dyr = dy + row * n;
    const float mu = mean[row];
    const float invstd = 1.f / sqrtf(var[row] + eps);
    float sg = 0.f, sgx = 0.f;
    for (int64_t c = g.lane(); c < n; c += g.size()) {
      const float gc = dyr[c] * scale[c];
      sg += gc;
      sgx += gc * ((xr[c] - mu) * invstd);
    }
    const float a = g.sum(sg) * inv_n;
    const float b = g.sum(sgx) * inv_n;
    float* dxr = dx + row * n;
    for (int64_t c = g.lane(); c < n; c += g.size()) {
      const float xhat = (xr[c] - mu) * invstd;
      dxr[c] = invstd * (dyr[c] * scale[c] - a - xhat * b);
    }
  }
}

// Column sums over a chunk of rows: block (32, k) takes 32 columns and `chunk` rows starting at
// blockIdx.y * chunk; its threads in y split the rows, then add their sums in a fixed order.
// Writes ps[blockIdx.y * n + col] (sum of dy * xhat) and pb[...] (sum of dy).
__global__ void ln_backward_cols(const float* __restrict__ dy, const float* __restrict__ x,
                                 const float* __restrict__ mean, const float* __restrict__ var,
                                 int64_t rows, int64_t n, int64_t chunk, float eps,
                                 float* __restrict__ ps, float* __restrict__ pb) {
  __shared__ float ss[32][33], sb[32][33];
  const int64_t col = int64_t{blockIdx.x} * 32 + threadIdx.x;
  const int64_t lo = int64_t{blockIdx.y} * chunk;
  const int64_t hi = lo + chunk < rows ? lo + chunk : rows;
  float s = 0.f, b = 0.f;
  if (col < n) {
    for (int64_t row = lo + threadIdx.y; row < hi; row += blockDim.y) {
      const float invstd = 1.f / sqrtf(var[row] + eps);
      const float d = dy[row * n + col];
      s += d * ((x[row * n + col] - mean[row]) * invstd);
      b += d;
    }
  }
  ss[threadIdx.y][threadIdx.x] = s;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    for (unsigned k = 1; k < blockDim.y; ++k) {
      s += ss[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    ps[int64_t{blockIdx.y} * n + col] = s;
    pb[int64_t{blockIdx.y} * n + col] = b;
  }
}

// dscale[col] = sum over chunks of ps, dbias likewise, chunks in order.
__global__ void ln_backward_finish(const float* __restrict__ ps, const float* __restrict__ pb,
                                   int64_t chunks, int64_t n, float* __restrict__ dscale,
                                   float* __restrict__ dbias) {
  for (int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; col < n;
       col += int64_t{gridDim.x} * blockDim.x) {
    float s = 0.f, b = 0.f;
    for (int64_t k = 0; k < chunks; ++k) {
      s += ps[k * n + col];
      b += pb[k * n + col];
    }
    dscale[col] = s;
    dbias[col] = b;
  }
}

void require_all_f32(const Node& n) {
  for (const TensorRef& t : n.in)
    if (t.dtype != F32) throw std::runtime_error("LayerNorm kernels take float32 tensors");
  for (const TensorRef& t : n.out)
    if (t.dtype != F32) throw std::runtime_error("LayerNorm kernels write float32 tensors");
}

// rows x n view of x from the `axis` attr.
struct RowsView {
  int64_t rows = 1, n = 1;
  RowsView(const Node& node, const TensorRef& x) {
    if (x.shape.empty()) throw std::runtime_error("LayerNorm: x must have rank >= 1");
    const AxisSplit a = axis_split(node.attrs, x.shape);  // rows before the axis, columns from it
    rows = a.outer;
    n = a.extent * a.inner;
  }
};

class LayerNorm : public Kernel {
 public:
  explicit LayerNorm(const Node& n)
      : threads_(block_threads(n)), v_(n, n.in[0]), eps_(static_cast<float>(n.attrs.f("epsilon"))),
        x_(n.in[0].id), scale_(n.in[1].id), bias_(n.in.size() > 2 ? n.in[2].id : -1),
        y_(n.out[0].id), mean_(n.out[1].id), var_(n.out[2].id) {
    require_all_f32(n);
    warp_ = v_.n <= kWarpRowMax;
    blocks_ = row_blocks(v_.rows, warp_, threads_);
  }
  void run(const Run& r) override {
    if (v_.rows == 0) return;
    const float* bias = bias_ >= 0 ? r.at<float>(bias_) : nullptr;
    if (warp_)
      ln_forward<true><<<blocks_, threads_, 0, r.stream>>>(
          r.at<float>(x_), r.at<float>(scale_), bias, v_.rows, v_.n, eps_, r.at<float>(y_),
          r.at<float>(mean_), r.at<float>(var_));
    else
      ln_forward<false><<<blocks_, threads_, 0, r.stream>>>(
          r.at<float>(x_), r.at<float>(scale_), bias, v_.rows, v_.n, eps_, r.at<float>(y_),
          r.at<float>(mean_), r.at<float>(var_));
    PLANNER_LAUNCHED("LayerNorm");
  }

 private:
  int threads_;
  RowsView v_;
  float eps_;
  int x_, scale_, bias_, y_, mean_, var_;
  bool warp_ = true;
  unsigned blocks_ = 1;
};

class LayerNormGrad : public Kernel {
 public:
  explicit LayerNormGrad(const Node& n)
      : threads_(block_threads(n)), v_(n, n.in[1]), eps_(static_cast<float>(n.attrs.f("epsilon"))),
        dy_(n.in[0].id), x_(n.in[1].id), scale_(n.in[2].id), mean_(n.in[3].id),
        var_(n.in[4].id), dx_(n.out[0].id), dscale_(n.out[1].id), dbias_(n.out[2].id) {
    require_all_f32(n);
    warp_ = v_.n <= kWarpRowMax;
    blocks_ = row_blocks(v_.rows, warp_, threads_);
    // Column pass: about 1024 blocks of (32, threads / 32), each a chunk of rows.
    tiles_ = (v_.n + 31) / 32;
    int64_t want = std::max<int64_t>(1, (1024 + tiles_ - 1) / std::max<int64_t>(tiles_, 1));
    want = std::min<int64_t>(want, std::max<int64_t>(v_.rows, 1));
    chunk_ = (v_.rows + want - 1) / want;
    if (chunk_ < 1) chunk_ = 1;
    chunks_ = (v_.rows + chunk_ - 1) / chunk_;
    if (chunks_ < 1) chunks_ = 1;
  }
  // Partials of dscale and dbias, one row of n per chunk; none when one chunk writes them.
  size_t scratch_bytes() const override {
    return chunks_ > 1 ? 2 * sizeof(float) * static_cast<size_t>(chunks_ * v_.n) : 0;
  }
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    const float* x = r.at<float>(x_);
    const float* mean = r.at<float>(mean_);
    const float* var = r.at<float>(var_);
    float* dscale = r.at<float>(dscale_);
    float* dbias = r.at<float>(dbias_);
    if (v_.n == 0) return;
    if (v_.rows == 0) {  // sums over no rows
      PLANNER_CUDA(cudaMemsetAsync(dscale, 0, sizeof(float) * v_.n, r.stream));
      PLANNER_CUDA(cudaMemsetAsync(dbias, 0, sizeof(float) * v_.n, r.stream));
      return;
    }
    if (warp_)
      ln_backward_rows<true><<<blocks_, threads_, 0, r.stream>>>(
          dy, x, r.at<float>(scale_), mean, var, v_.rows, v_.n, eps_, r.at<float>(dx_));
    else
      ln_backward_rows<false><<<blocks_, threads_, 0, r.stream>>>(
          dy, x, r.at<float>(scale_), mean, var, v_.rows, v_.n, eps_, r.at<float>(dx_));
    PLANNER_LAUNCHED("LayerNormGrad dx");
    float* ps = chunks_ > 1 ? reinterpret_cast<float*>(r.scratch) : dscale;
    float* pb = chunks_ > 1 ? ps + chunks_ * v_.n : dbias;
    const dim3 grid(static_cast<unsigned>(tiles_), static_cast<unsigned>(chunks_));
    const dim3 block(32, static_cast<unsigned>(threads_ / 32));
    ln_backward_cols<<<grid, block, 0, r.stream>>>(dy, x, mean, var, v_.rows, v_.n, chunk_, eps_,
                                                   ps, pb);
    PLANNER_LAUNCHED("LayerNormGrad dscale/dbias partials");
    if (chunks_ > 1) {
      ln_backward_finish<<<blocks_for(v_.n, threads_), threads_, 0, r.stream>>>(
          ps, pb, chunks_, v_.n, dscale, dbias);
      PLANNER_LAUNCHED("LayerNormGrad dscale/dbias");
    }
  }

 private:
  int threads_;
  RowsView v_;
  float eps_;
  int dy_, x_, scale_, mean_, var_, dx_, dscale_, dbias_;
  bool warp_ = true;
  unsigned blocks_ = 1;
  int64_t tiles_ = 1, chunk_ = 1, chunks_ = 1;
};

KernelPtr layer_norm(const Node& n) { return std::make_unique<LayerNorm>(n); }
KernelPtr layer_norm_grad(const Node& n) { return std::make_unique<LayerNormGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(layer_norm) {
  r["LayerNorm"] = layer_norm;
  r["LayerNormGrad"] = layer_norm_grad;
}

}  // namespace planner
