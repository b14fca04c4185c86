// MatMul with cuBLAS: y = op(a) @ op(b) over the last two axes, batch axes broadcast as
// numpy.matmul (planner/ops/matmul.py).
//
// Why this shape: cuBLAS is column-major, and a row-major matrix is its transpose seen
// column-major, so y^T = op(b)^T op(a)^T is one GEMM on the tensors' own bytes with b first
// (no copies, transposes are cuBLAS op flags). Broadcast batch axes become stride-0 operands of
// cublasGemmStridedBatchedEx; the batch axes are merged at load into as few strided batches as
// their strides allow (one for every numpy-style case but an interleaved broadcast such as
// (B1, 1) x (1, B2), which takes one call per outer index). A rank-2 b under a batched,
// untransposed a is a single GEMM over the flattened rows. CUBLAS_COMPUTE_32F: float32
// arithmetic, no TF32 (the executor leaves the handle in CUBLAS_DEFAULT_MATH); under a tf32
// plan on an sm_80+ device (Node::tf32) float32 GEMMs name CUBLAS_COMPUTE_32F_FAST_TF32:
// operands rounded to TF32 on tensor cores, float32 accumulation and alpha / beta. Mixed
// precision's bfloat16 / float16 GEMMs (a, b and y all in the low type: CUDA_R_16BF /
// CUDA_R_16F) keep CUBLAS_COMPUTE_32F: tensor cores with float32 accumulation and float32
// alpha / beta, y rounded once.
// An optional third input, a (N,) bias (a BiasAdd over the last axis folded in by
// planner/graph/fold_bias.py), is added by one pass over y after the GEMMs, on the same stream
// (a low-type y is widened, the bias added in float32 and rounded once, as BiasAdd's kernel).
#include <algorithm>
#include <string>
#include <vector>

#include "../cudnn_kernel.h"
#include "../low_float.cuh"

namespace planner {
namespace {

// y[i] += bias[i % n] over all `total` elements of a row-major (..., n) y.
template <class T>
__global__ void add_row_bias(T* y, const T* bias, int64_t total, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = narrow<T>(widen(y[i]) + widen(bias[i % n]));
}

class MatMul : public Kernel {
 public:
  explicit MatMul(const Node& n)
      : a_(n.in[0].id), b_(n.in[1].id), bias_(n.in.size() == 3 ? n.in[2].id : -1),
        y_(n.out[0].id) {
    std::vector<TensorRef> all = n.in;
    all.insert(all.end(), n.out.begin(), n.out.end());
    const int dtype = one_float_type(all, "MatMul");
    type_ = cuda_type(dtype);
    dtype_ = dtype;
    if (dtype == F32 && n.tf32) compute_ = CUBLAS_COMPUTE_32F_FAST_TF32;
    esize_ = dtype_bytes(dtype);
    const Shape &as = n.in[0].shape, &bs = n.in[1].shape, &ys = n.out[0].shape;
    if (as.size() < 2 || bs.size() < 2 || ys.size() < 2)
      throw std::runtime_error("MatMul needs a and b of rank >= 2, got " + shape_text(as) +
                               " and " + shape_text(bs));
    ta_ = n.attrs.b("transpose_a");
    tb_ = n.attrs.b("transpose_b");
    const int64_t ar = as[as.size() - 2], ac = as.back(), br = bs[bs.size() - 2], bc = bs.back();
    const int64_t m = ta_ ? ac : ar, k = ta_ ? ar : ac, k2 = tb_ ? bc : br, nn = tb_ ? br : bc;
    const size_t nb = ys.size() - 2;
    if (k != k2 || ys[nb] != m || ys[nb + 1] != nn || as.size() - 2 > nb || bs.size() - 2 > nb)
      throw std::runtime_error("MatMul shapes do not match: a " + shape_text(as) + ", b " +
                               shape_text(bs) + ", y " + shape_text(ys));
    m_ = to_int(m, "M");
    n_ = to_int(nn, "N");
    k_ = to_int(k, "K");
    lda_ = to_int(ac, "lda");
    ldb_ = to_int(bc, "ldb");
    y_bytes_ = numel(ys) * esize_;
    if (bias_ >= 0 && (n.in[2].shape.size() != 1 || n.in[2].shape[0] != nn))
      throw std::runtime_error("MatMul bias must have shape [" + std::to_string(nn) + "], got " +
                               shape_text(n.in[2].shape));

    // Per batch axis: its size and each operand's element stride (0 where it broadcasts).
    struct Axis {
      int64_t size, sa, sb, sy;
    };
    int64_t sa = ar * ac, sb = br * bc, sy = m * nn;
    std::vector<Axis> rev;  // the batch axes of y longer than 1, innermost first
    for (size_t back = 1; back <= nb; ++back) {
      const int64_t size = ys[nb - back];
      const int64_t da = back + 2 <= as.size() ? as[as.size() - 2 - back] : 1;
      const int64_t db = back + 2 <= bs.size() ? bs[bs.size() - 2 - back] : 1;
      if ((da != size && da != 1) || (db != size && db != 1))
        throw std::runtime_error("MatMul batch axes of a " + shape_text(as) + " and b " +
                                 shape_text(bs) + " do not broadcast to y " + shape_text(ys));
      if (size != 1) rev.push_back(Axis{size, da == 1 ? 0 : sa, db == 1 ? 0 : sb, sy});
      sa *= da;
      sb *= db;
      sy *= size;
    }
    // rev is innermost first: merge while each operand's stride continues the inner ones.
    batch_ = 1;
    size_t merged = 0;
    if (!rev.empty()) {
      stride_a_ = rev[0].sa;
      stride_b_ = rev[0].sb;
      stride_y_ = rev[0].sy;
      batch_ = rev[0].size;
      merged = 1;
      while (merged < rev.size() && rev[merged].sa == stride_a_ * batch_ &&
             rev[merged].sb == stride_b_ * batch_ && rev[merged].sy == stride_y_ * batch_) {
        batch_ *= rev[merged].size;
        ++merged;
      }
    }
    // The outer axes, enumerated: one strided batch per offset triple.
    offsets_.push_back({0, 0, 0});
    for (size_t i = merged; i < rev.size(); ++i) {
      std::vector<Offsets> next;
      for (int64_t j = 0; j < rev[i].size; ++j)
        for (const Offsets& o : offsets_)
          next.push_back({o.a + j * rev[i].sa, o.b + j * rev[i].sb, o.y + j * rev[i].sy});
      offsets_.swap(next);
    }
    // b shared by every batch, a untransposed and packed: one GEMM over batch * M rows.
    if (offsets_.size() == 1 && batch_ > 1 && stride_b_ == 0 && !ta_ &&
        stride_a_ == int64_t{m_} * k_ && stride_y_ == int64_t{m_} * n_) {
      m_ = to_int(batch_ * m_, "batch * M");
      batch_ = 1;
    }
    to_int(batch_, "batch");
  }

  void run(const Run& r) override {
    if (m_ == 0 || n_ == 0 || batch_ == 0) return;
    char* y = r.ptr[y_];
    const char* a = r.ptr[a_];
    const char* b = r.ptr[b_];
    const float one = 1.f, zero = 0.f;  // float scalars with CUBLAS_COMPUTE_32F
    if (k_ == 0) PLANNER_CUDA(cudaMemsetAsync(y, 0, y_bytes_, r.stream));  // empty sums
    for (const Offsets& o : offsets_) {
      if (k_ == 0) break;
      // Column-major: y^T (N x M) = op(b)^T (N x K) * op(a)^T (K x M).
      PLANNER_CUBLAS(cublasGemmStridedBatchedEx(
          r.cublas, tb_ ? CUBLAS_OP_T : CUBLAS_OP_N, ta_ ? CUBLAS_OP_T : CUBLAS_OP_N, n_, m_,
          k_, &one, b + o.b * esize_, type_, ldb_, stride_b_, a + o.a * esize_, type_, lda_,
          stride_a_, &zero, y + o.y * esize_, type_, n_, stride_y_, static_cast<int>(batch_),
          compute_, CUBLAS_GEMM_DEFAULT));
    }
    if (bias_ >= 0) {
      const int64_t total = y_bytes_ / esize_;
      const int threads = 256;
      const int blocks = static_cast<int>(std::min<int64_t>((total + threads - 1) / threads, 65535));
      with_float(dtype_, [&](auto tag) {
        using T = decltype(tag);
        add_row_bias<T><<<blocks, threads, 0, r.stream>>>(
            reinterpret_cast<T*>(y), reinterpret_cast<const T*>(r.ptr[bias_]), total, n_);
      });
      PLANNER_CUDA(cudaGetLastError());
    }
  }

 private:
  struct Offsets {
    int64_t a, b, y;  // elements
  };
  int a_, b_, bias_, y_;
  int dtype_ = F32;
  cudaDataType_t type_ = CUDA_R_32F;
  cublasComputeType_t compute_ = CUBLAS_COMPUTE_32F;
  int64_t esize_ = 4;
  bool ta_ = false, tb_ = false;
  int m_ = 0, n_ = 0, k_ = 0, lda_ = 1, ldb_ = 1;
  int64_t batch_ = 1, stride_a_ = 0, stride_b_ = 0, stride_y_ = 0, y_bytes_ = 0;
  std::vector<Offsets> offsets_;
};

KernelPtr matmul(const Node& n) { return std::make_unique<MatMul>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(matmul) { r["MatMul"] = matmul; }

}  // namespace planner
