// The batched small-matrix ops as both backends compute them (planner/ops/linalg.py): one
// square matrix at a time, factored in float64 in a workspace of its own, rounded to float32
// once. The CPU kernel runs one matrix per thread of an OpenMP loop, the CUDA kernel one per
// GPU thread; both call the same functions here.
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

enum class SmallLinalg { kInverse, kSolve, kSlogdet, kCholesky };

struct SmallLinalgShape {
  SmallLinalg op;
  int64_t batch, n, k;  // k: right-hand sides of a solve (n for an inverse)
  bool transpose;       // solve A^T X = B
};

// float64 values of one matrix's workspace: the matrix, one column, then n int64 pivots.
PLANNER_HOST_DEVICE inline int64_t small_linalg_work(int64_t n) { return n * n + 2 * n; }

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

// Matrix m of the batch: a, b (a solve's right-hand sides) in, y (and y2: slogdet's log|det|;
// info, when not null) out; work holds small_linalg_work(n) float64 values.
PLANNER_HOST_DEVICE inline void small_linalg_one(const SmallLinalgShape& s, int64_t m,
                                                 const float* a, const float* b, float* y,
                                                 float* y2, int32_t* info, double* work) {
  const int64_t n = s.n, k = s.k;
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
