// The batched small-matrix ops as the CUDA kernels compute them (planner/ops/linalg.py; the
// CPU's call LAPACK: cpu/runtime/kernels/lapack.cpp): one matrix per GPU thread, factored in
// float64 in a workspace of its own, rounded to float32 once.
//
// A zero pivot is not an error: it divides, so a singular matrix's inverse and solve hold inf
// or NaN, its slogdet sign 0 and log|det| -inf; Cholesky gives NaN from a non-positive pivot on.
// Where the op has an int32 info output (torch's `_ex` forms), it gets the 1-based index of the
// first zero LU pivot or failed Cholesky pivot, or 0.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "host_device.h"
#include "runtime.h"

namespace planner {

enum class SmallLinalg { kInverse, kSolve, kSlogdet, kCholesky, kSvd, kQr };

struct SmallLinalgShape {
  SmallLinalg op;
  int64_t batch, n, k;  // k: right-hand sides of a solve (n for an inverse)
  bool transpose;       // solve A^T X = B
  int64_t rows = 0;     // MatrixSvd, MatrixQr: A is rows x n
};

// float64 values of one matrix's workspace: the matrix, one column, then n int64 pivots; for
// MatrixSvd the tall orientation of A (r x c), its right rotations (c x c) and c norms; for
// MatrixQr A's Householder vectors and R (rows x n), Q (rows x n) and n scales.
PLANNER_HOST_DEVICE inline int64_t small_linalg_work(const SmallLinalgShape& s) {
  if (s.op == SmallLinalg::kQr) return 2 * s.rows * s.n + s.n;
  if (s.op == SmallLinalg::kSvd) {
    const int64_t r = s.rows > s.n ? s.rows : s.n, c = s.rows > s.n ? s.n : s.rows;
    return r * c + c * c + c;
  }
  return s.n * s.n + 2 * s.n;
}

// Its second output is float values (slogdet's log|det|, the SVD's S, QR's R), not an int32
// info.
inline bool has_values(const SmallLinalgShape& s) {
  return s.op == SmallLinalg::kSlogdet || s.op == SmallLinalg::kSvd || s.op == SmallLinalg::kQr;
}

// N: a backend's kernel-factory Node.
template <class N>
SmallLinalgShape small_linalg_shape(const N& n) {
  const std::string op = n.spec->op;
  for (const auto& t : n.in)
    if (t.dtype != F32) throw std::runtime_error(op + ": float32 tensors");
  const Shape& a = n.in[0].shape;
  SmallLinalgShape s{SmallLinalg::kInverse, 1, a.back(), a.back(), false};
  for (size_t d = 0; d + 2 < a.size(); ++d) s.batch *= a[d];
  if (op == "MatrixSolve") {
    s.op = SmallLinalg::kSolve;
    s.k = n.in[1].shape.back();
    s.transpose = n.attrs.b("transpose");
  } else if (op == "MatrixSlogdet") {
    s.op = SmallLinalg::kSlogdet;
  } else if (op == "Cholesky") {
    s.op = SmallLinalg::kCholesky;
  } else if (op == "MatrixSvd" || op == "MatrixQr") {
    s.op = op == "MatrixSvd" ? SmallLinalg::kSvd : SmallLinalg::kQr;
    s.rows = a[a.size() - 2];
  }
  return s;
}

// LU with partial pivoting of the n x n row-major w in place (unit L below the diagonal, U on
// and above it); piv[k] is the row swapped with row k. Returns the permutation's sign.
PLANNER_HOST_DEVICE inline int lu_factor(double* w, int64_t* piv, int64_t n) {
  int sign = 1;
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    double best = fabs(w[k * n + k]);
    for (int64_t i = k + 1; i < n; ++i)
      if (fabs(w[i * n + k]) > best) {
        best = fabs(w[i * n + k]);
        p = i;
      }
    piv[k] = p;
    if (p != k) {
      sign = -sign;
      for (int64_t j = 0; j < n; ++j) {
        const double t = w[k * n + j];
        w[k * n + j] = w[p * n + j];
        w[p * n + j] = t;
      }
    }
    for (int64_t i = k + 1; i < n; ++i) {
      const double f = w[i * n + k] / w[k * n + k];
      w[i * n + k] = f;
      for (int64_t j = k + 1; j < n; ++j) w[i * n + j] -= f * w[k * n + j];
    }
  }
  return sign;
}

// x = A^-1 x (transpose: A^-T x) from lu_factor's w and piv (P A = L U).
PLANNER_HOST_DEVICE inline void lu_solve(const double* w, const int64_t* piv, int64_t n,
                                         bool transpose, double* x) {
  if (!transpose) {
    for (int64_t k = 0; k < n; ++k) {
      const double t = x[k];
      x[k] = x[piv[k]];
      x[piv[k]] = t;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) x[i] -= w[i * n + j] * x[j];
    for (int64_t i = n - 1; i >= 0; --i) {
      for (int64_t j = i + 1; j < n; ++j) x[i] -= w[i * n + j] * x[j];
      x[i] /= w[i * n + i];
    }
    return;
  }
  // A^T = U^T L^T P: U^T y = x, L^T z = y, then the swaps undone in reverse order
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) x[i] -= w[j * n + i] * x[j];
    x[i] /= w[i * n + i];
  }
  for (int64_t i = n - 1; i >= 0; --i)
    for (int64_t j = i + 1; j < n; ++j) x[i] -= w[j * n + i] * x[j];
  for (int64_t k = n - 1; k >= 0; --k) {
    const double t = x[k];
    x[k] = x[piv[k]];
    x[piv[k]] = t;
  }
}

// The thin SVD A = U diag(S) Vh of the rows x cols row-major a by one-sided Jacobi rotations
// (Hestenes) of the tall orientation's columns, in float64: S descending; each pair (u_j, vh_j)
// signed so that u_j's entry of largest magnitude (the first such) is positive, as the
// reference signs LAPACK's; a zero singular value's u_j is 0.
PLANNER_HOST_DEVICE inline void small_svd(const float* a, int64_t rows, int64_t cols, float* u,
                                          float* sv, float* vh, double* work) {
  const bool tall = rows >= cols;
  const int64_t r = tall ? rows : cols, c = tall ? cols : rows;
  double* w = work;             // r x c: A (tall) or A^T, rotated into U diag(S)
  double* v = work + r * c;     // c x c: the rotations, V
  double* norm = v + c * c;     // c: the singular values
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) w[i * c + j] = tall ? a[i * cols + j] : a[j * cols + i];
  for (int64_t i = 0; i < c * c; ++i) v[i] = i % (c + 1) == 0 ? 1.0 : 0.0;
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p + 1 < c; ++p)
      for (int64_t q = p + 1; q < c; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (int64_t i = 0; i < r; ++i) {
          alpha += w[i * c + p] * w[i * c + p];
          beta += w[i * c + q] * w[i * c + q];
          gamma += w[i * c + p] * w[i * c + q];
        }
        if (!(fabs(gamma) > 1e-15 * sqrt(alpha * beta))) continue;  // NaN: no rotation
        rotated = true;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
        const double cs = 1 / sqrt(1 + t * t), sn = cs * t;
        for (int64_t i = 0; i < r; ++i) {
          const double wp = w[i * c + p], wq = w[i * c + q];
          w[i * c + p] = cs * wp - sn * wq;
          w[i * c + q] = sn * wp + cs * wq;
        }
        for (int64_t i = 0; i < c; ++i) {
          const double vp = v[i * c + p], vq = v[i * c + q];
          v[i * c + p] = cs * vp - sn * vq;
          v[i * c + q] = sn * vp + cs * vq;
        }
      }
    if (!rotated) break;
  }
  for (int64_t j = 0; j < c; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < r; ++i) sum += w[i * c + j] * w[i * c + j];
    norm[j] = sqrt(sum);
  }
  // output j takes the largest singular value left (ties: the lower column)
  for (int64_t j = 0; j < c; ++j) {
    int64_t best = -1;  // -1 marks a column taken (a norm is >= 0 or NaN)
    for (int64_t i = 0; i < c; ++i)
      if (norm[i] != -1.0 && (best < 0 || norm[i] > norm[best])) best = i;
    const double sigma = norm[best];
    norm[best] = -1.0;
    // left vector w[:, best] / sigma (length r), right vector v[:, best] (length c)
    // u_j is the left vector (tall) or the right one (A^T was factored)
    const double* uj = tall ? w + best : v + best;
    int64_t top = 0;
    for (int64_t i = 1; i < (tall ? r : c); ++i)
      if (fabs(uj[i * c]) > fabs(uj[top * c])) top = i;
    const double flip = uj[top * c] < 0 ? -1.0 : 1.0;
    const double scale = sigma > 0 ? flip / sigma : 0.0;
    sv[j] = static_cast<float>(sigma);
    for (int64_t i = 0; i < r; ++i) {
      const float left = static_cast<float>(w[i * c + best] * scale);
      if (tall) u[i * c + j] = left; else vh[j * cols + i] = left;
    }
    for (int64_t i = 0; i < c; ++i) {
      const float right = static_cast<float>(v[i * c + best] * flip);
      if (tall) vh[j * cols + i] = right; else u[i * c + j] = right;
    }
  }
}

// The reduced QR A = Q R of the rows x cols (rows >= cols) row-major a by Householder
// reflections in float64, as LAPACK's geqrf and orgqr sign them (dlarfg: R's diagonal entry is
// minus the sign of the column's leading entry times its norm; a column already zero below
// the diagonal is left as it is).
PLANNER_HOST_DEVICE inline void small_qr(const float* a, int64_t rows, int64_t cols, float* q,
                                         float* r, double* work) {
  double* w = work;                    // rows x cols: R above the diagonal, the vectors below
  double* acc = work + rows * cols;    // rows x cols: Q
  double* tau = acc + rows * cols;     // cols
  for (int64_t i = 0; i < rows * cols; ++i) w[i] = a[i];
  for (int64_t j = 0; j < cols; ++j) {
    const double alpha = w[j * cols + j];
    double xnorm = 0;
    for (int64_t i = j + 1; i < rows; ++i) xnorm += w[i * cols + j] * w[i * cols + j];
    xnorm = sqrt(xnorm);
    tau[j] = 0;
    if (xnorm == 0) continue;
    const double beta = -copysign(sqrt(alpha * alpha + xnorm * xnorm), alpha);
    tau[j] = (beta - alpha) / beta;
    for (int64_t i = j + 1; i < rows; ++i) w[i * cols + j] /= alpha - beta;
    w[j * cols + j] = beta;
    for (int64_t c = j + 1; c < cols; ++c) {  // H_j = I - tau v v^T, v = (1, w[j+1:, j])
      double dot = w[j * cols + c];
      for (int64_t i = j + 1; i < rows; ++i) dot += w[i * cols + j] * w[i * cols + c];
      dot *= tau[j];
      w[j * cols + c] -= dot;
      for (int64_t i = j + 1; i < rows; ++i) w[i * cols + c] -= dot * w[i * cols + j];
    }
  }
  for (int64_t i = 0; i < rows * cols; ++i) acc[i] = i / cols == i % cols ? 1.0 : 0.0;
  for (int64_t j = cols - 1; j >= 0; --j)  // Q = H_0 ... H_{cols-1} I, from the last
    for (int64_t c = j; c < cols; ++c) {
      double dot = acc[j * cols + c];
      for (int64_t i = j + 1; i < rows; ++i) dot += w[i * cols + j] * acc[i * cols + c];
      dot *= tau[j];
      acc[j * cols + c] -= dot;
      for (int64_t i = j + 1; i < rows; ++i) acc[i * cols + c] -= dot * w[i * cols + j];
    }
  for (int64_t i = 0; i < rows * cols; ++i) q[i] = static_cast<float>(acc[i]);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t c = 0; c < cols; ++c)
      r[i * cols + c] = c >= i ? static_cast<float>(w[i * cols + c]) : 0.0f;
}

// Matrix m of the batch: a, b (a solve's right-hand sides) in, y (and y2: slogdet's log|det|;
// info, when not null; MatrixSvd: U, S, Vh as y, y2, y3) out; work holds small_linalg_work(s) float64
// values.
PLANNER_HOST_DEVICE inline void small_linalg_one(const SmallLinalgShape& s, int64_t m,
                                                 const float* a, const float* b, float* y,
                                                 float* y2, float* y3, int32_t* info,
                                                 double* work) {
  const int64_t n = s.n, k = s.k;
  if (s.op == SmallLinalg::kQr) {  // y: Q, y2: R
    small_qr(a + m * s.rows * n, s.rows, n, y + m * s.rows * n, y2 + m * n * n, work);
    return;
  }
  if (s.op == SmallLinalg::kSvd) {  // y: U, y2: S, y3: Vh
    const int64_t c = s.rows < n ? s.rows : n;
    small_svd(a + m * s.rows * n, s.rows, n, y + m * s.rows * c, y2 + m * c, y3 + m * c * n,
              work);
    return;
  }
  double* w = work;
  double* col = work + n * n;
  int64_t* piv = reinterpret_cast<int64_t*>(col + n);
  a += m * n * n;
  for (int64_t i = 0; i < n * n; ++i) w[i] = a[i];
  int32_t failed = 0;
  if (s.op == SmallLinalg::kCholesky) {
    y += m * n * n;
    for (int64_t j = 0; j < n; ++j) {
      double d = w[j * n + j];
      for (int64_t c = 0; c < j; ++c) d -= w[j * n + c] * w[j * n + c];
      w[j * n + j] = d > 0 ? sqrt(d) : NAN;
      if (!(d > 0) && failed == 0) failed = static_cast<int32_t>(j + 1);
      for (int64_t i = j + 1; i < n; ++i) {
        double v = w[i * n + j];
        for (int64_t c = 0; c < j; ++c) v -= w[i * n + c] * w[j * n + c];
        w[i * n + j] = v / w[j * n + j];
      }
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = j <= i ? static_cast<float>(w[i * n + j]) : 0.0f;
    if (info) info[m] = failed;
    return;
  }
  const int sign = lu_factor(w, piv, n);
  for (int64_t i = n - 1; i >= 0; --i)
    if (w[i * n + i] == 0) failed = static_cast<int32_t>(i + 1);
  if (info) info[m] = failed;
  if (s.op == SmallLinalg::kSlogdet) {
    double sgn = sign, logabs = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = w[i * n + i];
      sgn = d < 0 ? -sgn : d > 0 ? sgn : d == 0 ? 0.0 : d;  // d NaN: NaN
      logabs += log(fabs(d));
    }
    y[m] = static_cast<float>(sgn);
    y2[m] = static_cast<float>(logabs);
    return;
  }
  y += m * n * k;
  if (b) b += m * n * k;
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t i = 0; i < n; ++i) col[i] = b ? b[i * k + c] : (i == c ? 1.0 : 0.0);
    lu_solve(w, piv, n, s.transpose, col);
    for (int64_t i = 0; i < n; ++i) y[i * k + c] = static_cast<float>(col[i]);
  }
}

}  // namespace planner
