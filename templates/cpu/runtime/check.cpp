// The schedule library is trusted no more than the plan it came from: before anything is
// allocated or created, every index, size and offset it holds is range-checked, so a schedule
// that planner verify would reject cannot make the executor read or write outside its arena.
#include <cstdint>
#include <string>

#include "executor.h"

namespace planner {
namespace {

// No size or offset may come near 2^63 (planner/verify_graph.py uses the same bound).
constexpr int64_t kMaxBytes = int64_t{1} << 62;

[[noreturn]] void refuse(const std::string& what) {
  throw std::runtime_error("schedule refused: " + what + " (re-plan and rebuild it)");
}

std::string tensor_label(const Schedule& s, int id) {
  return std::string("tensor '") + (s.tensors[id].name ? s.tensors[id].name : "?") + "'";
}

void check_tensor(const Schedule& s, int id) {
  const TensorSpec& t = s.tensors[id];
  std::string label = tensor_label(s, id);
  if (!t.name) refuse("tensor " + std::to_string(id) + " has no name");
  if (t.rank < 0 || t.rank > kMaxRank) refuse(label + ": rank " + std::to_string(t.rank));
  if (t.dtype < F32 || t.dtype > BOOL) refuse(label + ": dtype code " + std::to_string(t.dtype));
  if (t.role < INPUT || t.role > GRAD) refuse(label + ": role code " + std::to_string(t.role));
  int64_t bytes = dtype_bytes(t.dtype);
  for (int k = 0; k < t.rank; ++k) {
    if (t.shape[k] < 0 || (t.shape[k] > 0 && bytes > kMaxBytes / t.shape[k]))
      refuse(label + ": dimension " + std::to_string(t.shape[k]) + " out of range");
    bytes *= t.shape[k];
  }
  if (bytes != t.nbytes)
    refuse(label + ": " + std::to_string(t.nbytes) + " bytes, but its shape and dtype hold " +
           std::to_string(bytes));
  if (t.offset < 0 || t.offset > s.arena_bytes - t.nbytes)
    refuse(label + ": bytes [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
           ") lie outside the " + std::to_string(s.arena_bytes) + "-byte arena");
  for (int link : {t.updates, t.alias_of})
    if (link < -1 || link >= s.num_tensors)
      refuse(label + ": links to tensor " + std::to_string(link));
}

// An alias must end at a tensor that aliases nothing, within as many steps as there are
// tensors, and fit inside it (Executor::bind points it at its root's memory).
void check_alias(const Schedule& s, int id) {
  int root = id;
  for (int steps = 0; s.tensors[root].alias_of >= 0; ++steps) {
    if (steps > s.num_tensors) refuse(tensor_label(s, id) + ": its aliases form a cycle");
    root = s.tensors[root].alias_of;
  }
  if (root != id && (s.tensors[id].nbytes > s.tensors[root].nbytes ||
                     s.tensors[id].offset != s.tensors[root].offset))
    refuse(tensor_label(s, id) + " aliases " + tensor_label(s, root) +
           " but does not sit inside its bytes");
}

}  // namespace

void check_schedule(const Schedule& s, int host_cpus) {
  if (s.num_tensors < 0 || s.num_ops < 0 || s.num_outputs < 0 || !s.tensors || !s.args ||
      (s.num_ops > 0 && !s.ops) || (s.num_outputs > 0 && !s.outputs) || !s.name || !s.kind)
    refuse("malformed table counts");
  if (s.arena_bytes < 0 || s.arena_bytes > kMaxBytes)
    refuse("arena of " + std::to_string(s.arena_bytes) + " bytes");
  for (int i = 0; i < s.num_tensors; ++i) check_tensor(s, i);
  for (int i = 0; i < s.num_tensors; ++i) check_alias(s, i);
  int64_t num_args = 0;
  while (s.args[num_args] >= 0) ++num_args;  // kArgs ends with -1
  for (int64_t a = 0; a < num_args; ++a)
    if (s.args[a] >= s.num_tensors) refuse("argument " + std::to_string(a) + " out of range");
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    std::string label = std::string("op '") + (op.name ? op.name : "?") + "'";
    if (!op.name || !op.op || !op.attrs) refuse("op " + std::to_string(k) + " lacks a string");
    if (op.threads < 1 || op.threads > host_cpus)
      refuse(label + " plans " + std::to_string(op.threads) + " threads; this machine has " +
             std::to_string(host_cpus) + " logical CPUs");
    if (op.num_inputs < 0 || op.num_outputs < 0 || op.first_input < 0 ||
        op.first_output < 0 || int64_t{op.first_input} + op.num_inputs > num_args ||
        int64_t{op.first_output} + op.num_outputs > num_args)
      refuse(label + ": its tensor arguments lie outside the argument table");
  }
  for (int k = 0; k < s.num_outputs; ++k)
    if (s.outputs[k] < 0 || s.outputs[k] >= s.num_tensors)
      refuse("output " + std::to_string(k) + " is not a tensor");
}

}  // namespace planner
