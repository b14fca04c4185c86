#include "lanes.h"

#include "loader.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>

namespace planner {

Lanes::Lanes(const Schedule& s, OpFn create, OpFn run, int jitter_us)
    : s_(s), create_(std::move(create)), run_(std::move(run)), jitter_us_(jitter_us) {
  CPU_ZERO(&process_mask_);
  sched_getaffinity(0, sizeof(process_mask_), &process_mask_);
  ops_.resize(s.num_lanes);
  pinned_.resize(s.num_lanes);
  pinnings_.assign(s.num_lanes, 0);
  loose_pinned_.assign(s.num_lanes, 0);
  lane_cv_ = std::vector<std::condition_variable>(s.num_lanes);
  waiting_on_.assign(s.num_lanes, -1);
  delays_.resize(s.num_lanes);
  for (int k = 0; k < s.num_ops; ++k) ops_[s.ops[k].lane].push_back(k);
  std::vector<int> lane_of_cpu;
  for (int k = 0; k < s.num_ops; ++k)
    for (int c = 0; c < s.ops[k].num_cpus; ++c) {
      const int cpu = s.cpus[s.ops[k].first_cpu + c];
      if (cpu < 0) continue;
      if (cpu >= static_cast<int>(lane_of_cpu.size())) lane_of_cpu.resize(cpu + 1, -1);
      int& owner = lane_of_cpu[cpu];
      if (owner >= 0 && owner != s.ops[k].lane) shares_cpus_ = true;
      owner = s.ops[k].lane;
    }
  done_.assign(s.num_ops, -1);
  for (int lane = 0; lane < s.num_lanes; ++lane)
    threads_.emplace_back([this, lane] { lane_main(lane); });
  std::unique_lock<std::mutex> lock(mu_);
  load_cv_.wait(lock, [&] { return created_ == s_.num_lanes; });
  if (error_) {
    std::exception_ptr e = error_;
    lock.unlock();
    shutdown();  // join the lanes before the error leaves the constructor
    std::rethrow_exception(e);
  }
}

Lanes::~Lanes() { shutdown(); }

void Lanes::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  for (std::condition_variable& cv : lane_cv_) cv.notify_all();
  // A lane stuck in a kernel that never returns keeps this waiting: its memory stays in use.
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

int64_t Lanes::pinnings() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t all = 0;
  for (int64_t p : pinnings_) all += p;
  return all;
}

void Lanes::place(std::vector<int> cpu_map, std::vector<int> loose) {
  for (int k = 0; k < s_.num_ops; ++k)
    for (int c = 0; c < s_.ops[k].num_cpus; ++c)
      if (s_.cpus[s_.ops[k].first_cpu + c] >= static_cast<int>(cpu_map.size()))
        throw std::runtime_error(std::string("op '") + s_.ops[k].name + "' runs on CPU " +
                                 std::to_string(s_.cpus[s_.ops[k].first_cpu + c]) +
                                 ", which the placement does not map");
  std::lock_guard<std::mutex> lock(mu_);
  int widest = 0;
  for (int k = 0; k < s_.num_ops; ++k) widest = std::max(widest, s_.ops[k].num_cpus);
  mapped_.assign(s_.num_lanes, std::vector<int>(widest));
  cpu_map_ = std::move(cpu_map);
  loose_ = std::move(loose);
  // Every team re-pins at its next op, every comm thread once.
  for (std::vector<int>& p : pinned_) p.clear();
  std::fill(loose_pinned_.begin(), loose_pinned_.end(), 0);
}

// Sets the calling thread's affinity to `cpus` (ids this host has; else leaves it to the OS).
static void pin_self(const int* cpus, int n) {
  static const long host = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int t = 0; t < n; ++t) {
    if (cpus[t] < 0 || cpus[t] >= host || cpus[t] >= CPU_SETSIZE) return;
    CPU_SET(cpus[t], &set);
  }
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

int64_t Lanes::run_delay_ns() const {
  int64_t sum = 0;
  for (const auto& d : delays_) {
    const int64_t ns = d ? d->now() : -1;
    if (ns < 0) return -1;
    sum += ns;
  }
  return sum;
}

void Lanes::release_teams() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    release_ += 1;
  }
  for (std::condition_variable& cv : lane_cv_) cv.notify_all();
}

void Lanes::set_pinning(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  pinning_ = on;
}

void Lanes::pin(int lane, int op) {
  const OpSpec& o = s_.ops[op];
  const int n = o.num_cpus;
  if (!pinning_) {
    std::vector<int>& pinned = pinned_[lane];
    if (pinned.empty()) return;
    // Let the team pinned so far go: every thread back to the process's CPUs.
    const int team = static_cast<int>(pinned.size());
    pinned.clear();
#pragma omp parallel num_threads(team)
    pthread_setaffinity_np(pthread_self(), sizeof(process_mask_), &process_mask_);
    return;
  }
  if (n == 0 && !loose_.empty() && !loose_pinned_[lane]) {
    // A lane without CPUs (the comm lane) waits on the network: anywhere in the rank's share.
    pin_self(loose_.data(), static_cast<int>(loose_.size()));
    loose_pinned_[lane] = 1;
  }
  const int* cpus = s_.cpus + o.first_cpu;
  if (!cpu_map_.empty()) {  // the lane's buffer, sized by place(): a step allocates nothing
    std::vector<int>& mapped = mapped_[lane];
    for (int t = 0; t < n; ++t) mapped[t] = cpu_map_[cpus[t]];
    cpus = mapped.data();
  }
  std::vector<int>& pinned = pinned_[lane];
  // Only when a thread of the team is not on its CPU yet: a lane whose ops go from one
  // thread to two and back re-pins nothing after the first time (each pinning is a parallel
  // region of its own plus an affinity call per thread: ~85 us per such op on a 2-core VM).
  bool same = n <= static_cast<int>(pinned.size());
  for (int t = 0; same && t < n; ++t) same = pinned[t] == cpus[t];
  if (n == 0 || same) return;
  static const long host = sysconf(_SC_NPROCESSORS_ONLN);
  for (int t = 0; t < n; ++t)
    if (cpus[t] < 0 || cpus[t] >= host) return;  // a plan for another machine: the OS places
  if (static_cast<int>(pinned.size()) < n) pinned.resize(n, -1);
  std::copy(cpus, cpus + n, pinned.begin());
  pinnings_[lane] += 1;
#pragma omp parallel num_threads(n)
  {
    int t = omp_get_thread_num();
    if (t < n) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpus[t], &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
  }
}

// Whether every op `op` waits for has finished in this step (mu_ held).
bool Lanes::ready_now(int op) const {
  const OpSpec& o = s_.ops[op];
  for (int w = 0; w < o.num_waits; ++w)
    if (done_[s_.waits[o.first_wait + w]] != epoch_) return false;
  return true;
}

// Blocks lane `lane` until op `op` may start (or the step failed, or the lanes stop); `lock`
// holds mu_ throughout but while blocked.
void Lanes::wait_for(int lane, int op, std::unique_lock<std::mutex>& lock) {
  if (error_ || stop_ || ready_now(op)) return;
  waiting_on_[lane] = op;
  lane_cv_[lane].wait(lock, [&] { return error_ || stop_ || ready_now(op); });
  waiting_on_[lane] = -1;
}

void Lanes::finish(int op, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  done_[op] = epoch_;
  remaining_ -= 1;
  bool failed = error && !error_;
  if (failed) {
    error_ = error;
    error_op_ = op;
  }
  // Wake the lanes this finish lets go (all of them when the step failed: they skip the rest).
  for (size_t l = 0; l < waiting_on_.size(); ++l)
    if (waiting_on_[l] >= 0 && (failed || ready_now(waiting_on_[l]))) lane_cv_[l].notify_one();
  if (remaining_ == 0 || failed) step_cv_.notify_one();
}

// Whether op `k` waits on one of mine[from, to) (then it cannot share their loop).
bool Lanes::waits_within(int k, const std::vector<int>& mine, size_t from, size_t to) const {
  const OpSpec& o = s_.ops[k];
  for (int w = 0; w < o.num_waits; ++w)
    for (size_t j = from; j < to; ++j)
      if (s_.waits[o.first_wait + w] == mine[j]) return true;
  return false;
}

void Lanes::lane_main(int lane) {
  const std::vector<int>& mine = ops_[lane];
  // Load: this lane's kernels, created on the thread that will run them.
  auto delay = std::make_unique<RunDelay>();  // opened here: this thread's own count
  std::exception_ptr failed;
  for (int k : mine) {
    try {
      omp_set_num_threads(kernel_threads(s_.ops[k]));
      create_(k);
    } catch (...) {
      failed = std::current_exception();
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed && !error_) error_ = failed;
    delays_[lane] = std::move(delay);
    created_ += 1;
  }
  load_cv_.notify_one();
  std::minstd_rand rng(1234567u + static_cast<unsigned>(lane));
  int64_t seen = 0, released = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      lane_cv_[lane].wait(lock, [&] { return stop_ || epoch_ > seen || release_ > released; });
      if (stop_) return;
      if (epoch_ <= seen) {  // between steps: let the team go (release_teams)
        released = release_;
        pinned_[lane].clear();  // a new team's threads are pinned afresh
        lock.unlock();
        omp_pause_resource_all(omp_pause_soft);
        continue;
      }
      seen = epoch_;
      released = release_;  // running again: a release still pending is moot
    }
    for (size_t i = 0; i < mine.size();) {
      int k = mine[i];
      // A group: the consecutive ops of this lane in one parallel-loop group.
      size_t end = i + 1;
      if (s_.ops[k].group >= 0)
        while (end < mine.size() && s_.ops[mine[end]].group == s_.ops[k].group &&
               !waits_within(mine[end], mine, i, end))
          ++end;
      // Block only on the first member's waits (what keeps the lanes deadlock-free: the
      // earliest unfinished op can always run); the others join the loop if they are ready
      // now, else run later on their own. A member may wait, through another lane, on an op
      // that waits on the first one.
      bool failed_before;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wait_for(lane, k, lock);
        size_t ready = i + 1;
        while (ready < end && ready_now(mine[ready])) ++ready;
        end = ready;
        failed_before = static_cast<bool>(error_) || stop_;
      }
      if (failed_before) {  // an op of this step failed: skip the rest, finishing them
        for (size_t j = i; j < end; ++j) finish(mine[j], nullptr);
        i = end;
        continue;
      }
      if (jitter_us_ > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % jitter_us_));
      pin(lane, k);
      if (end - i == 1) {
        std::exception_ptr error;
        try {
          omp_set_num_threads(kernel_threads(s_.ops[k]));
          run_(k);
        } catch (...) {
          error = std::current_exception();
        }
        finish(k, error);
      } else {
        // Members are independent (the scheduler groups ops ready together: of one
        // signature, or a co-run group of any): one loop over them, each member on one
        // thread of the group's team, taken in plan order as threads free up.
        const int members = static_cast<int>(end - i);
        std::vector<std::exception_ptr> errors(members);
        // Each member in a team of its own (one thread): a barrier its kernel reaches
        // outside a parallel region of its own binds to the innermost enclosing team, and
        // in the group's that waits for a thread that runs another member, forever
        // (oneDNN's plain-layout batch norm, run as one thread: its omp barrier).
#pragma omp parallel for num_threads(s_.ops[k].threads) schedule(dynamic, 1)
        for (int m = 0; m < members; ++m) {
#pragma omp parallel num_threads(1)
          {
            try {
              run_(mine[i + m]);
            } catch (...) {
              errors[m] = std::current_exception();
            }
          }
        }
        for (int m = 0; m < members; ++m) finish(mine[i + m], errors[m]);
      }
      i = end;
    }
  }
}

void Lanes::step(double watchdog_seconds) {
  if (broken_) throw std::runtime_error("a previous step stalled; create a new executor");
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t delay_before = run_delay_ns();
  epoch_ += 1;
  remaining_ = s_.num_ops;
  error_ = nullptr;
  error_op_ = -1;
  for (std::condition_variable& cv : lane_cv_) cv.notify_one();
  auto last = std::chrono::steady_clock::now();
  int seen = remaining_;
  while (remaining_ > 0) {
    step_cv_.wait_for(lock, std::chrono::milliseconds(200));
    auto now = std::chrono::steady_clock::now();
    if (remaining_ != seen) {
      seen = remaining_;
      last = now;
    } else if (std::chrono::duration<double>(now - last).count() > watchdog_seconds) {
      broken_ = true;
      std::string waiting;
      int named = 0;
      for (int k = 0; k < s_.num_ops && named < 5; ++k) {
        if (done_[k] == epoch_) continue;
        waiting += std::string(named ? ", " : "") + "'" + s_.ops[k].name + "'";
        ++named;
      }
      throw std::runtime_error("the step stalled: no op finished in " +
                               std::to_string(watchdog_seconds) + " s; ops not finished: " +
                               waiting);
    }
  }
  // Read when the last op finished: a lane may still be on its way back to wait, its run
  // delay from here on is the next step's.
  const int64_t delay_after = run_delay_ns();
  waited_ = delay_before < 0 || delay_after < 0 ? -1.0 : (delay_after - delay_before) * 1e-9;
  if (error_) {
    std::exception_ptr e = error_;
    int op = error_op_;
    lock.unlock();
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      throw std::runtime_error(op_failure(s_.ops[op], ex.what()));
    }
  }
}

}  // namespace planner
