// MatrixInverse, MatrixSolve, MatrixSlogdet, Cholesky, MatrixEigh, MatrixLuFactor, MatrixSvd,
// MatrixQr, MatrixGeqrf, MatrixLdlFactor and MatrixLdlSolve (planner/ops/linalg.py) through
// LAPACK in float32 (../lapack.h): the matrices of the batch split between threads, each
// copied into its thread's part of the scratch and factored there by one LAPACK call (QR:
// two). MatrixEig (below) by dgeev in float64. MatrixExp by a Padé approximant of
// float64 GEMMs and one LU solve. (And LuPermutation, which reads LAPACK's pivots.)
//
// The tensors are row-major, LAPACK column-major: the LU ops copy A transposed, so that LAPACK
// factors A itself, as torch does (the same pivots, the same info for a singular matrix);
// Cholesky and eigh copy it as it is, A^T to LAPACK, whose upper triangle is A's lower one
// (what torch reads): U^T U = A^T, and U read row-major is L.
//
// A factorization that fails (a zero pivot of LU, a leading minor that is not positive
// definite, an eigensolver that does not converge) writes LAPACK's info to the `info` output
// where the op has one; with attr `check` (torch's name of the op that raises) the step then
// fails with torch's message (a StepError, after the parallel loop: an exception may not leave
// an OpenMP region). Without either, the results hold what the factorization gives: inf or
// NaN from a zero pivot, NaN from Cholesky's failing column on, NaN for an eigensolver failure.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../lapack.h"
#include "../loops.h"

namespace planner {
namespace {

enum class LapackOp {
  kInverse, kSolve, kSlogdet, kCholesky, kEigh, kLuFactor, kSvd, kQr, kGeqrf, kExp, kLdlFactor,
  kLdlSolve
};

// sgesdd's workspace for the thin SVD (JOBZ 'S') of a rows x n matrix: its largest minimum
// (4 k^2 + 7 k, from a tall matrix's path; 3 k + max(rows, 3 k^2 + 4 k) from the other) and
// room for blocked bidiagonalization.
int64_t svd_lwork(int64_t rows, int64_t n) {
  const int64_t k = std::min(rows, n);
  return 4 * k * k + 7 * k + std::max(rows, n) + 32 * (rows + n);
}

// geqrf's and orgqr's workspace: n columns times a block of 64 (OpenBLAS asks for 32).
int64_t qr_lwork(int64_t n) { return 64 * std::max<int64_t>(n, 1); }

// Floats of one matrix's workspace (an int32 pivot or iwork entry counts as one): the matrix,
// then a solve's right-hand sides, the pivots and what the routine asks for. ops/linalg.py's
// `_lapack_scratch` is the same count. n: the matrix's columns; k: a solve's right-hand sides,
// an LU's rows.
int64_t lapack_floats(LapackOp op, int64_t n, int64_t k) {
  switch (op) {
    case LapackOp::kSolve: return n * n + n * k + n;
    case LapackOp::kInverse: return n * n + 2 * n;
    case LapackOp::kSlogdet: return n * n + n;
    case LapackOp::kLuFactor: return k * n + std::min(k, n);
    case LapackOp::kCholesky: return n * n;
    case LapackOp::kEigh: return 3 * n * n + 12 * n + 4;  // ssyevd: lwork, liwork for jobz V
    // A, work and sgesdd's 8 min(rows, n) iwork (U, S, Vh go straight to the outputs)
    case LapackOp::kSvd: return k * n + svd_lwork(k, n) + 8 * std::min(k, n);
    case LapackOp::kQr:
    case LapackOp::kGeqrf: return k * n + n + qr_lwork(n);  // A, tau, work
    // in float64 (2 floats each): A, its powers A^2..A^8, U, V and a product; the pivots
    case LapackOp::kExp: return 2 * 8 * n * n + 2 * n;
    case LapackOp::kLdlFactor: return n * n + n + qr_lwork(n);  // A, ipiv, ssytrf's work
    case LapackOp::kLdlSolve: return n * n + n * k + n;         // LD, B, ipiv
  }
  return 0;
}

// torch's message for a failed factorization (aten's _linalg_check_errors), chosen as torch
// chooses it, by the name of the op that raises.
std::string torch_linalg_error(const std::string& api, int64_t batch_element, int info) {
  const std::string where =
      api + (batch_element >= 0 ? ": (Batch element " + std::to_string(batch_element) + ")" : "");
  const std::string k = std::to_string(info);
  if (api.find("inv") != std::string::npos)
    return where + ": The diagonal element " + k +
           " is zero, the inversion could not be completed because the input matrix is singular.";
  if (api.find("solve") != std::string::npos)
    return where + ": The solver failed because the input matrix is singular.";
  if (api.find("cholesky") != std::string::npos)
    return where + ": The factorization could not be completed because the input is not "
                   "positive-definite (the leading minor of order " + k +
           " is not positive-definite).";
  if (api.find("ldl_factor") != std::string::npos)  // (torch names no batch element here)
    return api + ": Unknown error code: " + k + ".";
  if (api.find("lu_factor") != std::string::npos)
    return where + ": U[" + k + "," + k + "] is zero and using it on lu_solve would result in "
                   "a division by zero. If you still want to perform the factorization, "
                   "consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)";
  return where + ": the factorization failed (LAPACK info " + k + ")";
}

class LapackMatrices : public Kernel {
 public:
  explicit LapackMatrices(const Node& n, LapackOp op) : op_(op), threads_(n.threads) {
    for (const auto& t : n.in)
      if (t.dtype != (op == LapackOp::kLdlSolve && &t == &n.in[1] ? I32 : F32))
        throw std::runtime_error(n.spec->op + std::string(": float32 tensors, int32 pivots"));
    const Shape& a = n.in[0].shape;
    size_ = a.back();
    for (size_t d = 0; d + 2 < a.size(); ++d) batch_ *= a[d];
    batched_ = a.size() > 2;
    const bool rectangular = op == LapackOp::kLuFactor || op == LapackOp::kSvd ||
                             op == LapackOp::kQr || op == LapackOp::kGeqrf;
    columns_ = op == LapackOp::kSolve ? n.in[1].shape.back()
               : op == LapackOp::kLdlSolve ? n.in[2].shape.back()
               : rectangular ? a[a.size() - 2] : size_;  // LU, SVD, QR: A's rows
    transpose_ = op == LapackOp::kSolve && n.attrs.b("transpose");
    upper_ = op == LapackOp::kEigh && n.attrs.has("upper") && n.attrs.b("upper");
    if (n.attrs.has("check")) check_ = n.attrs.s("check");
    a_ = n.in[0].id;
    b_ = op == LapackOp::kSolve ? n.in[1].id : op == LapackOp::kLdlSolve ? n.in[2].id : -1;
    y_ = n.out[0].id;
    // the second output: log|det|, eigenvectors, singular values, R, tau
    const bool two = op == LapackOp::kSlogdet || op == LapackOp::kEigh ||
                     op == LapackOp::kSvd || op == LapackOp::kQr || op == LapackOp::kGeqrf;
    y2_ = two ? n.out[1].id : -1;
    y3_ = op == LapackOp::kSvd ? n.out[2].id : -1;  // Vh
    pivots_ = op == LapackOp::kLuFactor || op == LapackOp::kLdlFactor ? n.out[1].id
              : op == LapackOp::kLdlSolve ? n.in[1].id : -1;  // (LDL solve: read)
    const size_t info_at = op == LapackOp::kLuFactor || op == LapackOp::kLdlFactor ? 2 : 1;
    info_ = y2_ < 0 && n.out.size() > info_at ? n.out[info_at].id : -1;
    if (size_ > std::numeric_limits<int>::max() / std::max<int64_t>(size_, 1) / 4)
      throw std::runtime_error("matrices of " + std::to_string(size_) +
                               " rows are too large for LAPACK's 32-bit sizes");
    failed_.assign(static_cast<size_t>(batch_), 0);
    static const bool one_thread_each = [] {
      PLANNER_LAPACK_JOIN(PLANNER_LAPACK_PREFIX, openblas_set_num_threads)(1);
      return true;
    }();
    (void)one_thread_each;
  }
  size_t scratch_bytes() const override {
    return sizeof(float) * static_cast<size_t>(threads_ * lapack_floats(op_, size_, columns_));
  }
  void run(const Run& r) override {
    const float* a = r.at<float>(a_);
    const float* b = b_ >= 0 ? r.at<float>(b_) : nullptr;
    float* y = r.at<float>(y_);
    float* y2 = y2_ >= 0 ? r.at<float>(y2_) : nullptr;
    float* y3 = y3_ >= 0 ? r.at<float>(y3_) : nullptr;
    int32_t* pivots = pivots_ >= 0 ? r.at<int32_t>(pivots_) : nullptr;
    float* work = reinterpret_cast<float*>(r.scratch);
    const int64_t per = lapack_floats(op_, size_, columns_), batch = batch_, n = size_;
    const int threads = std::max(1, std::min(r.threads, threads_));  // the scratch's parts
    int* failed = failed_.data();
#pragma omp parallel for num_threads(threads) if(batch > 1 && batch * n * n * n >= kGrain)
    for (int64_t m = 0; m < batch; ++m)
      failed[m] = one(m, a, b, {y, y2, y3}, pivots, work + omp_get_thread_num() * per);
    if (info_ >= 0) std::copy(failed_.begin(), failed_.end(), r.at<int32_t>(info_));
    if (check_.empty()) return;
    for (int64_t m = 0; m < batch; ++m)
      if (failed[m] > 0) throw StepError(torch_linalg_error(check_, batched_ ? m : -1, failed[m]));
  }

 private:
  struct Outputs {
    float *y, *y2, *y3;
  };

  // Matrix m: its outputs written, LAPACK's info returned.
  int one(int64_t m, const float* a, const float* b, Outputs out, int32_t* pivots,
          float* w) const {
    const int n = static_cast<int>(size_);
    float *y = out.y, *y2 = out.y2;
    switch (op_) {
      case LapackOp::kLuFactor: return lu_factor(m, a, y, pivots, w);
      case LapackOp::kSvd: return svd(m, a, out, w);
      case LapackOp::kQr:
      case LapackOp::kGeqrf: return qr(m, a, y, y2, w);
      case LapackOp::kExp: return expm(m, a, y, reinterpret_cast<double*>(w));
      case LapackOp::kLdlFactor: return ldl_factor(m, a, y, pivots, w);
      case LapackOp::kLdlSolve: return ldl_solve(m, a, b, pivots, y, w);
      default: break;
    }
    a += m * size_ * size_;
    if (op_ == LapackOp::kCholesky || op_ == LapackOp::kEigh) {
      std::copy(a, a + size_ * size_, w);
    } else {
      for (int64_t i = 0; i < size_; ++i)
        for (int64_t j = 0; j < size_; ++j) w[i + j * size_] = a[i * size_ + j];
    }
    switch (op_) {
      case LapackOp::kSolve: return solve(m, b, y, w);
      case LapackOp::kInverse: return inverse(m, y, w);
      case LapackOp::kSlogdet: return slogdet(m, y, y2, w);
      case LapackOp::kCholesky: return cholesky(m, y, w);
      case LapackOp::kEigh: return eigh(m, y, y2, w);
      default: break;
    }
    return n;
  }

  int solve(int64_t m, const float* b, float* y, float* w) const {
    const int n = static_cast<int>(size_), k = static_cast<int>(columns_);
    float* rhs = w + size_ * size_;
    int* piv = reinterpret_cast<int*>(rhs + size_ * columns_);
    b += m * size_ * columns_;
    y += m * size_ * columns_;
    for (int64_t i = 0; i < size_; ++i)
      for (int64_t c = 0; c < columns_; ++c) rhs[i + c * size_] = b[i * columns_ + c];
    int info = 0;
    if (n > 0) PLANNER_LAPACK(sgetrf)(&n, &n, w, &n, piv, &info);
    if (info == 0 && n > 0 && k > 0) {
      const char trans = transpose_ ? 'T' : 'N';
      int solved = 0;
      PLANNER_LAPACK(sgetrs)(&trans, &n, &k, w, &n, piv, rhs, &n, &solved, 1);
    }
    const float bad = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < size_; ++i)
      for (int64_t c = 0; c < columns_; ++c)
        y[i * columns_ + c] = info == 0 ? rhs[i + c * size_] : bad;
    return info;
  }

  int inverse(int64_t m, float* y, float* w) const {
    const int n = static_cast<int>(size_);
    int* piv = reinterpret_cast<int*>(w + size_ * size_);
    float* extra = w + size_ * size_ + size_;
    y += m * size_ * size_;
    int info = 0;
    if (n > 0) PLANNER_LAPACK(sgetrf)(&n, &n, w, &n, piv, &info);
    if (info == 0 && n > 0) {
      int inverted = 0;
      PLANNER_LAPACK(sgetri)(&n, w, &n, piv, extra, &n, &inverted);
    }
    const float bad = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < size_; ++i)
      for (int64_t j = 0; j < size_; ++j) y[i * size_ + j] = info == 0 ? w[i + j * size_] : bad;
    return info;
  }

  int slogdet(int64_t m, float* sign, float* logabs, float* w) const {
    const int n = static_cast<int>(size_);
    int* piv = reinterpret_cast<int*>(w + size_ * size_);
    int info = 0;
    if (n > 0) PLANNER_LAPACK(sgetrf)(&n, &n, w, &n, piv, &info);
    // det A = the permutation's sign times U's diagonal; a zero pivot: sign 0,
    // log|det| -inf (torch's), a NaN one NaN
    double s = 1, log_sum = 0;
    for (int64_t i = 0; i < size_; ++i) {
      const double d = w[i * size_ + i];
      if (piv[i] != i + 1) s = -s;
      s = d < 0 ? -s : d > 0 ? s : d == 0 ? 0.0 : d;
      log_sum += std::log(std::fabs(d));
    }
    sign[m] = static_cast<float>(s);
    logabs[m] = static_cast<float>(log_sum);
    return 0;  // slogdet of a singular matrix is no failure
  }

  // torch.linalg.lu_factor of a rows x n matrix: L's strict lower part and U packed, the
  // min(rows, n) 1-based pivots; a singular matrix's factors are written too (torch's
  // lu_factor_ex gives them)
  int lu_factor(int64_t m, const float* a, float* y, int32_t* pivots, float* w) const {
    const int64_t rows = columns_, cols = size_, k = std::min(rows, cols);
    const int r = static_cast<int>(rows), c = static_cast<int>(cols);
    a += m * rows * cols;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) w[i + j * rows] = a[i * cols + j];
    int* piv = reinterpret_cast<int*>(w + rows * cols);
    int info = 0;
    if (k > 0) PLANNER_LAPACK(sgetrf)(&r, &c, w, &r, piv, &info);
    y += m * rows * cols;
    pivots += m * k;
    for (int64_t i = 0; i < k; ++i) pivots[i] = piv[i];
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = w[i + j * rows];
    return info;
  }

  int cholesky(int64_t m, float* y, float* w) const {
    const int n = static_cast<int>(size_);
    int info = 0;
    if (n > 0) PLANNER_LAPACK(spotrf)("U", &n, w, &n, &info, 1);
    y += m * size_ * size_;
    // L = U^T: U's upper triangle, column-major, read row-major; from a failing minor's column
    // on, NaN (what the reference gives, LAPACK leaves that part half done)
    const int64_t good = info > 0 ? info - 1 : size_;
    const float bad = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < size_; ++i)
      for (int64_t j = 0; j < size_; ++j)
        y[i * size_ + j] = j > i ? 0.0f : j < good ? w[i * size_ + j] : bad;
    return info;
  }

  int eigh(int64_t m, float* values, float* vectors, float* w) const {
    const int n = static_cast<int>(size_);
    float* lambda = w + size_ * size_;
    float* work = lambda + size_;
    const int lwork = static_cast<int>(1 + 6 * size_ + 2 * size_ * size_);
    int* iwork = reinterpret_cast<int*>(work + lwork);
    const int liwork = static_cast<int>(3 + 5 * size_);
    int info = 0;
    // A's lower triangle is A^T's upper one (torch's UPLO 'L'; 'U' reads the other)
    if (n > 0)
      PLANNER_LAPACK(ssyevd)("V", upper_ ? "L" : "U", &n, w, &n, lambda, work, &lwork, iwork,
                             &liwork, &info, 1, 1);
    values += m * size_;
    vectors += m * size_ * size_;
    const float bad = std::numeric_limits<float>::quiet_NaN();
    for (int64_t j = 0; j < size_; ++j) {
      const float* z = w + j * size_;  // eigenvector j, a column of Z
      // signed so that its entry of largest magnitude (the first such) is positive, as the
      // reference signs numpy's: LAPACK's sign is its own choice
      int64_t top = 0;
      for (int64_t i = 1; i < size_; ++i)
        if (std::fabs(z[i]) > std::fabs(z[top])) top = i;
      const float flip = z[top] < 0 ? -1.0f : 1.0f;
      values[j] = info == 0 ? lambda[j] : bad;
      for (int64_t i = 0; i < size_; ++i)
        vectors[i * size_ + j] = info == 0 ? flip * z[i] : bad;
    }
    return info;
  }

  // torch.linalg.svd (thin) of a rows x n matrix by sgesdd. Row-major A is the column-major
  // A^T = U' S V'^T (n x rows): LAPACK's U' (n x k, column-major) is Vh row-major and its V'^T
  // (k x rows, column-major) is U row-major, so gesdd writes both outputs where they belong.
  int svd(int64_t m, const float* a, Outputs out, float* w) const {
    const int64_t rows = columns_, cols = size_, k = std::min(rows, cols);
    a += m * rows * cols;
    float *u = out.y + m * rows * k, *s = out.y2 + m * k, *vh = out.y3 + m * k * cols;
    if (k == 0) return 0;
    std::copy(a, a + rows * cols, w);
    float* work = w + rows * cols;
    const int lwork = static_cast<int>(svd_lwork(rows, cols));
    int* iwork = reinterpret_cast<int*>(work + lwork);
    const int r = static_cast<int>(rows), c = static_cast<int>(cols), kk = static_cast<int>(k);
    int info = 0;
    PLANNER_LAPACK(sgesdd)("S", &c, &r, w, &c, s, vh, &c, u, &kk, work, &lwork, iwork, &info, 1);
    if (info != 0) {  // no convergence, or a NaN in A
      const float bad = std::numeric_limits<float>::quiet_NaN();
      std::fill(u, u + rows * k, bad);
      std::fill(s, s + k, bad);
      std::fill(vh, vh + k * cols, bad);
      return info;
    }
    // each pair (u_j, vh_j) signed so that u_j's entry of largest magnitude (the first such)
    // is positive, the op's convention (LAPACK's sign is its own choice)
    for (int64_t j = 0; j < k; ++j) {
      int64_t top = 0;
      for (int64_t i = 1; i < rows; ++i)
        if (std::fabs(u[i * k + j]) > std::fabs(u[top * k + j])) top = i;
      if (!(u[top * k + j] < 0)) continue;
      for (int64_t i = 0; i < rows; ++i) u[i * k + j] = -u[i * k + j];
      for (int64_t l = 0; l < cols; ++l) vh[j * cols + l] = -vh[j * cols + l];
    }
    return 0;
  }

  // The reduced QR of a tall rows x n matrix: sgeqrf then sorgqr on A copied column-major, with
  // LAPACK's signs (torch's). MatrixGeqrf: geqrf's packed reflectors and R, and tau, as they
  // are (torch.geqrf).
  int qr(int64_t m, const float* a, float* y, float* y2, float* w) const {
    const int64_t rows = columns_, cols = size_, k = std::min(rows, cols);
    a += m * rows * cols;
    y += m * rows * cols;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) w[i + j * rows] = a[i * cols + j];
    float* tau = w + rows * cols;
    float* work = tau + cols;
    const int r = static_cast<int>(rows), c = static_cast<int>(cols), kk = static_cast<int>(k);
    const int lwork = static_cast<int>(qr_lwork(cols));
    int info = 0;
    if (k > 0) PLANNER_LAPACK(sgeqrf)(&r, &c, w, &r, tau, work, &lwork, &info);
    if (op_ == LapackOp::kGeqrf) {
      std::copy(tau, tau + k, y2 + m * k);
    } else {
      float* rr = y2 + m * cols * cols;
      for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = 0; j < cols; ++j) rr[i * cols + j] = j >= i ? w[i + j * rows] : 0.0f;
      if (k > 0) PLANNER_LAPACK(sorgqr)(&r, &c, &kk, w, &r, tau, work, &lwork, &info);
    }
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = w[i + j * rows];
    return info;
  }

  int expm(int64_t m, const float* a, float* y, double* x) const;

  // torch.linalg.ldl_factor: ssytrf ('L', Bunch-Kaufman) of A copied column-major, so that
  // LAPACK reads A's lower triangle as torch's does; LD its lower triangle, zeros above (as
  // torch's), the pivots LAPACK's (1-based, negative for a 2 x 2 block). A singular D is
  // LAPACK's info, its factors still written.
  int ldl_factor(int64_t m, const float* a, float* y, int32_t* pivots, float* w) const {
    const int n = static_cast<int>(size_);
    a += m * size_ * size_;
    y += m * size_ * size_;
    pivots += m * size_;
    for (int64_t i = 0; i < size_; ++i)
      for (int64_t j = 0; j < size_; ++j) w[i + j * size_] = a[i * size_ + j];
    int* piv = reinterpret_cast<int*>(w + size_ * size_);
    const int lwork = static_cast<int>(qr_lwork(size_));
    int info = 0;
    if (n > 0) PLANNER_LAPACK(ssytrf)("L", &n, w, &n, piv, w + size_ * size_ + size_, &lwork,
                                      &info, 1);
    for (int64_t i = 0; i < size_; ++i) {
      pivots[i] = piv[i];
      for (int64_t j = 0; j < size_; ++j) y[i * size_ + j] = j > i ? 0.0f : w[i + j * size_];
    }
    return info;
  }

  // torch.linalg.ldl_solve: ssytrs with ldl_factor's LD and pivots, B's columns at once.
  int ldl_solve(int64_t m, const float* ld, const float* b, const int32_t* pivots, float* y,
                float* w) const {
    const int n = static_cast<int>(size_), k = static_cast<int>(columns_);
    ld += m * size_ * size_;
    b += m * size_ * columns_;
    y += m * size_ * columns_;
    pivots += m * size_;
    float* rhs = w + size_ * size_;
    int* piv = reinterpret_cast<int*>(rhs + size_ * columns_);
    for (int64_t i = 0; i < size_; ++i) {
      piv[i] = pivots[i];
      for (int64_t j = 0; j < size_; ++j) w[i + j * size_] = ld[i * size_ + j];
      for (int64_t c = 0; c < columns_; ++c) rhs[i + c * size_] = b[i * columns_ + c];
    }
    int info = 0;
    if (n > 0 && k > 0) PLANNER_LAPACK(ssytrs)("L", &n, &k, w, &n, piv, rhs, &n, &info, 1);
    for (int64_t i = 0; i < size_; ++i)
      for (int64_t c = 0; c < columns_; ++c) y[i * columns_ + c] = rhs[i + c * size_];
    return info;
  }

  LapackOp op_;
  int threads_;
  int64_t size_ = 0, batch_ = 1, columns_ = 0;
  bool batched_ = false, transpose_ = false, upper_ = false;
  std::string check_;
  int a_, b_, y_, y2_, y3_, pivots_, info_;
  std::vector<int> failed_;  // per matrix, LAPACK's info of the last step
};

// ---- MatrixExp: scaling and squaring (Higham 2005, "The scaling and squaring method for the
// matrix exponential revisited", Algorithm 2.3; scipy's expm before its 2009 refinements).
// exp(A) ~ (V - U)^-1 (V + U), U and V the odd and even parts of the degree-d Padé
// approximant's numerator, with d the least of 3, 5, 7, 9 whose bound theta_d on ||A||_1 keeps
// its error below float64's unit roundoff, else d = 13 on A / 2^s, squared s times. In float64
// (GEMMs and one LU solve, OpenBLAS's dgemm, dgetrf, dgetrs), rounded once to float32.
//
// The row-major A is the column-major A^T, and exp(A^T) = exp(A)^T: the column-major routines
// compute exp(A) row-major, A^T's 1-norm choosing d (a norm of A just the same).

constexpr double kPade3[] = {120.0, 60.0, 12.0, 1.0};
constexpr double kPade5[] = {30240.0, 15120.0, 3360.0, 420.0, 30.0, 1.0};
constexpr double kPade7[] = {17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0,
                             1.0};
constexpr double kPade9[] = {17643225600.0, 8821612800.0, 2075673600.0, 302702400.0,
                             30270240.0, 2162160.0, 110880.0, 3960.0, 90.0, 1.0};
constexpr double kPade13[] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                              1187353796428800.0, 129060195264000.0, 10559470521600.0,
                              670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0,
                              16380.0, 182.0, 1.0};
// Higham's theta_d (Table 2.3, float64) for d = 3, 5, 7, 9, 13
constexpr double kTheta[] = {1.495585217958292e-2, 2.539398330063230e-1, 9.504178996162932e-1,
                             2.097847961257068e0, 5.371920351148152e0};

// c = a b for n x n column-major matrices
void gemm64(int n, const double* a, const double* b, double* c) {
  const double one = 1.0, zero = 0.0;
  PLANNER_LAPACK(dgemm)("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
}

// y += c * x (n x n), and c * I where x is null
void axpy64(int64_t n, double c, const double* x, double* y) {
  if (x == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i * n + i] += c;
  } else {
    for (int64_t i = 0; i < n * n; ++i) y[i] += c * x[i];
  }
}

// The Padé approximant's U and V of A (x) with its even powers p[0..3] = A^2..A^8 as far as
// degree d needs them (p[0] given); t: a product's room.
void pade(int d, int n, const double* x, double* const p[4], double* u, double* v, double* t) {
  const int64_t nn = static_cast<int64_t>(n) * n;
  for (int j = 1; 2 * j + 2 <= (d == 13 ? 6 : d - 1); ++j) gemm64(n, p[j - 1], p[0], p[j]);
  std::fill(t, t + nn, 0.0);
  std::fill(v, v + nn, 0.0);
  if (d == 13) {  // Higham's evaluation: U = A [A^6 (b13 A^6 + b11 A^4 + b9 A^2) + b7 A^6 + ...]
    const double* b = kPade13;
    for (int j = 0; j < 3; ++j) axpy64(n, b[2 * j + 9], p[j], t);
    gemm64(n, p[2], t, p[3]);
    for (int j = 0; j < 4; ++j) axpy64(n, b[2 * j + 1], j ? p[j - 1] : nullptr, p[3]);
    gemm64(n, x, p[3], u);
    std::fill(t, t + nn, 0.0);
    for (int j = 0; j < 3; ++j) axpy64(n, b[2 * j + 8], p[j], t);
    gemm64(n, p[2], t, v);
    for (int j = 0; j < 4; ++j) axpy64(n, b[2 * j], j ? p[j - 1] : nullptr, v);
    return;
  }
  const double* b = d == 3 ? kPade3 : d == 5 ? kPade5 : d == 7 ? kPade7 : kPade9;
  for (int j = 0; 2 * j < d; ++j) {  // sum of b_{2j+1} A^2j, of b_{2j} A^2j
    axpy64(n, b[2 * j + 1], j ? p[j - 1] : nullptr, t);
    axpy64(n, b[2 * j], j ? p[j - 1] : nullptr, v);
  }
  gemm64(n, x, t, u);
}

int LapackMatrices::expm(int64_t m, const float* a, float* y, double* x) const {
  const int n = static_cast<int>(size_);
  const int64_t nn = size_ * size_;
  a += m * nn;
  y += m * nn;
  if (n == 0) return 0;
  double* p[4] = {x + nn, x + 2 * nn, x + 3 * nn, x + 4 * nn};
  double *u = x + 5 * nn, *v = x + 6 * nn, *t = x + 7 * nn;
  int* piv = reinterpret_cast<int*>(x + 8 * nn);
  double norm = 0;  // ||.||_1 of the column-major A^T
  for (int64_t j = 0; j < size_; ++j) {
    double column = 0;
    for (int64_t i = 0; i < size_; ++i) column += std::fabs(x[i + j * size_] = a[i + j * size_]);
    norm = std::max(norm, column);
  }
  if (!std::isfinite(norm)) {  // a NaN or inf: NaN throughout (torch's, the reference's)
    std::fill(y, y + nn, std::numeric_limits<float>::quiet_NaN());
    return 0;
  }
  int degree = 13, squarings = 0;
  for (int d = 0; d < 4 && degree == 13; ++d)
    if (norm <= kTheta[d]) degree = 3 + 2 * d;
  if (degree == 13 && norm > kTheta[4]) {
    squarings = static_cast<int>(std::ceil(std::log2(norm / kTheta[4])));
    const double scale = std::ldexp(1.0, -squarings);
    for (int64_t i = 0; i < nn; ++i) x[i] *= scale;
  }
  gemm64(n, x, x, p[0]);
  pade(degree, n, x, p, u, v, t);
  for (int64_t i = 0; i < nn; ++i) {  // solve (V - U) X = V + U, X into t
    t[i] = v[i] + u[i];
    v[i] -= u[i];
  }
  int info = 0;
  PLANNER_LAPACK(dgetrf)(&n, &n, v, &n, piv, &info);
  if (info == 0) PLANNER_LAPACK(dgetrs)("N", &n, &n, v, &n, piv, t, &n, &info, 1);
  for (int k = 0; k < squarings; ++k) {
    gemm64(n, t, t, u);
    std::swap(t, u);
  }
  for (int64_t i = 0; i < nn; ++i)
    y[i] = info == 0 ? static_cast<float>(t[i]) : std::numeric_limits<float>::quiet_NaN();
  return info;
}

// (named factories, not a template: codegen/backends.py reads the registrations below)
KernelPtr lapack_kernel(const Node& n, LapackOp op) {
  return std::make_unique<LapackMatrices>(n, op);
}
KernelPtr lapack_inverse(const Node& n) { return lapack_kernel(n, LapackOp::kInverse); }
KernelPtr lapack_solve(const Node& n) { return lapack_kernel(n, LapackOp::kSolve); }
KernelPtr lapack_slogdet(const Node& n) { return lapack_kernel(n, LapackOp::kSlogdet); }
KernelPtr lapack_cholesky(const Node& n) { return lapack_kernel(n, LapackOp::kCholesky); }
KernelPtr lapack_eigh(const Node& n) { return lapack_kernel(n, LapackOp::kEigh); }
KernelPtr lapack_lu_factor(const Node& n) { return lapack_kernel(n, LapackOp::kLuFactor); }
KernelPtr lapack_svd(const Node& n) { return lapack_kernel(n, LapackOp::kSvd); }
KernelPtr lapack_qr(const Node& n) { return lapack_kernel(n, LapackOp::kQr); }
KernelPtr lapack_geqrf(const Node& n) { return lapack_kernel(n, LapackOp::kGeqrf); }
KernelPtr lapack_exp(const Node& n) { return lapack_kernel(n, LapackOp::kExp); }
KernelPtr lapack_ldl_factor(const Node& n) { return lapack_kernel(n, LapackOp::kLdlFactor); }
KernelPtr lapack_ldl_solve(const Node& n) { return lapack_kernel(n, LapackOp::kLdlSolve); }

// ---- MatrixEig (planner/ops/linalg_eig.py): dgeev of each matrix, in float64 for float32 and
// float64 tensors alike (rounded once: a float32 geev may order the eigenvalues otherwise), the
// eigenvalues as (re, im) planes in geev's order and the right eigenvectors unpacked from geev's
// real form into planes: a real eigenvalue's vector is a column of VR, a complex pair's (the one
// of positive imaginary part first) VR(:, j) +- i VR(:, j + 1). Each has norm 1 (geev's) and is
// multiplied by the unit number that makes its entry of largest modulus (the first within a
// relative kTie of it) real and positive. A matrix holding NaN or inf, or one geev does not
// converge on, gives NaN throughout.

constexpr int64_t kEigWork = 66;  // dgeev's work, doubles per column (linalg_eig.py's EIG_WORK)
constexpr double kTie = 1e-9;     // (ops/linalg_eig.py's TIE)

// doubles of one matrix's workspace: A, VR, wr and wi, work
int64_t eig_doubles(int64_t n) { return 2 * n * n + 2 * n + kEigWork * std::max<int64_t>(n, 1); }

template <typename T>
class LapackEig : public Kernel {
 public:
  explicit LapackEig(const Node& n)
      : threads_(n.threads), a_(n.in[0].id), l_(n.out[0].id), v_(n.out[1].id) {
    const Shape& s = n.in[0].shape;
    size_ = s.back();
    for (size_t d = 0; d + 2 < s.size(); ++d) batch_ *= s[d];
    if (size_ > std::numeric_limits<int>::max() / std::max<int64_t>(size_ * kEigWork, 1))
      throw std::runtime_error("matrices of " + std::to_string(size_) +
                               " rows are too large for LAPACK's 32-bit sizes");
    static const bool one_thread_each = [] {
      PLANNER_LAPACK_JOIN(PLANNER_LAPACK_PREFIX, openblas_set_num_threads)(1);
      return true;
    }();
    (void)one_thread_each;
  }
  size_t scratch_bytes() const override {
    return sizeof(double) * static_cast<size_t>(threads_ * eig_doubles(size_));
  }
  void run(const Run& r) override {
    const T* a = r.at<T>(a_);
    T* l = r.at<T>(l_);
    T* v = r.at<T>(v_);
    double* work = reinterpret_cast<double*>(r.scratch);
    const int64_t per = eig_doubles(size_), batch = batch_, n = size_;
    const int threads = std::max(1, std::min(r.threads, threads_));
#pragma omp parallel for num_threads(threads) if(batch > 1 && batch * n * n * n >= kGrain)
    for (int64_t m = 0; m < batch; ++m)
      one(a + m * n * n, l + m * n * 2, v + m * n * n * 2, work + omp_get_thread_num() * per);
  }

 private:
  void one(const T* a, T* l, T* v, double* x) const {
    const int64_t n = size_;
    double *vr = x + n * n, *wr = vr + n * n, *wi = wr + n, *work = wi + n;
    bool finite = true;
    for (int64_t i = 0; i < n; ++i)  // A column-major (LAPACK's), so that geev factors A itself
      for (int64_t j = 0; j < n; ++j) finite &= std::isfinite(x[i + j * n] = a[i * n + j]);
    const int nn = static_cast<int>(n), one_column = 1;
    const int lwork = static_cast<int>(kEigWork * std::max<int64_t>(n, 1));
    double unused = 0;
    int info = 0;
    if (finite && n > 0)
      PLANNER_LAPACK(dgeev)("N", "V", &nn, x, &nn, wr, wi, &unused, &one_column, vr, &nn, work,
                            &lwork, &info, 1, 1);
    if (!finite || info != 0) {
      std::fill(l, l + 2 * n, std::numeric_limits<T>::quiet_NaN());
      std::fill(v, v + 2 * n * n, std::numeric_limits<T>::quiet_NaN());
      return;
    }
    for (int64_t j = 0; j < n; ++j) {
      l[2 * j] = static_cast<T>(wr[j]);
      l[2 * j + 1] = static_cast<T>(wi[j]);
      vector(j, vr, wi, v);
    }
  }

  // eigenvector j into column j of v's planes, phased
  void vector(int64_t j, const double* vr, const double* wi, T* v) const {
    const int64_t n = size_;
    // a pair's first (wi > 0) is VR(:, j) + i VR(:, j + 1), its second that one's conjugate
    const double* re = vr + (wi[j] < 0 ? j - 1 : j) * n;
    const double* im = wi[j] > 0 ? vr + (j + 1) * n : wi[j] < 0 ? vr + j * n : nullptr;
    const double sign = wi[j] < 0 ? -1.0 : 1.0;
    double top = 0;
    for (int64_t i = 0; i < n; ++i) top = std::max(top, std::hypot(re[i], im ? im[i] : 0.0));
    int64_t k = 0;
    while (k + 1 < n && std::hypot(re[k], im ? sign * im[k] : 0.0) < top * (1 - kTie)) ++k;
    const double zr = re[k], zi = im ? sign * im[k] : 0.0, size = std::hypot(zr, zi);
    const double pr = size > 0 ? zr / size : 1.0, pi = size > 0 ? -zi / size : 0.0;
    for (int64_t i = 0; i < n; ++i) {  // z_i * conj(z_k) / |z_k|
      const double ar = re[i], ai = im ? sign * im[i] : 0.0;
      v[(i * n + j) * 2] = static_cast<T>(ar * pr - ai * pi);
      v[(i * n + j) * 2 + 1] = static_cast<T>(ar * pi + ai * pr);
    }
  }

  int threads_;
  int a_, l_, v_;
  int64_t size_ = 0, batch_ = 1;
};

KernelPtr lapack_eig(const Node& n) {
  if (n.in[0].dtype == F64) return std::make_unique<LapackEig<double>>(n);
  return std::make_unique<LapackEig<float>>(n);
}

// LuPermutation: P (A's rows square) of A = P L U from the 1-based pivots (row k swapped with
// row pivots[k] - 1, in order): P[order[j]][j] = 1 for the rows' order after the swaps. A
// pivot out of range is a StepError (pivots fed from outside the step).
class LuPermutationKernel : public Kernel {
 public:
  explicit LuPermutationKernel(const Node& n)
      : piv_(n.in[0].id), p_(n.out[0].id), count_(n.in[0].shape.back()),
        size_(n.out[0].shape.back()) {
    if (n.in[0].dtype != I32 || n.out[0].dtype != F32)
      throw std::runtime_error("LuPermutation: int32 pivots to a float32 matrix");
    batch_ = size_ > 0 ? n.out[0].size() / (size_ * size_) : 0;
    order_.resize(static_cast<size_t>(size_));
  }
  void run(const Run& r) override {
    const int32_t* piv = r.at<int32_t>(piv_);
    float* p = r.at<float>(p_);
    std::fill(p, p + batch_ * size_ * size_, 0.0f);
    for (int64_t m = 0; m < batch_; ++m, piv += count_, p += size_ * size_) {
      for (int64_t i = 0; i < size_; ++i) order_[i] = i;
      for (int64_t k = 0; k < count_; ++k) {
        if (piv[k] < 1 || piv[k] > size_)
          throw StepError("pivot " + std::to_string(piv[k]) + " out of range [1, " +
                          std::to_string(size_) + "]");
        std::swap(order_[k], order_[piv[k] - 1]);
      }
      for (int64_t j = 0; j < size_; ++j) p[order_[j] * size_ + j] = 1.0f;
    }
  }

 private:
  int piv_, p_;
  int64_t count_, size_, batch_ = 0;  // pivots, P's rows
  std::vector<int64_t> order_;
};

KernelPtr lu_permutation(const Node& n) { return std::make_unique<LuPermutationKernel>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(lapack) {
  // (int32: the `info` output of a factorization that may fail)
  r["MatrixInverse"] = {lapack_inverse, "float32|float32,int32"};
  r["MatrixSolve"] = {lapack_solve, "float32|float32,int32"};
  r["MatrixSlogdet"] = lapack_slogdet;
  r["Cholesky"] = {lapack_cholesky, "float32|float32,int32"};
  r["MatrixEigh"] = lapack_eigh;
  r["MatrixEig"] = {lapack_eig, "float32|float64"};
  r["MatrixLuFactor"] = {lapack_lu_factor, "float32|float32,int32"};
  r["LuPermutation"] = {lu_permutation, "int32,float32"};
  r["MatrixSvd"] = lapack_svd;
  r["MatrixQr"] = lapack_qr;
  r["MatrixGeqrf"] = lapack_geqrf;
  r["MatrixExp"] = lapack_exp;
  r["MatrixLdlFactor"] = {lapack_ldl_factor, "float32,int32"};
  r["MatrixLdlSolve"] = {lapack_ldl_solve, "float32,int32"};
}

}  // namespace planner
