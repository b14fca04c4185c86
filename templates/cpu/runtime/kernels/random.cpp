// The random ops (planner/ops/random.py): element i is the value of draw i of the counter-based
// generator keyed by (seed, step, rank) (common/random.h), so any split of the loop over
// threads gives the same tensor. The rank is the executor's data-parallel rank (0 alone).
// RandomPerm is a Fisher-Yates shuffle, sequential by nature.
#include <omp.h>

#include <numeric>

#include "../loops.h"
#include "random.h"

namespace planner {
namespace {

class Random : public Kernel {
 public:
  explicit Random(const Node& n) : o_(random_op(n)) {}  // common/random.h
  void run(const Run& r) override {
    const uint64_t step = o_.step >= 0 ? static_cast<uint64_t>(*r.at<int64_t>(o_.step)) : 0;
    const uint64_t rank = r.collective ? static_cast<uint64_t>(r.collective->rank) : 0;
    const uint64_t base = rng_base(o_.seed, step, rank);
    const int64_t size = o_.size;
    switch (o_.kind) {
      case RandomKind::kUniform: {
        float* y = r.at<float>(o_.out);
        const float low = static_cast<float>(o_.a);
        const float span = static_cast<float>(o_.b) - low;
#pragma omp parallel for if(size >= kGrain)
        for (int64_t i = 0; i < size; ++i)
          y[i] = rng_uniform(rng_mix(base + static_cast<uint64_t>(i)), low, span);
        break;
      }
      case RandomKind::kNormal: {
        float* y = r.at<float>(o_.out);
#pragma omp parallel for if(size >= kGrain / 8)
        for (int64_t i = 0; i < size; ++i)
          y[i] = rng_normal(rng_mix(base + static_cast<uint64_t>(i)), o_.a, o_.b);
        break;
      }
      case RandomKind::kBernoulli: {
        float* y = r.at<float>(o_.out);
        if (o_.p >= 0) {  // any float p, NaN and p > 1 included, as the reference compares
          const float* p = r.at<float>(o_.p);
#pragma omp parallel for if(size >= kGrain)
          for (int64_t i = 0; i < size; ++i)
            y[i] = rng_bernoulli(rng_mix(base + static_cast<uint64_t>(i)), p[i]);
          break;
        }
        const uint64_t below = rng_bernoulli_below(o_.a);
#pragma omp parallel for if(size >= kGrain)
        for (int64_t i = 0; i < size; ++i)
          y[i] = rng_bernoulli_from(rng_mix(base + static_cast<uint64_t>(i)), below);
        break;
      }
      case RandomKind::kInt: {
        int64_t* y = r.at<int64_t>(o_.out);
        const uint64_t span = static_cast<uint64_t>(o_.span);
#pragma omp parallel for if(size >= kGrain)
        for (int64_t i = 0; i < size; ++i)
          y[i] = o_.low + static_cast<int64_t>(rng_below(rng_mix(base + static_cast<uint64_t>(i)), span));
        break;
      }
      case RandomKind::kPerm: {
        int64_t* y = r.at<int64_t>(o_.out);
        std::iota(y, y + size, int64_t{0});
        for (int64_t i = size - 1; i > 0; --i) {
          const uint64_t d = rng_mix(base + static_cast<uint64_t>(i));
          const int64_t j = static_cast<int64_t>(rng_below(d, static_cast<uint64_t>(i) + 1));
          std::swap(y[i], y[j]);
        }
        break;
      }
    }
  }

 private:
  RandomOp o_;
};

KernelPtr random_kernel(const Node& n) { return std::make_unique<Random>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(random) {
  r["RandomUniform"] = random_kernel;
  r["RandomNormal"] = random_kernel;
  r["Bernoulli"] = random_kernel;
  r["RandomInt"] = {random_kernel, "int64"};
  r["RandomPerm"] = {random_kernel, "int64"};
}

}  // namespace planner
