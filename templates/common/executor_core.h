// What every backend's executor shares: the loaded schedule, which required tensors were
// loaded, per-op stats, and the step protocol: a step refuses to start before the parameters
// are loaded, and one step is in flight at a time, run on the calling thread (step) or on a
// worker (start_async / join_async, seed 004). A backend's Executor derives from it and runs
// the ops (run_step).
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loader.h"
#include "runtime.h"

namespace planner {

struct OpStats {
  double seconds = 0;  // summed over calls
  int64_t calls = 0;
};

// "'a', 'b', ... (n in all)": names for an error message.
std::string name_list(const std::vector<std::string>& names);
// Tensor `id` of the schedule as a kernel factory sees it.
TensorRef tensor_ref(const Schedule& s, int id);
// Op `op`'s inputs and outputs as its kernel factory sees them.
void op_tensors(const Schedule& s, const OpSpec& op, std::vector<TensorRef>* in,
                std::vector<TensorRef>* out);

// Fork: a child fork()ed from a process that loaded this runtime has only the forking thread.
// The parent's lane threads and async step threads are gone; the forking thread's libgomp pool
// is let go just before the fork where it can be (executor.cpp), else the child's copy of it
// names workers that stayed in the parent and a team started from it would wait for them
// forever, while a thread made in the child starts a pool of its own. So a CPU executor the child inherited runs every op one at a time, each on
// its planned team (the kernels made in the parent, the bits of the serial reference the lanes
// match), on a thread the child made (run_off_inherited_pool); one made in the child runs
// as in any process. An executor whose lock a thread held at the fork (a step, a load, a
// step_async in flight) is torn there: refused in one line. The CUDA executor cannot run in a
// forked child (CUDA forbids it): refused in one line naming the spawn start method.
//
// fork_generation(): 0 in a process never forked since the runtime loaded, +1 at each fork in
// the child. forked_child(): it is not 0.
int fork_generation();
bool forked_child();
// Runs f on the calling thread, or in a forked child on the child's worker thread, made by the
// first such call (waited for, one call at a time; f's exception rethrown): any OpenMP team f
// starts gets a pool of the child's own, kept from call to call.
void run_off_inherited_pool(const std::function<void()>& f);

class ExecutorCore {
 public:
  ExecutorCore(const std::string& schedule_path, int backend, const Concrete* concrete = nullptr);
  ExecutorCore(const ExecutorCore&) = delete;
  ExecutorCore& operator=(const ExecutorCore&) = delete;
  virtual ~ExecutorCore();

  const Schedule& schedule() const { return loaded_.get(); }
  int tensor_index(const std::string& name) const { return loaded_.tensor_index(name); }
  const TensorSpec& tensor(int id) const { return schedule().tensors[id]; }
  Shape shape(int id) const;

  // Parameters and state (roles param, state) must be loaded before the first step; optimizer
  // state may be left out: it starts at zero (every optimizer's initial value), like the arena.
  static bool required(const TensorSpec& t) {
    return (t.role == PARAM || t.role == STATE) && t.updates < 0;
  }
  void mark_loaded(int id) { written_[id] = 1; }
  bool is_loaded(int id) const { return written_[id] != 0; }
  // Names of required tensors not loaded yet, in schedule order.
  std::vector<std::string> missing(const std::vector<int>& also_given = {}) const;
  // Throws naming them (step and step_async call it before running anything).
  void check_loaded() const;

  // The op that writes over tensor `id`'s bytes later in the step than the op that writes it
  // (the memory plan reuses them, or places a scratch area there), or -1: a tensor that op
  // overwrites cannot be returned after the step.
  int overwritten_by(int id) const;

  // Run every op; throws naming the op on failure. The feeds are checked first (check_feeds).
  void step();
  // start_async runs a step on a worker thread and returns at once; join_async waits for it
  // and rethrows its error. step() or start_async() while one is in flight throws.
  void start_async();
  void join_async();
  bool in_flight() const { return in_flight_; }
  // The tensors the step in flight returns (set by the bindings with start_async).
  std::vector<int> pending_outputs;

  const std::vector<OpStats>& op_stats() const { return stats_; }
  int64_t steps() const { return steps_; }
  void reset_stats();

  // Held by every binding call that reads or writes the arena (step, load_params, params):
  // one executor runs one step at a time, whichever thread calls it. Executors sharing one
  // arena (share_arena_lock) share it: one call of any of them at a time.
  std::mutex& mutex() const { return lock_->mu; }
  // This executor runs on `other`'s arena (the CPU executor's arena_of: a range plan's shapes,
  // planner/torch/shapes.py): from now on the two take turns (one lock), no step or arena
  // access of one starts while a step of the other is in flight (arena_in_flight), and this
  // one counts the tensors `other` has loaded as loaded (the bytes are the same). Made before
  // any call of this one.
  void share_arena_lock(const ExecutorCore& other) {
    lock_ = other.lock_;
    written_ = other.written_;
  }
  // A step of this executor or of one sharing its arena is in flight (step_async).
  bool arena_in_flight() const { return lock_->flying.load() > 0; }
  // Throws, one line naming the plan, where this process cannot run the executor: a forked
  // child's copy of one whose lock was held at the fork (torn), or a CUDA executor in a forked
  // child. Every binding calls it before taking the lock.
  void check_forked() const;
  // Made before this process's last fork (the child's copy of the parent's executor): its
  // lanes' threads are not in this process, nor is a step_async's.
  bool inherited() const { return generation_ != fork_generation(); }
  // In the child, at the fork, for every live executor (one thread runs, nothing else does).
  void after_fork_in_child();

 protected:
  // One step of every op (the backend's); counts it in steps_ and its ops in stats_.
  virtual void run_step() = 0;
  // Throws naming the op for a feed value an op would refuse while running (a label out of
  // range), before any op runs: a step that fails there changed no state. The backend's.
  virtual void check_feeds() {}
  // Waits for a step in flight: a derived executor calls it first in its destructor, before
  // the members the step uses are gone.
  void finish_async();

  LoadedSchedule loaded_;
  std::vector<OpStats> stats_;
  int64_t steps_ = 0;

 private:
  // The lock of the executors on one arena (one per executor unless shared), with their
  // steps in flight and, in a forked child, whether a thread that is not there held it.
  struct ArenaLock {
    std::mutex mu;
    std::atomic<int> flying{0};
    int checked_in = 0;   // the fork generation its tear was last checked in
    bool torn = false;
  };
  std::shared_ptr<ArenaLock> lock_ = std::make_shared<ArenaLock>();
  int backend_;
  int generation_;       // fork_generation() when made
  bool torn_ = false;    // its lock was held at this process's fork (after_fork_in_child)
  std::vector<char> written_;  // per tensor: written by load_params
  std::thread async_;
  std::exception_ptr async_error_;
  bool in_flight_ = false;
};

// check_feeds of a step or an evaluation: each op's check of the values it is fed (a kernel's
// check_feeds(run, fed): a label out of range), before any op runs, where fed[id] says whether
// tensor id holds its value then (a feed, a parameter or state, or a view of one). Throws
// StepError naming the op.
template <class Kernels, class Run>
void check_fed_values(const LoadedSchedule& loaded, const Kernels& kernels, const Run& r) {
  const Schedule& s = loaded.get();
  std::vector<char> fed(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) {
    int role = s.tensors[loaded.root(i)].role;
    fed[i] = role == INPUT || role == LABEL || role == PARAM || role == STATE;
  }
  for (int k = 0; k < s.num_ops; ++k) {
    try {
      kernels[k]->check_feeds(r, fed);
    } catch (const std::exception& e) {
      throw StepError(op_failure(s.ops[k], e.what()));
    }
  }
}

}  // namespace planner
