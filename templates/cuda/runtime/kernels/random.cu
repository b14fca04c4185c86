// The random ops on the GPU (planner/ops/random.py, common/random.h): element i is the value of
// draw i of the counter-based generator keyed by (seed, step, rank), one thread per element,
// grid-stride; the step is read on the device (no host sync). RandomPerm's Fisher-Yates shuffle
// is sequential: one thread runs it (permutations are small: a batch's or a sequence's).
#include <cstdint>

#include "../groups.cuh"
#include "random.h"

namespace planner {
namespace {

__device__ __forceinline__ uint64_t device_base(uint64_t seed, const int64_t* step,
                                                uint64_t rank) {
  return rng_base(seed, step ? static_cast<uint64_t>(*step) : 0, rank);
}

__global__ void random_float(RandomKind kind, uint64_t seed, const int64_t* __restrict__ step,
                             uint64_t rank, const float* __restrict__ p, double a, double b,
                             uint64_t below, int64_t size, float* __restrict__ y) {
  const uint64_t base = device_base(seed, step, rank);
  const float low = static_cast<float>(a), span = static_cast<float>(b) - low;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < size;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t d = rng_mix(base + static_cast<uint64_t>(i));
    if (kind == RandomKind::kUniform)
      y[i] = rng_uniform(d, low, span);
    else if (kind == RandomKind::kNormal)
      y[i] = rng_normal(d, a, b);
    else
      y[i] = p ? rng_bernoulli(d, static_cast<double>(p[i])) : rng_bernoulli_from(d, below);
  }
}

__global__ void random_int(uint64_t seed, const int64_t* __restrict__ step, uint64_t rank,
                           int64_t low, uint64_t span, int64_t size, int64_t* __restrict__ y) {
  const uint64_t base = device_base(seed, step, rank);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < size;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = low + static_cast<int64_t>(rng_below(rng_mix(base + static_cast<uint64_t>(i)), span));
}

__global__ void random_perm(uint64_t seed, const int64_t* __restrict__ step, uint64_t rank,
                            int64_t n, int64_t* __restrict__ y) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const uint64_t base = device_base(seed, step, rank);
  for (int64_t i = 0; i < n; ++i) y[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t d = rng_mix(base + static_cast<uint64_t>(i));
    const int64_t j = static_cast<int64_t>(rng_below(d, static_cast<uint64_t>(i) + 1));
    const int64_t t = y[i];
    y[i] = y[j];
    y[j] = t;
  }
}

class Random : public Kernel {
 public:
  explicit Random(const Node& n) : o_(random_op(n)), threads_(block_threads(n)) {  // random.h
    blocks_ = blocks_for(o_.size, threads_);
  }
  void run(const Run& r) override {
    if (o_.size == 0) return;
    const int64_t* step = o_.step >= 0 ? r.at<int64_t>(o_.step) : nullptr;
    const uint64_t rank = r.collective ? static_cast<uint64_t>(r.collective->rank) : 0;
    if (o_.kind == RandomKind::kPerm) {
      random_perm<<<1, 1, 0, r.stream>>>(o_.seed, step, rank, o_.span, r.at<int64_t>(o_.out));
    } else if (o_.kind == RandomKind::kInt) {
      random_int<<<blocks_, threads_, 0, r.stream>>>(o_.seed, step, rank, o_.low,
                                                     static_cast<uint64_t>(o_.span), o_.size,
                                                     r.at<int64_t>(o_.out));
    } else {
      const float* p = o_.p >= 0 ? r.at<float>(o_.p) : nullptr;
      const uint64_t below = o_.kind == RandomKind::kBernoulli ? rng_bernoulli_below(o_.a) : 0;
      random_float<<<blocks_, threads_, 0, r.stream>>>(o_.kind, o_.seed, step, rank, p, o_.a,
                                                       o_.b, below, o_.size,
                                                       r.at<float>(o_.out));
    }
    PLANNER_LAUNCHED("random draw");
  }

 private:
  RandomOp o_;
  int threads_;
  unsigned blocks_ = 1;
};

KernelPtr random_kernel(const Node& n) { return std::make_unique<Random>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(random) {
  r["RandomUniform"] = random_kernel;
  r["RandomNormal"] = random_kernel;
  r["Bernoulli"] = random_kernel;
  r["RandomInt"] = random_kernel;
  r["RandomPerm"] = random_kernel;
}

}  // namespace planner
