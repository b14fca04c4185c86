// Loading a schedule library, every backend alike: dlopen it, check the plan-as-data against
// itself before anything is allocated (indices in range, offsets and sizes inside the arena
// without overflow, waits on earlier ops, the backend), and index its tensors by name.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "schedule.h"

namespace planner {

// One concrete shape of a range plan (planner/pipeline/ranges.py): the schedule a library holds
// for the range's largest shapes, run on smaller ones. Per tensor (in schedule order) its
// shape at these shapes, per op (in plan order) its attrs for them; offsets, lanes, threads
// and waits stay the library's. Each tensor must keep its rank and fit the bytes the library
// gives it (the range's), so the arena's layout, checked for the largest, holds.
struct Concrete {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> attrs;
};

// "op 'name' (Type)": how errors name an op.
std::string op_label(const OpSpec& op);

// How a step's error names the op that failed with `what`: "op 'name' (Type): what"; for
// the look-up a torch rule adds to refuse what torch refuses (`NODE/invalid_probabilities`,
// planner/importers/torch/rules_random.py), torch's words, naming NODE.
std::string op_failure(const OpSpec& op, const std::string& what);

class LoadedSchedule {
 public:
  // Throws std::runtime_error naming the library, op or tensor when it is not usable by a
  // runtime of `backend`.
  // With `concrete`, the schedule at those shapes (Concrete), checked as any other.
  LoadedSchedule(const std::string& path, int backend, const Concrete* concrete = nullptr);
  LoadedSchedule(const LoadedSchedule&) = delete;
  LoadedSchedule& operator=(const LoadedSchedule&) = delete;

  // The second schedule the same library may export under `symbol` (a training plan's
  // evaluation schedule, planner_evaluation_schedule), checked as this one is; a tensor of
  // store TRAINING_ARENA must be `training`'s tensor of the same name, offset and bytes.
  // Throws when the library exports none.
  LoadedSchedule(const LoadedSchedule& training, const char* symbol,
                 const Concrete* concrete = nullptr);
  // Whether the library exports `symbol`.
  bool exports(const char* symbol) const;

  const Schedule& get() const { return *s_; }
  int tensor_index(const std::string& name) const;  // -1 when absent
  // The tensor whose bytes tensor `id` shares (itself when it owns them).
  int root(int id) const { return root_[id]; }
  // The tensors whose root is `root` (itself included): what bind() re-points together.
  const std::vector<int>& sharing(int root) const { return sharing_[root]; }

 private:
  void validate(const std::string& path, int backend) const;
  void index(const std::string& path, int backend);
  void check_training(const std::string& label, const TensorSpec& t) const;
  void concretize(const Concrete& concrete, const std::string& label);
  const Schedule* training_ = nullptr;  // an evaluation schedule's training schedule
  void* lib_ = nullptr;  // stays loaded: its data backs strings handed to callers
  const Schedule* s_ = nullptr;
  // A concrete shape's tables (concretize): s_ points at own_ then.
  Schedule own_{};
  std::vector<TensorSpec> tensors_;
  std::vector<OpSpec> ops_;
  std::vector<std::string> attrs_;
  std::unordered_map<std::string, int> index_;
  std::vector<int> root_;
  std::vector<std::vector<int>> sharing_;
};

// One 64-byte-aligned, zeroed block for the whole step, allocated at load.
class Arena {
 public:
  explicit Arena(int64_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  char* base() const { return base_; }
  int64_t bytes() const { return bytes_; }

 private:
  char* base_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace planner
