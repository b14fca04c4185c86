// Float math in plain arithmetic that `omp simd` loops vectorize (libm's expf, tanhf do not):
// branch-free selects, exp of a non-positive number, sigmoid and tanh built on it. NaN goes
// through each as NaN, +-inf as the limits (exp_nonpositive(-inf) aside, see there).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace planner {

// c ? a : b without a branch: g++ -O2 does not if-convert a branch inside a loop, which keeps
// the loop scalar even under omp simd (checked with -fopt-info-vec).
inline float select(bool c, float a, float b) {
  int32_t ab, bb;
  std::memcpy(&ab, &a, sizeof ab);
  std::memcpy(&bb, &b, sizeof bb);
  const int32_t mask = -static_cast<int32_t>(c);
  const int32_t bits = (ab & mask) | (bb & ~mask);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// exp(x) for a shifted logit x <= 0, in plain float arithmetic a loop vectorizes (libm's expf
// does not): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' expf polynomial (about 1 ulp),
// 2^n written into the exponent bits. Below -87 (and -inf) it gives exp(-87) ~ 1.6e-38, not 0:
// next to the row maximum's term 1 that changes a sum by less than float's rounding.
inline float exp_nonpositive(float x) {
  x = select(x < -87.f, -87.f, x);
  const int n = static_cast<int>(x * 1.44269504088896341f - 0.5f);  // round to nearest, x <= 0
  const float fn = static_cast<float>(n);
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;  // x - n ln2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

// sigmoid(x) from e = exp(-|x|) only (no overflow): 1 / (1 + e) for x >= 0, e / (1 + e) below;
// from -87 down it gives about 1.6e-38 for 0.
inline float sigmoid_f(float x) {
  const float e = exp_nonpositive(-std::fabs(x));
  const float s = 1.f / (1.f + e);
  return select(x >= 0.f, s, e * s);
}

// tanh(x): Cephes' tanhf, an odd polynomial below |x| = 0.625 (where 1 - e would cancel) and
// (1 - e) / (1 + e) with e = exp(-2|x|) above, the sign put back; about 2 ulp.
inline float tanh_f(float x) {
  const float ax = std::fabs(x);
  const float e = exp_nonpositive(-2.f * ax);
  const float big = (1.f - e) / (1.f + e);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = ax + ax * z * p;
  return std::copysign(select(ax < 0.625f, small, big), x);
}

}  // namespace planner

namespace planner {

// erfc(z) for z >= 0, given e = exp(-z^2): Abramowitz & Stegun 7.1.26, t = 1 / (1 + p z),
// erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e, absolute error <= 1.5e-7 for every
// z >= 0 in exact arithmetic (the polynomial PyTorch's vectorized erf uses); float32 rounding
// adds a few ulps of 1. z = +inf gives 0 (t = 0).
inline float erfc_nonneg(float z, float e) {
  const float t = 1.f / (1.f + 0.3275911f * z);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  return p * t * e;
}

}  // namespace planner
