// A training plan's evaluation on the CPU (Plan.evaluation, planner/evaluation.py): the
// evaluation schedule the same library exports (planner_evaluation_schedule), its kernels
// created at the first evaluate, run in plan order on the calling thread (in a forked child on
// the child's worker thread: executor_core.h, "Fork"), each op with its planned team size. Its
// activations live in an arena of their own; its parameters and states point at the training
// arena's bytes (store TRAINING_ARENA): an evaluation reads what the steps trained, and writes
// nothing of the step's. A ZeRO-3 plan's evaluation gathers the parameter shards (AllGather)
// on the step's process group, into its own arena.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernel.h"
#include "loader.h"

namespace planner {

class Evaluation {
 public:
  // `training`: the executor's schedule; `training_arena`: the base of its arena. Throws when
  // the library exports no evaluation schedule, or one that does not check.
  // `concrete`: a range plan's evaluation schedule at smaller shapes (loader.h).
  Evaluation(const LoadedSchedule& training, char* training_arena, const dnnl::engine& engine,
             const Concrete* concrete = nullptr);

  const Schedule& schedule() const { return loaded_.get(); }
  int tensor_index(const std::string& name) const { return loaded_.tensor_index(name); }
  const TensorSpec& tensor(int id) const { return schedule().tensors[id]; }
  char* data(int id) const { return ptr_[id]; }
  int64_t arena_bytes() const { return arena_.bytes(); }
  // Throws StepError naming the op for a feed value an op would refuse (a label out of
  // range), before any op runs.
  void check_feeds();
  // Every op once, in plan order; throws StepError naming the op. `collective`: the
  // executor's process group, for a ZeRO-3 evaluation's all-gathers.
  void run(const Collective* collective = nullptr);

 private:
  LoadedSchedule loaded_;
  Arena arena_;
  const dnnl::engine& engine_;
  dnnl::stream stream_;
  std::vector<KernelPtr> kernels_;
  std::vector<char*> ptr_;      // every tensor's bytes: its own arena, or the training arena
  std::vector<char*> scratch_;  // every op's scratch area
  std::vector<std::unique_ptr<Arena>> overflow_;

  void create_kernels(const Schedule& s);
  void run_ops(const Collective* collective);
};

}  // namespace planner
