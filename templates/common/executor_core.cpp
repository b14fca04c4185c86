#include <Python.h>

#include "executor_core.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace planner {

namespace {
std::atomic<bool> forked{false};
// Registered when the library loads, before any executor or team exists: a fork from any
// thread, by Python (os.fork, multiprocessing) or by C, marks the child.
[[maybe_unused]] const int fork_watch = pthread_atfork(nullptr, nullptr, [] { forked.store(true); });
}  // namespace

bool forked_child() { return forked.load(std::memory_order_relaxed); }

void refuse_forked(const std::string& what) {
  if (forked_child())
    throw std::runtime_error(
        what + ": called in a forked child process; the planner's executors cannot run after "
        "fork() (their threads and OpenMP teams stay in the parent) - use multiprocessing's "
        "'spawn' start method (DataLoader(multiprocessing_context='spawn'))");
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
    : loaded_(schedule_path, backend, concrete) {
  refuse_forked("executor of plan '" + std::string(schedule().name) + "'");
  stats_.assign(schedule().num_ops, OpStats{});
  written_.assign(schedule().num_tensors, 0);
}

ExecutorCore::~ExecutorCore() { finish_async(); }

void ExecutorCore::finish_async() {
  if (!async_.joinable()) return;
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
  check_loaded();
  check_feeds();
  in_flight_ = true;
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
  if (async_error_) std::rethrow_exception(async_error_);
}

void ExecutorCore::reset_stats() {
  stats_.assign(schedule().num_ops, OpStats{});
  steps_ = 0;
}

}  // namespace planner
