// Whether a device can run a plan: its architecture is the plan's (the runtime holds machine
// code for that one only, and the plan's costs are that GPU's) and it has the memory the plan
// was budgeted for. Plain C++ (no CUDA headers) so that it is tested without a GPU.
#pragma once
#include <cstdint>
#include <string>

namespace planner {

// Datasheets round memory (an "80 GB" H100 reports 79.6 GiB): a device within this fraction
// of the plan's memory passes.
constexpr double kMemorySlack = 0.95;

// "" when a device of compute capability `device_cc` (major * 10 + minor) with `device_bytes`
// of memory can run a plan made for `plan_cc` / `plan_bytes` (0: the plan does not say);
// otherwise one line saying why.
inline std::string device_mismatch(int plan_cc, int64_t plan_bytes, const std::string& device,
                                   int device_cc, int64_t device_bytes) {
  auto cc = [](int c) { return std::to_string(c / 10) + "." + std::to_string(c % 10); };
  if (plan_cc > 0 && device_cc != plan_cc)
    return "the plan is for a GPU of compute capability " + cc(plan_cc) + ", device '" +
           device + "' is " + cc(device_cc) + ": re-plan for it (--target gpu)";
  if (plan_bytes > 0 && static_cast<double>(device_bytes) < kMemorySlack * plan_bytes)
    return "the plan is for a GPU with " + std::to_string(plan_bytes >> 20) + " MiB, device '" +
           device + "' has " + std::to_string(device_bytes >> 20) +
           " MiB: re-plan for it (--target gpu)";
  return "";
}

}  // namespace planner
