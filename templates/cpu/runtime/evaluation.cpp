#include "evaluation.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include "executor_core.h"
#include "lanes.h"

namespace planner {

namespace {

// Restores the calling thread's OpenMP team size however the ops end.
struct SavedThreads {
  int threads = omp_get_max_threads();
  ~SavedThreads() { omp_set_num_threads(threads); }
};

}  // namespace

Evaluation::Evaluation(const LoadedSchedule& training, char* training_arena,
                       const dnnl::engine& engine, const Concrete* concrete)
    : loaded_(training, "planner_evaluation_schedule", concrete),
      arena_(loaded_.get().arena_bytes),
      engine_(engine),
      stream_(engine) {
  const Schedule& s = loaded_.get();
  if (s.host_bytes > 0)
    throw std::runtime_error("the evaluation schedule offloads; the CPU executor runs none that "
                             "does");
  ptr_.resize(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) {
    const TensorSpec& t = s.tensors[i];
    ptr_[i] = (t.store == TRAINING_ARENA ? training_arena : arena_.base()) + t.offset;
  }
  // In a forked child, made on the child's worker thread (executor_core.h, "Fork").
  run_off_inherited_pool([this, &s] { create_kernels(s); });
}

void Evaluation::create_kernels(const Schedule& s) {
  SavedThreads saved;
  kernels_.resize(s.num_ops);
  scratch_.assign(s.num_ops, nullptr);
  overflow_.resize(s.num_ops);
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    if (registry().find(op.op) == registry().end())
      throw std::runtime_error(op_label(op) + ": no CPU kernel for this op");
    std::vector<TensorRef> in, out;
    op_tensors(s, op, &in, &out);
    omp_set_num_threads(kernel_threads(op));
    try {
      Node node{&op, in, out, Attrs(op.attrs), engine_, kernel_threads(op)};
      kernels_[k] = registry().at(op.op)(node);
    } catch (const std::exception& e) {
      throw std::runtime_error(op_failure(op, e.what()));
    }
    // Its planned scratch area when that holds what the kernel asks for, else its own block.
    int64_t need = static_cast<int64_t>(kernels_[k]->scratch_bytes());
    if (need <= std::max<int64_t>(op.scratch_bytes, 0)) {
      scratch_[k] = op.scratch_bytes > 0 ? arena_.base() + op.scratch_offset : nullptr;
    } else {
      overflow_[k] = std::make_unique<Arena>(need);
      scratch_[k] = overflow_[k]->base();
    }
  }
}

void Evaluation::check_feeds() {
  check_fed_values(loaded_, kernels_, Run{ptr_.data(), nullptr, stream_.get(), 1});
}

void Evaluation::run(const Collective* collective) {
  // In a forked child, on the child's worker thread (executor_core.h, "Fork").
  run_off_inherited_pool([this, collective] { run_ops(collective); });
}

void Evaluation::run_ops(const Collective* collective) {
  const Schedule& s = schedule();
  SavedThreads saved;
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    omp_set_num_threads(kernel_threads(op));
    Run r{ptr_.data(), scratch_[k], stream_.get(), kernel_threads(op), collective};
    try {
      kernels_[k]->run(r);
    } catch (const std::exception& e) {
      throw StepError(op_failure(op, e.what()));
    }
  }
  stream_.wait();
}

}  // namespace planner
