// The cores this process is granted: its affinity mask (what the calling thread may run on;
// `taskset`, a container's cpuset) and its cgroup CPU quota (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us / cpu.cfs_period_us: a container limited to 1.5 CPUs gets 2 threads' worth
// of time slices, so 2 cores). What the executor compares a schedule's cores with
// (choice.h); `planner target detect` reports the same from Python.
#pragma once
#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace planner {

inline int affinity_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return 1 << 30;
  return CPU_COUNT(&mask);
}

// The quota in whole cores (rounded up), or 1 << 30 when there is none or it cannot be read.
inline int quota_cores() {
  constexpr int kNone = 1 << 30;
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    // "0::/path" (v2) or "N:cpu,cpuacct:/path" (v1)
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    double quota = -1, period = -1;
    if (controllers.empty()) {
      std::ifstream max("/sys/fs/cgroup" + path + "/cpu.max");
      std::string q;
      if (max >> q >> period && q != "max") quota = std::atof(q.c_str());
    } else if ((',' + controllers + ',').find(",cpu,") != std::string::npos) {
      std::ifstream q("/sys/fs/cgroup/" + controllers + path + "/cpu.cfs_quota_us");
      std::ifstream p("/sys/fs/cgroup/" + controllers + path + "/cpu.cfs_period_us");
      if (!(q >> quota) || !(p >> period)) quota = -1;
    }
    if (quota > 0 && period > 0) return static_cast<int>(std::ceil(quota / period));
  }
  return kNone;
}

}  // namespace planner
