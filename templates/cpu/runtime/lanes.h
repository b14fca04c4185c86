// Lanes: the host threads that run a plan's ops concurrently, as the plan placed them.
//
// One host thread per lane (OpSpec::lane, the plan's). Each lane runs its ops in plan order;
// an op starts once every op it waits for (OpSpec waits: the plan's happens-before edges) has
// finished in this step. Those two are every ordering the executor enforces, and exactly what
// `planner verify` checks (planner/verify/order.py).
// Its OpenMP team has the planned size and its threads are pinned to the planned logical
// CPUs (re-pinned only when one of its threads is on another CPU: OpenMP keeps a lane's
// threads, numbered alike, from one parallel region to the next). Ops of one parallel-loop
// group run as one loop over the group's threads, one member per iteration: the members ready
// when the first one is (a member that is not yet runs on its own after them).
//
// Deadlock-free by construction: every wait names an earlier op in plan order and every lane
// runs its ops in plan order, so the earliest unfinished op never waits.
//
// Waiting blocks on a condition variable rather than spinning, so a waiting lane leaves its
// cores to the ops that run. Each lane has its own, woken only when the op it waits for can
// start (or a step begins), and the caller of `step` only when the step ends: a finishing op
// wakes no thread that has nothing to do (with one condition variable for all, every finish
// woke every lane and the caller, which then took cores from the running teams).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <sched.h>
#include <string>
#include <thread>
#include <vector>

#include "busy_host.h"
#include "schedule.h"

namespace planner {

// The threads one op's kernel is created for and runs on: its planned OpenMP team, except in
// a parallel-loop group, whose team runs the members one per thread. A member's kernel must be
// made for one thread: oneDNN sizes its work split (and the barriers between a backward-weights
// convolution's reduction phases) for the team it was created under, and a kernel made for two
// threads that runs nested inside the group's loop, on one, spins at such a barrier forever.
inline int kernel_threads(const OpSpec& op) { return op.group >= 0 ? 1 : op.threads; }

class Lanes {
 public:
  // run(k): run op k on the calling lane thread (its team size already set); create(k): make
  // op k's kernel there at load. Both may throw; the first error of a step is rethrown by
  // `step` naming the op.
  using OpFn = std::function<void(int)>;

  Lanes(const Schedule& s, OpFn create, OpFn run, int jitter_us);
  ~Lanes();
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  // Runs one step on every lane; returns when every op has finished. A step that makes no
  // progress for `watchdog_seconds` throws naming the ops still waited on (the executor is
  // then unusable).
  void step(double watchdog_seconds);
  int count() const { return static_cast<int>(ops_.size()); }
  bool broken() const { return broken_; }
  // How many times a lane pinned its team's threads, over all steps (read between steps).
  int64_t pinnings() const;
  // Where the plan's logical CPUs run in this process: plan CPU c on cpu_map[c] (a rank that
  // shares its host runs on its own share, planner/target/shares.py), and the threads of
  // lanes whose ops name no CPUs (the comm lane) on `loose`. Set between steps; throws when
  // the map misses a CPU of the plan.
  void place(std::vector<int> cpu_map, std::vector<int> loose);
  // Whether teams are pinned to the plan's CPUs (the default) or left where the OS puts them,
  // anywhere in the process's affinity at load. On a machine shared with other busy
  // processes a pinned thread waits for its one CPU, and a team's join for the last of them:
  // ViT's 2-thread step went from 104 to 37 ms unpinned at load average 27 (bench/RESULTS.md,
  // issue 25). Set between steps; pinned teams are let go at their next op.
  void set_pinning(bool on);
  // Each lane's thread lets its OpenMP team's workers go (omp_pause_resource_all), between
  // steps, while another schedule runs. libgomp spins only 100 times instead of 300,000 at its
  // barriers once the process holds more of its threads than CPUs: the idle teams of a
  // schedule not running would make every team of the running one wake its workers from
  // sleep at each op (mobilenet_v2's main schedule 23 -> 37 ms after a spell on the variants,
  // bench/RESULTS.md). The next step of these lanes starts new teams (and pins them again).
  void release_teams();
  // Whether two lanes run ops on one CPU: a lane's team borrows a CPU where another lane's
  // thread runs its own ops (executor.cpp's release_callers_team says why it matters).
  bool shares_cpus() const { return shares_cpus_; }
  // The seconds the lanes' threads spent runnable but not running in the last step, summed
  // over lanes (busy_host.h); -1 where the kernel keeps no such count.
  double waited() const { return waited_; }

 private:
  int64_t run_delay_ns() const;  // summed over the lanes' threads; -1 unreadable
  void lane_main(int lane);
  void shutdown();
  bool waits_within(int k, const std::vector<int>& mine, size_t from, size_t to) const;
  void wait_for(int lane, int op, std::unique_lock<std::mutex>& lock);
  bool ready_now(int op) const;
  void pin(int lane, int op);
  void finish(int op, std::exception_ptr error);

  const Schedule& s_;
  OpFn create_, run_;
  int jitter_us_;
  std::vector<std::vector<int>> ops_;      // per lane, op indices in plan order
  std::vector<std::vector<int>> pinned_;   // per lane: the CPU each thread of its pool is on
  std::vector<int64_t> pinnings_;          // per lane: its pinnings so far
  std::vector<int> cpu_map_;               // plan CPU -> this process's CPU (empty: same id)
  std::vector<int> loose_;                 // CPUs of lanes without CPUs (empty: the OS's)
  std::vector<char> loose_pinned_;         // per lane: its own thread is on loose_
  bool pinning_ = true;
  bool shares_cpus_ = false;
  cpu_set_t process_mask_;                 // the process's affinity at load (unpinned teams)
  std::vector<std::vector<int>> mapped_;   // per lane: an op's CPUs through cpu_map_
  int64_t release_ = 0;                    // release_teams() calls so far
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  std::vector<std::condition_variable> lane_cv_;  // per lane: its op may start, or a new step
  std::vector<int> waiting_on_;                   // per lane: the op it blocks on, or -1
  std::condition_variable step_cv_;               // the caller of step(): the step ended
  std::condition_variable load_cv_;               // the constructor: every lane made its kernels
  std::vector<int64_t> done_;              // per op: the last step it finished in
  int64_t epoch_ = 0;                      // the step being run (0: loading)
  int64_t started_ = 0;                    // lanes wait for epoch_ > the step they ran last
  int remaining_ = 0;                      // ops of this step not yet finished
  int created_ = 0;                        // lanes done creating their kernels
  bool stop_ = false;
  bool broken_ = false;
  std::exception_ptr error_;
  int error_op_ = -1;  // the op that failed the step, -1 while none did
  std::vector<std::unique_ptr<RunDelay>> delays_;  // per lane: its thread's, made there
  double waited_ = -1.0;
};

}  // namespace planner
