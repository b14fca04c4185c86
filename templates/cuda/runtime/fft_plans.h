// The executor's cuFFT plans, one per transform geometry (kernels/fft.cu, the FFT op): made at
// load by the first FFT kernel that asks for a geometry, shared by the later ones (a forward
// FFT and its gradient's have the same geometry), destroyed with the executor, after its
// kernels. A plan holds no workspace of its own (cufftSetAutoAllocation off): each run sets
// the op's stream and the op's planned scratch as the plan's work area just before its exec,
// so ops of one geometry on different streams never share a work area (the host issues the
// ops one at a time; PyTorch's cuFFT plan cache shares its plans across streams the same way).
// A plan's own tables (twiddles) are cuFFT's device memory, allocated at load, outside the arena.
#pragma once
#include <cufft.h>

#include <array>
#include <map>
#include <stdexcept>
#include <string>

#include "fft_layout.h"  // FftGeometry

namespace planner {

inline void check_cufft(cufftResult s, const char* what) {
  if (s != CUFFT_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuFFT status " + std::to_string(s));
}
#define PLANNER_CUFFT(call) ::planner::check_cufft((call), #call)

class FftPlans {
 public:
  struct Plan {
    cufftHandle handle;
    size_t work_bytes;  // the work area an exec needs (cuFFT's figure for this geometry)
  };

  FftPlans() = default;
  FftPlans(const FftPlans&) = delete;
  FftPlans& operator=(const FftPlans&) = delete;
  ~FftPlans() {
    for (auto& [key, plan] : plans_) cufftDestroy(plan.handle);
  }

  const Plan& get(const FftGeometry& g) {
    auto found = plans_.find(g.key());
    if (found != plans_.end()) return found->second;
    cufftHandle h;  // float32 C2C: the CUDA runtime has no float64 tensors
    PLANNER_CUFFT(cufftCreate(&h));
    Plan plan{h, 0};
    try {
      PLANNER_CUFFT(cufftSetAutoAllocation(h, 0));
      std::array<long long, 3> n = g.n;
      PLANNER_CUFFT(cufftMakePlanMany64(h, g.rank, n.data(), n.data(), g.stride, g.dist,
                                        n.data(), g.stride, g.dist,
                                        CUFFT_C2C, g.batch,
                                        &plan.work_bytes));
    } catch (...) {
      cufftDestroy(h);
      throw;
    }
    return plans_.emplace(g.key(), plan).first->second;
  }
  size_t size() const { return plans_.size(); }

 private:
  std::map<std::array<long long, 7>, Plan> plans_;
};

}  // namespace planner
