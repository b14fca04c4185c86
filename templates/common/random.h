// The counter-based generator of the random ops and Dropout (planner/ops/random.py), one
// definition for both backends:
//   draw(seed, step, rank, i) = splitmix64((seed + step * 2^32 + key(step >> 32)) * kGoldenGamma
//                                          + rank * kRankGamma + i)        (uint64, wrapping)
// and the value each op makes of a draw. Every value is exact integer arithmetic or a single
// rounding all implementations share, except the normal's log and cos (the platform's libm).
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "host_device.h"
#include "runtime.h"

namespace planner {

constexpr uint64_t kRngGoldenGamma = 0x9E3779B97F4A7C15ull;  // Dropout's (dropout.cpp)
constexpr uint64_t kRngRankGamma = 0xD1B54A32D192ED03ull;

PLANNER_HOST_DEVICE inline uint64_t rng_mix(uint64_t state) {
  uint64_t z = state + kRngGoldenGamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// What a step's high 32 bits add to the seed (planner/ops/dropout.py step_key): 0 below
// 2^32, distinct for every high half, so step 2^32 + k does not repeat step k's draws.
PLANNER_HOST_DEVICE inline uint64_t rng_step_key(uint64_t high) {
  return rng_mix(high) - rng_mix(0);
}

// The counter of draw 0; draw i is rng_mix(base + i).
PLANNER_HOST_DEVICE inline uint64_t rng_base(uint64_t seed, uint64_t step, uint64_t rank) {
  return (seed + (step << 32) + rng_step_key(step >> 32)) * kRngGoldenGamma +
         rank * kRngRankGamma;
}

enum class RandomKind { kUniform, kNormal, kBernoulli, kInt, kPerm };

// A random op's operands as both backends read them.
struct RandomOp {
  RandomKind kind;
  int p = -1, step = -1, out;  // p: Bernoulli's probability tensor; step: the rng/step counter
  int64_t size;                // output elements
  uint64_t seed;
  double a = 0, b = 0;         // uniform low/high, normal mean/std, bernoulli p
  int64_t low = 0, span = 0;   // randint low and high - low; randperm n
};

inline RandomKind random_kind(const std::string& op) {
  if (op == "RandomUniform") return RandomKind::kUniform;
  if (op == "RandomNormal") return RandomKind::kNormal;
  if (op == "Bernoulli") return RandomKind::kBernoulli;
  if (op == "RandomInt") return RandomKind::kInt;
  if (op == "RandomPerm") return RandomKind::kPerm;
  throw std::runtime_error("not a random op: " + op);
}

// Rank k's stream keyed by seed alone: (seed + rank * kRngRankSeed) * kRngGoldenGamma adds
// rank * kRngRankGamma to rng_base's counter (kRngRankSeed = kRngRankGamma / kRngGoldenGamma mod
// 2^64; the golden gamma is odd, so invertible), for kernels that take the seed as their key
// (the generated Dropout on CUDA, which knows no rank).
constexpr uint64_t kRngRankSeed = 0x75B8311BA71FD2B7ull;

PLANNER_HOST_DEVICE inline uint64_t rng_rank_seed(uint64_t seed, uint64_t rank) {
  return seed + rank * kRngRankSeed;
}

// N: a backend's kernel-factory Node.
template <class N>
RandomOp random_op(const N& n) {
  RandomOp o;
  o.kind = random_kind(n.spec->op);
  o.out = n.out[0].id;
  o.size = n.out[0].size();
  o.seed = n.attrs.u("seed");
  size_t k = 0;
  if (o.kind == RandomKind::kBernoulli && k < n.in.size() && n.in[k].dtype == F32) {
    if (n.in[k].size() != o.size) throw std::runtime_error("Bernoulli: p must have the output's shape");
    o.p = n.in[k++].id;
  }
  if (k < n.in.size()) {
    if (n.in[k].dtype != I64 || n.in[k].size() != 1)
      throw std::runtime_error("the step input must be an int64 scalar");
    o.step = n.in[k].id;
  }
  const bool integer = o.kind == RandomKind::kInt || o.kind == RandomKind::kPerm;
  if (n.out[0].dtype != (integer ? I64 : F32))
    throw std::runtime_error(integer ? "this random op writes int64" : "this random op writes float32");
  switch (o.kind) {
    case RandomKind::kUniform: o.a = n.attrs.f("low"); o.b = n.attrs.f("high"); break;
    case RandomKind::kNormal: o.a = n.attrs.f("mean"); o.b = n.attrs.f("std"); break;
    case RandomKind::kBernoulli: o.a = n.attrs.has("p") ? n.attrs.f("p") : 0.5; break;
    case RandomKind::kInt: o.low = n.attrs.i("low"); o.span = n.attrs.i("high") - o.low; break;
    case RandomKind::kPerm: o.span = n.attrs.i("n"); break;
  }
  return o;
}

// Element i's value from its draw d (not RandomPerm's: that one is a sequential shuffle).
PLANNER_HOST_DEVICE inline float rng_uniform(uint64_t d, float low, float span) {
  // span * k24 is exact in double (24 x 24 bits), so contraction cannot change the result.
  return static_cast<float>(static_cast<double>(span) * static_cast<double>(d >> 40) * 0x1.0p-24 +
                            static_cast<double>(low));
}

PLANNER_HOST_DEVICE inline float rng_normal(uint64_t d, double mean, double std) {
  const double u1 = (static_cast<double>(d >> 40) + 1.0) * 0x1.0p-24;
  const double u2 = static_cast<double>((d >> 16) & 0xFFFFFFull) * 0x1.0p-24;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979311600 * u2);
#ifdef __CUDA_ARCH__
  return static_cast<float>(__dadd_rn(mean, __dmul_rn(std, z)));  // no FMA: the CPU's rounding
#else
  return static_cast<float>(mean + std * z);
#endif
}

PLANNER_HOST_DEVICE inline float rng_bernoulli(uint64_t d, double p) {
  return static_cast<double>(d >> 11) < p * 0x1.0p53 ? 1.f : 0.f;
}

// The same draw for a p in [0, 1] known at load: (d >> 11) < p 2^53 exactly when (d >> 11) <
// ceil(p 2^53) (an integer below 2^53; p 2^53 is exact), an integer compare that vectorizes
// (2^20 draws on two threads of the CPU: 31.5 ms with the double compare, 0.14 ms with this).
inline uint64_t rng_bernoulli_below(double p) {
  return static_cast<uint64_t>(std::ceil(p * 0x1.0p53));
}

PLANNER_HOST_DEVICE inline float rng_bernoulli_from(uint64_t d, uint64_t below) {
  return (d >> 11) < below ? 1.f : 0.f;
}

// (d >> 32) * m >> 32: a 32-bit draw mapped to [0, m), m < 2^32.
PLANNER_HOST_DEVICE inline uint64_t rng_below(uint64_t d, uint64_t m) {
  return ((d >> 32) * m) >> 32;
}

}  // namespace planner
