#include <Python.h>

#include "executor_core.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <new>
#include <stdexcept>

namespace planner {

namespace {

// A thread made in a forked child that runs what run_off_inherited_pool is given, one call at
// a time, and keeps its OpenMP pool between calls (a thread made per call cost a step of a
// small model 0.25 ms: its new team's threads made and joined each time).
class ChildWorker {
 public:
  ChildWorker() : thread_([this] { loop(); }) {}

  void run(const std::function<void()>& f) {
    if (std::this_thread::get_id() == thread_.get_id()) return f();  // called from a job
    std::lock_guard<std::mutex> one(callers_);
    std::unique_lock<std::mutex> lock(mu_);
    job_ = &f;
    error_ = nullptr;
    work_cv_.notify_one();
    done_cv_.wait(lock, [this] { return job_ == nullptr; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return job_ != nullptr; });
      lock.unlock();
      std::exception_ptr error;
      try {
        (*job_)();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      job_ = nullptr;
      done_cv_.notify_all();
    }
  }

  std::mutex callers_;  // one call at a time
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void()>* job_ = nullptr;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the rest is made
};

// The executors alive in this process, for the fork's child handler, and the child's worker.
// Never freed: an executor may be destroyed after the library's statics are (Python frees the
// last ones at its end), and a worker's thread runs to the process's end.
struct Live {
  std::mutex mu;
  std::vector<ExecutorCore*> executors;
  ChildWorker* worker = nullptr;  // made by the first call in a forked child
};
Live& live() {
  static Live* l = new Live;
  return *l;
}

std::atomic<int> generation{0};

// Registered when the library loads, before any executor or team exists: a fork from any
// thread, by Python (os.fork, multiprocessing) or by C, is seen. The registry's lock is held
// across the fork, so the child's list is whole; the child marks each executor it inherits
// (after_fork_in_child) and lets the parent's worker go (its thread stayed in the parent).
// (The CPU runtime's own handler lets the forking thread's OpenMP pool go: executor.cpp.)
[[maybe_unused]] const int fork_watch = pthread_atfork(
    [] { live().mu.lock(); }, [] { live().mu.unlock(); },
    [] {
      for (ExecutorCore* ex : live().executors) ex->after_fork_in_child();
      live().worker = nullptr;
      generation.fetch_add(1);
      live().mu.unlock();
    });

}  // namespace

int fork_generation() { return generation.load(std::memory_order_relaxed); }

bool forked_child() { return fork_generation() != 0; }

void run_off_inherited_pool(const std::function<void()>& f) {
  if (!forked_child()) return f();
  ChildWorker* worker;
  {
    std::lock_guard<std::mutex> lock(live().mu);
    if (live().worker == nullptr) live().worker = new ChildWorker;
    worker = live().worker;
  }
  worker->run(f);
}

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t k = 0; k < names.size() && k < 5; ++k) out += (k ? ", '" : "'") + names[k] + "'";
  if (names.size() > 5) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

TensorRef tensor_ref(const Schedule& s, int id) {
  const TensorSpec& t = s.tensors[id];
  return TensorRef{id, Shape(t.shape, t.shape + t.rank), t.dtype, t.block};
}

void op_tensors(const Schedule& s, const OpSpec& op, std::vector<TensorRef>* in,
                std::vector<TensorRef>* out) {
  for (int a = 0; a < op.num_inputs; ++a) in->push_back(tensor_ref(s, s.args[op.first_input + a]));
  for (int a = 0; a < op.num_outputs; ++a)
    out->push_back(tensor_ref(s, s.args[op.first_output + a]));
}

ExecutorCore::ExecutorCore(const std::string& schedule_path, int backend,
                           const Concrete* concrete)
    : loaded_(schedule_path, backend, concrete), backend_(backend),
      generation_(fork_generation()) {
  check_forked();
  stats_.assign(schedule().num_ops, OpStats{});
  written_.assign(schedule().num_tensors, 0);
  std::lock_guard<std::mutex> lock(live().mu);
  live().executors.push_back(this);
}

ExecutorCore::~ExecutorCore() {
  finish_async();
  std::lock_guard<std::mutex> lock(live().mu);
  auto& all = live().executors;
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
}

void ExecutorCore::after_fork_in_child() {
  // Executors sharing an arena share one lock: the first of them checked here re-makes it
  // and says for all whether it was held (their arena may be half written alike).
  // (The child's generation: counted up once every executor is marked.)
  ArenaLock& l = *lock_;
  const int child = fork_generation() + 1;
  if (l.checked_in != child) {
    l.checked_in = child;
    l.torn = !l.mu.try_lock();
    if (l.torn)
      new (&l.mu) std::mutex;  // held by a thread that is not in this process
    else
      l.mu.unlock();
    // A step_async's thread of any of them, not in this process: their arena is torn too.
    l.torn = l.torn || l.flying.load() > 0;
  }
  torn_ = torn_ || l.torn;
  if (async_.joinable()) {
    // A step_async's thread, not in this process: joining its copy would wait forever.
    torn_ = torn_ || in_flight_;
    new std::thread(std::move(async_));  // never joined nor destroyed here
  }
}

void ExecutorCore::check_forked() const {
  const std::string what = "executor of plan '" + std::string(schedule().name) + "'";
  if (torn_)
    throw std::runtime_error(
        what + ": this process was fork()ed while another thread was using it (a step, a "
        "load or a step_async in flight), so the child's copy of its state may be half "
        "written - fork between its calls, or make the executor in the child");
  if (backend_ == CUDA && forked_child())
    throw std::runtime_error(
        what + ": a CUDA executor cannot run in a forked child process (CUDA does not "
        "survive fork()) - use multiprocessing's 'spawn' start method "
        "(DataLoader(multiprocessing_context='spawn'))");
}

void ExecutorCore::finish_async() {
  if (!async_.joinable()) return;
  // Its sharers step again once it is gone (a step it never waited for ends here).
  struct Landed {
    ExecutorCore* ex;
    ~Landed() {
      if (ex->in_flight_) ex->lock_->flying -= 1;
      ex->in_flight_ = false;
    }
  } landed{this};
  // A data-parallel step's collective takes the GIL (bindings.h define_collective): an
  // executor freed by Python with its step in flight must not hold the GIL while it waits.
  if (Py_IsInitialized() && PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    async_.join();
    Py_END_ALLOW_THREADS
  } else {
    async_.join();
  }
}

Shape ExecutorCore::shape(int id) const {
  const TensorSpec& t = tensor(id);
  return Shape(t.shape, t.shape + t.rank);
}

std::vector<std::string> ExecutorCore::missing(const std::vector<int>& also_given) const {
  std::vector<std::string> out;
  const Schedule& s = schedule();
  for (int i = 0; i < s.num_tensors; ++i) {
    if (!required(s.tensors[i]) || written_[i]) continue;
    if (std::find(also_given.begin(), also_given.end(), i) == also_given.end())
      out.push_back(s.tensors[i].name);
  }
  return out;
}

void ExecutorCore::check_loaded() const {
  const std::vector<std::string> absent = missing();
  if (!absent.empty())
    throw std::runtime_error("parameters not loaded: " + name_list(absent) +
                             "; call load_params first (or create the executor with "
                             "Executor(init=True) to start from the graph's init hints)");
}

void ExecutorCore::step() {
  if (in_flight_)
    throw std::runtime_error("a step is in flight (step_async): wait() for it before step()");
  if (arena_in_flight())
    throw std::runtime_error("a step of an executor sharing this one's arena is in flight "
                             "(step_async): wait() for it before step()");
  check_loaded();
  check_feeds();
  run_step();
}

int ExecutorCore::overwritten_by(int id) const {
  const Schedule& s = schedule();
  const TensorSpec& t = s.tensors[id];
  auto overlaps = [&t](int64_t offset, int64_t bytes) {
    return bytes > 0 && t.nbytes > 0 && offset < t.offset + t.nbytes && t.offset < offset + bytes;
  };
  // Tensors sharing its root share its bytes on purpose (views of it, a parameter's update).
  const int root = loaded_.root(id);
  int written = -1;  // the last op writing it or a view of it
  for (int k = 0; k < s.num_ops; ++k)
    for (int a = s.ops[k].first_output; a < s.ops[k].first_output + s.ops[k].num_outputs; ++a)
      if (loaded_.root(s.args[a]) == root) written = k;
  for (int k = written + 1; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    if (overlaps(op.scratch_offset, op.scratch_bytes)) return k;
    for (int a = op.first_output; a < op.first_output + op.num_outputs; ++a) {
      const TensorSpec& u = s.tensors[s.args[a]];
      if (loaded_.root(s.args[a]) != root && overlaps(u.offset, u.nbytes)) return k;
    }
  }
  return -1;
}

void ExecutorCore::start_async() {
  if (in_flight_) throw std::runtime_error("a step is already in flight: wait() for it first");
  if (arena_in_flight())
    throw std::runtime_error("a step of an executor sharing this one's arena is in flight "
                             "(step_async): wait() for it first");
  check_loaded();
  check_feeds();
  in_flight_ = true;
  lock_->flying += 1;
  async_error_ = nullptr;
  async_ = std::thread([this] {
    try {
      run_step();
    } catch (...) {
      async_error_ = std::current_exception();
    }
  });
}

void ExecutorCore::join_async() {
  if (!in_flight_) throw std::runtime_error("no step in flight: step_async() first");
  async_.join();
  in_flight_ = false;
  lock_->flying -= 1;
  if (async_error_) std::rethrow_exception(async_error_);
}

void ExecutorCore::reset_stats() {
  stats_.assign(schedule().num_ops, OpStats{});
  steps_ = 0;
}

}  // namespace planner
