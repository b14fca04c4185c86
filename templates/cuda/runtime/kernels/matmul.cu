// MatMul with cuBLAS: y = op(a) @ op(b) over the last two axes, batch axes broadcast as
// numpy.matmul (planner/ops/matmul.py).
//
// Why this shape: cuBLAS is column-major, and a row-major matrix is its transpose seen
// column-major, so y^T = op(b)^T op(a)^T is one GEMM on the tensors' own bytes with b first
// (no copies, transposes are cuBLAS op flags). Every operand is a strided view: its row-major
// strides read through perm_a / perm_b (folded Transposes, attention's head splits) and the
// transpose flag, the result written through perm_y (the head merge). The op's rule keeps a
// unit-stride axis in each matrix (y's rows contiguous), so each is a cuBLAS matrix with a
// leading dimension, OP_N where its columns are contiguous and OP_T where its rows are.
// Broadcast batch axes become stride-0 operands of cublasGemmStridedBatchedEx; the batch axes
// are merged at load into as few strided batches as their strides allow (one for every
// numpy-style case and for attention's permuted heads, whose (batch, heads) strides do not
// merge: one call per outer batch index). A rank-2 b under a batched a whose rows are packed is
// a single GEMM over the flattened rows. CUBLAS_COMPUTE_32F: float32
// arithmetic, no TF32 (the executor leaves the handle in CUBLAS_DEFAULT_MATH); under a tf32
// plan on an sm_80+ device (Node::tf32) float32 GEMMs name CUBLAS_COMPUTE_32F_FAST_TF32:
// operands rounded to TF32 on tensor cores, float32 accumulation and alpha / beta. Mixed
// precision's bfloat16 / float16 GEMMs (a, b and y all in the low type: CUDA_R_16BF /
// CUDA_R_16F) keep CUBLAS_COMPUTE_32F: tensor cores with float32 accumulation and float32
// alpha / beta, y rounded once.
// cuBLAS's workspace is the op's planned scratch (the target's cublas_workspace_bytes, planned
// in the arena like a convolution's cuDNN workspace, so GEMMs on co-running streams never
// share one), set on the stream's handle before each call, as the handle is shared by the
// stream's MatMuls; a plan without one runs cuBLAS's workspace-free paths.
// An optional third input, a (N,) bias (a BiasAdd over the last axis folded in by
// planner/frontend/passes/fold_bias.py), and a folded Relu (`activation: relu`, float32's alone) are one
// pass over y after the GEMMs, on the same stream (bias_activation.cuh, the Conv2D's pass: a
// low-type y is widened, the bias added in float32 and rounded once, as BiasAdd's kernel; the
// Relu keeps NaN, as the Relu kernel does).
#include <algorithm>
#include <string>
#include <vector>

#include "../bias_activation.cuh"
#include "../cudnn_kernel.h"
#include "../low_float.cuh"
#include "fused_activation.h"

namespace planner {
namespace {

// A tensor seen at rank `rank`: sizes and element strides per axis (leading size-1 axes where
// broadcasting adds them).
struct View {
  std::vector<int64_t> dims, strides;
};

// op(x): x's row-major strides read through `perm` (view axis k is x's axis perm[k]), the last
// two axes swapped when `transposed`.
View operand_view(const Shape& shape, const std::vector<int>& perm, size_t rank,
                  bool transposed) {
  std::vector<int64_t> own(shape.size(), 1);
  for (size_t k = shape.size() - 1; k-- > 0;) own[k] = own[k + 1] * shape[k + 1];
  View v{std::vector<int64_t>(rank, 1), std::vector<int64_t>(rank, 0)};
  const size_t lead = rank - shape.size();
  for (size_t k = 0; k < shape.size(); ++k) {
    v.dims[lead + k] = shape[perm[k]];
    v.strides[lead + k] = own[perm[k]];
  }
  if (transposed) {
    std::swap(v.dims[rank - 1], v.dims[rank - 2]);
    std::swap(v.strides[rank - 1], v.strides[rank - 2]);
  }
  return v;
}

// The product Y whose bytes are y = transpose(Y, perm), y of shape `shape`.
View result_view(const Shape& shape, const std::vector<int>& perm) {
  View v{std::vector<int64_t>(shape.size()), std::vector<int64_t>(shape.size())};
  int64_t stride = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    v.dims[perm[k]] = shape[k];
    v.strides[perm[k]] = stride;
    stride *= shape[k];
  }
  return v;
}

// The last two axes of `v` (a rows x cols matrix, element (i, j) at i * sr + j * sc) as the
// column-major operand of y^T = op(b)^T op(a)^T, which is the matrix's transpose: the bytes
// themselves (OP_N) when its columns are contiguous, else transposed by cuBLAS (OP_T) when its
// rows are; a size-1 axis takes either stride.
struct Operand {
  cublasOperation_t op;
  int ld;
};
Operand cublas_operand(const View& v, const char* what) {
  const size_t r = v.dims.size();
  const int64_t rows = v.dims[r - 2], cols = v.dims[r - 1];
  const int64_t sr = v.strides[r - 2], sc = v.strides[r - 1];
  if (sc == 1 || cols == 1) return {CUBLAS_OP_N, to_int(std::max(sr, cols), what)};
  if (sr == 1 || rows == 1) return {CUBLAS_OP_T, to_int(std::max(sc, rows), what)};
  throw std::runtime_error(std::string("MatMul: ") + what + "'s matrix has no unit-stride axis");
}

class MatMul : public Kernel {
 public:
  explicit MatMul(const Node& n)
      : a_(n.in[0].id), b_(n.in[1].id), bias_(n.in.size() == 3 ? n.in[2].id : -1),
        y_(n.out[0].id), relu_(relu_activation(n.attrs, "MatMul") == kActRelu),
        workspace_(static_cast<size_t>(std::max<int64_t>(n.planned_scratch, 0))) {
    std::vector<TensorRef> all = n.in;
    all.insert(all.end(), n.out.begin(), n.out.end());
    const int dtype = one_float_type(all, "MatMul");
    if (relu_ && dtype != F32)
      throw std::runtime_error("MatMul: a folded activation needs float32 y");
    type_ = cuda_type(dtype);
    dtype_ = dtype;
    if (dtype == F32 && n.tf32) compute_ = CUBLAS_COMPUTE_32F_FAST_TF32;
    esize_ = dtype_bytes(dtype);
    const Shape &as = n.in[0].shape, &bs = n.in[1].shape, &ys = n.out[0].shape;
    if (as.size() < 2 || bs.size() < 2 || ys.size() < 2)
      throw std::runtime_error("MatMul needs a and b of rank >= 2, got " + shape_text(as) +
                               " and " + shape_text(bs));
    const size_t rank = ys.size(), nb = rank - 2;
    if (as.size() > rank || bs.size() > rank)
      throw std::runtime_error("MatMul shapes do not match: a " + shape_text(as) + ", b " +
                               shape_text(bs) + ", y " + shape_text(ys));
    const View a = operand_view(as, permutation(n.attrs, "perm_a", as.size()), rank,
                                n.attrs.b("transpose_a"));
    const View b = operand_view(bs, permutation(n.attrs, "perm_b", bs.size()), rank,
                                n.attrs.b("transpose_b"));
    const View y = result_view(ys, permutation(n.attrs, "perm_y", rank));
    const int64_t m = a.dims[nb], k = a.dims[nb + 1], nn = b.dims[nb + 1];
    if (b.dims[nb] != k || y.dims[nb] != m || y.dims[nb + 1] != nn)
      throw std::runtime_error("MatMul shapes do not match: a " + shape_text(as) + ", b " +
                               shape_text(bs) + ", y " + shape_text(ys));
    if (y.strides[nb + 1] != 1 && nn != 1)
      throw std::runtime_error("MatMul: perm_y must keep the product's rows contiguous");
    m_ = to_int(m, "M");
    n_ = to_int(nn, "N");
    k_ = to_int(k, "K");
    const Operand oa = cublas_operand(a, "a"), ob = cublas_operand(b, "b");
    op_a_ = oa.op;
    op_b_ = ob.op;
    lda_ = oa.ld;
    ldb_ = ob.ld;
    ldy_ = to_int(std::max(y.strides[nb], nn), "ldy");
    y_bytes_ = numel(ys) * esize_;
    if (bias_ >= 0 && (n.in[2].shape.size() != 1 || n.in[2].shape[0] != nn))
      throw std::runtime_error("MatMul bias must have shape [" + std::to_string(nn) + "], got " +
                               shape_text(n.in[2].shape));

    // Per batch axis: its size and each operand's element stride (0 where it broadcasts).
    struct Axis {
      int64_t size, sa, sb, sy;
    };
    std::vector<Axis> rev;  // the batch axes of y longer than 1, innermost first
    for (size_t back = 1; back <= nb; ++back) {
      const size_t ax = nb - back;
      const int64_t size = y.dims[ax], da = a.dims[ax], db = b.dims[ax];
      if ((da != size && da != 1) || (db != size && db != 1))
        throw std::runtime_error("MatMul batch axes of a " + shape_text(as) + " and b " +
                                 shape_text(bs) + " do not broadcast to y " + shape_text(ys));
      if (size != 1)
        rev.push_back(Axis{size, da == 1 ? 0 : a.strides[ax], db == 1 ? 0 : b.strides[ax],
                           y.strides[ax]});
    }
    // Merge while each operand's stride continues the merged ones (innermost first: the
    // plain layouts merge; permuted heads, whose strides interleave, do not).
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
    // b shared by every batch, a's and y's rows packed one batch after another: one GEMM over
    // batch * M rows.
    if (offsets_.size() == 1 && batch_ > 1 && stride_b_ == 0 && op_a_ == CUBLAS_OP_N &&
        lda_ == k_ && stride_a_ == int64_t{m_} * k_ && ldy_ == n_ &&
        stride_y_ == int64_t{m_} * n_) {
      m_ = to_int(batch_ * m_, "batch * M");
      batch_ = 1;
    }
    to_int(batch_, "batch");
  }

  // The workspace the plan gives: asking no more, the executor never allocates outside it.
  size_t scratch_bytes() const override { return workspace_; }

  void run(const Run& r) override {
    if (m_ == 0 || n_ == 0 || batch_ == 0) return;
    PLANNER_CUBLAS(cublasSetWorkspace(r.cublas, workspace_ ? r.scratch : nullptr, workspace_));
    char* y = r.ptr[y_];
    const char* a = r.ptr[a_];
    const char* b = r.ptr[b_];
    const float one = 1.f, zero = 0.f;  // float scalars with CUBLAS_COMPUTE_32F
    if (k_ == 0) PLANNER_CUDA(cudaMemsetAsync(y, 0, y_bytes_, r.stream));  // empty sums
    for (const Offsets& o : offsets_) {
      if (k_ == 0) break;
      // Column-major: y^T (N x M) = op(b)^T (N x K) * op(a)^T (K x M).
      PLANNER_CUBLAS(cublasGemmStridedBatchedEx(
          r.cublas, op_b_, op_a_, n_, m_, k_, &one, b + o.b * esize_, type_, ldb_, stride_b_,
          a + o.a * esize_, type_, lda_, stride_a_, &zero, y + o.y * esize_, type_, ldy_,
          stride_y_, static_cast<int>(batch_), compute_, CUBLAS_GEMM_DEFAULT));
    }
    if (bias_ >= 0 || relu_)  // along y's last axis, which perm_y keeps last
      launch_bias_activation(dtype_, y, bias_ >= 0 ? r.ptr[bias_] : nullptr, y_bytes_ / esize_,
                             1, n_, relu_, r.stream);
  }

 private:
  struct Offsets {
    int64_t a, b, y;  // elements
  };
  int a_, b_, bias_, y_;
  bool relu_;  // the folded activation
  size_t workspace_;
  int dtype_ = F32;
  cudaDataType_t type_ = CUDA_R_32F;
  cublasComputeType_t compute_ = CUBLAS_COMPUTE_32F;
  int64_t esize_ = 4;
  cublasOperation_t op_a_ = CUBLAS_OP_N, op_b_ = CUBLAS_OP_N;
  int m_ = 0, n_ = 0, k_ = 0, lda_ = 1, ldb_ = 1, ldy_ = 1;
  int64_t batch_ = 1, stride_a_ = 0, stride_b_ = 0, stride_y_ = 0, y_bytes_ = 0;
  std::vector<Offsets> offsets_;
};

KernelPtr matmul(const Node& n) { return std::make_unique<MatMul>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(matmul) { r["MatMul"] = matmul; }

}  // namespace planner
