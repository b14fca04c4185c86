// MatMul in float64 (a physics-informed MLP, a float64 model through either torch door):
// oneDNN 3.2's CPU matmul has no f64, so the product is BLAS's dgemm from the scipy-openblas32
// wheel that lapack.cpp's routines come from (../lapack.h). Each call is held to one thread
// (openblas_set_num_threads(1), as lapack.cpp): the rows of each product of the batch are cut
// into a number of pieces fixed by the product's size (at most 16, each of at least kPiece
// multiply-adds), never by the thread count, one dgemm per piece, and the op's team shares the
// pieces out: the plan's thread count is what runs, and every thread count gives the same bits
// (docs/executor.md, "Busy machines"). The operands are read where they lie, as oneDNN's matmul reads them:
// transpose_a / transpose_b and perm_a / perm_b / perm_y (folded Transposes) are strides, each
// matrix with a unit-stride axis (the op's rule, planner/ops/matmul.py), batch axes broadcast
// as in numpy.matmul. A row-major matrix is BLAS's column-major transpose, so the product is
// computed as Y^T = op(B)^T op(A)^T. A folded bias or activation is float32's alone
// (planner/frontend/passes/fold_bias.py folds float32 products only).
#include <omp.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../lapack.h"
#include "../loops.h"
#include "matmul_f64.h"

namespace planner {
namespace {

// A tensor seen as a stack of matrices of y's rank: dims and element strides per axis (the
// last two the matrix's; a batch axis of size 1 has stride 0, so it broadcasts).
struct MatrixView {
  std::vector<int64_t> dims, strides;
  int64_t rows() const { return dims[dims.size() - 2]; }
  int64_t cols() const { return dims.back(); }
  int64_t row_stride() const { return strides[strides.size() - 2]; }
  int64_t col_stride() const { return strides.back(); }
};

std::vector<int64_t> matrix_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int k = static_cast<int>(shape.size()) - 2; k >= 0; --k) s[k] = s[k + 1] * shape[k + 1];
  return s;
}

// op(t) of MatMul: the tensor's row-major elements read through `perm` (view axis k is the
// tensor's axis perm[k]), leading 1s up to `rank`, the last two axes swapped when transposed.
MatrixView operand_view(const Shape& shape, const std::vector<int>& perm, int rank,
                        bool transposed) {
  const int lead = rank - static_cast<int>(shape.size());
  const std::vector<int64_t> own = matrix_strides(shape);
  MatrixView v{std::vector<int64_t>(rank, 1), std::vector<int64_t>(rank, 0)};
  for (size_t k = 0; k < shape.size(); ++k) {
    v.dims[lead + k] = shape[perm[k]];
    v.strides[lead + k] = own[perm[k]];
  }
  if (transposed) {
    std::swap(v.dims[rank - 1], v.dims[rank - 2]);
    std::swap(v.strides[rank - 1], v.strides[rank - 2]);
  }
  for (int k = 0; k + 2 < rank; ++k)
    if (v.dims[k] == 1) v.strides[k] = 0;
  return v;
}

// The product Y whose elements y = transpose(Y, perm) holds: Y's axis perm[k] is y's axis k.
MatrixView result_view(const Shape& shape, const std::vector<int>& perm) {
  const std::vector<int64_t> own = matrix_strides(shape);
  MatrixView v{std::vector<int64_t>(shape.size()), std::vector<int64_t>(shape.size())};
  for (size_t k = 0; k < shape.size(); ++k) {
    v.dims[perm[k]] = shape[k];
    v.strides[perm[k]] = own[k];
  }
  return v;
}

// How BLAS reads X^T, for a matrix X of the view: unit-stride columns make the bytes X^T
// column-major (no transpose, ld the row stride); unit-stride rows make them X itself
// (transposed, ld the column stride). A single row or column is either.
struct BlasOperand {
  char trans;
  int ld;
};

int blas_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw std::runtime_error(std::string("MatMul in float64: ") + what +
                             " beyond BLAS's 32-bit integers");
  return static_cast<int>(v);
}

BlasOperand blas_operand(const MatrixView& v, const char* name) {
  const int64_t r = v.rows(), c = v.cols(), rs = v.row_stride(), cs = v.col_stride();
  if ((c == 1 || cs == 1) && (r == 1 || rs >= c))
    return {'N', blas_int(r == 1 ? std::max<int64_t>(c, 1) : rs, "a leading dimension")};
  if ((r == 1 || rs == 1) && (c == 1 || cs >= r))
    return {'T', blas_int(c == 1 ? std::max<int64_t>(r, 1) : cs, "a leading dimension")};
  throw std::runtime_error(std::string("MatMul in float64: operand ") + name +
                           " has no unit-stride axis");
}

class MatMulF64 : public Kernel {
 public:
  explicit MatMulF64(const Node& n) : a_(n.in[0].id), b_(n.in[1].id), y_(n.out[0].id) {
    for (const auto* side : {&n.in, &n.out})
      for (const TensorRef& t : *side)
        if (t.dtype != F64) throw std::runtime_error("MatMul: float64 operands and result");
    if (n.in.size() != 2 || (n.attrs.has("activation") && n.attrs.s("activation") != "none"))
      throw std::runtime_error("MatMul in float64: no folded bias or activation");
    const int rank = static_cast<int>(n.out[0].shape.size());
    const MatrixView y = result_view(n.out[0].shape, permutation(n.attrs, "perm_y", rank));
    const MatrixView a = operand_view(n.in[0].shape,
                                      permutation(n.attrs, "perm_a", n.in[0].shape.size()), rank,
                                      n.attrs.b("transpose_a"));
    const MatrixView b = operand_view(n.in[1].shape,
                                      permutation(n.attrs, "perm_b", n.in[1].shape.size()), rank,
                                      n.attrs.b("transpose_b"));
    if (y.col_stride() != 1 && y.cols() != 1)
      throw std::runtime_error("MatMul in float64: the product's rows must be contiguous");
    rows_ = blas_int(y.rows(), "rows");
    cols_ = blas_int(y.cols(), "columns");
    depth_ = blas_int(a.cols(), "the inner dimension");
    a_form_ = blas_operand(a, "a");
    b_form_ = blas_operand(b, "b");
    ldy_ = blas_int(y.rows() == 1 ? std::max<int64_t>(y.cols(), 1) : y.row_stride(), "ldc");
    a_row_ = a.row_stride();
    y_row_ = y.row_stride();
    batch_offsets(a, b, y);
    threads_ = std::max(1, n.threads);
    constexpr int64_t kPiece = 1 << 16, kMaxPieces = 16;
    const int64_t work = static_cast<int64_t>(rows_) * cols_ * std::max(depth_, 1);
    parts_ = std::max<int64_t>(1, std::min({kMaxPieces, static_cast<int64_t>(rows_),
                                            work / kPiece}));
    PLANNER_LAPACK_JOIN(PLANNER_LAPACK_PREFIX, openblas_set_num_threads)(1);
  }
  std::string impl() const override { return "blas:dgemm"; }
  void run(const Run& r) override {
    const double* a = r.at<double>(a_);
    const double* b = r.at<double>(b_);
    double* y = r.at<double>(y_);
    const int64_t batch = static_cast<int64_t>(y_off_.size());
    if (rows_ == 0 || cols_ == 0 || batch == 0) return;
    const int64_t parts = parts_;
    const int64_t work = batch * rows_ * cols_ * std::max(depth_, 1);
    const int team = work < kGrain ? 1 : static_cast<int>(
        std::min<int64_t>(batch * parts, std::max(1, std::min(r.threads, threads_))));
#pragma omp parallel for schedule(static) num_threads(team) if(team > 1)
    for (int64_t task = 0; task < batch * parts; ++task) {
      const int64_t m = task / parts, part = task % parts;
      const int64_t first = rows_ * part / parts, last = rows_ * (part + 1) / parts;
      gemm(a + a_off_[m] + first * a_row_, b + b_off_[m], y + y_off_[m] + first * y_row_,
           static_cast<int>(last - first));
    }
  }

 private:
  // Y^T (cols x rows) = op(B)^T (cols x depth) op(A)^T (depth x rows), column-major.
  void gemm(const double* a, const double* b, double* y, int rows) const {
    const double one = 1.0, zero = 0.0;
    if (rows == 0) return;
    PLANNER_LAPACK(dgemm)(&b_form_.trans, &a_form_.trans, &cols_, &rows, &depth_, &one, b,
                          &b_form_.ld, a, &a_form_.ld, &zero, y, &ldy_, 1, 1);
  }

  // Each matrix of y's batch and the element offsets of its a, b and y.
  void batch_offsets(const MatrixView& a, const MatrixView& b, const MatrixView& y) {
    const size_t axes = y.dims.size() - 2;
    int64_t count = 1;
    for (size_t k = 0; k < axes; ++k) count *= y.dims[k];
    for (int64_t m = 0; m < count; ++m) {
      int64_t rest = m, oa = 0, ob = 0, oy = 0;
      for (int k = static_cast<int>(axes) - 1; k >= 0; --k) {
        const int64_t i = rest % y.dims[k];
        rest /= y.dims[k];
        oa += i * a.strides[k];
        ob += i * b.strides[k];
        oy += i * y.strides[k];
      }
      a_off_.push_back(oa);
      b_off_.push_back(ob);
      y_off_.push_back(oy);
    }
  }

  int a_, b_, y_;
  int rows_ = 0, cols_ = 0, depth_ = 0, ldy_ = 1, threads_ = 1;
  BlasOperand a_form_{'N', 1}, b_form_{'N', 1};
  int64_t a_row_ = 0, y_row_ = 0, parts_ = 1;
  std::vector<int64_t> a_off_, b_off_, y_off_;
};

}  // namespace

KernelPtr matmul_f64(const Node& n) { return std::make_unique<MatMulF64>(n); }

}  // namespace planner
