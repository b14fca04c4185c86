// The kernel registry every backend's runtime has: op name -> factory, filled by the kernel
// families' static registrations when the runtime library loads. A backend's kernel.h defines
// its `Factory` (a function from its Node to its KernelPtr) and then includes this:
//
//   PLANNER_REGISTER_KERNELS(myfamily) {
//     r["MyOp"] = make_my_op;      // the op's name, as in planner/ops
//   }
//
// codegen reads the same `r["..."] =` lines to know which ops the backend runs
// (codegen/backends.py), and a test compares them with the built runtime's registered_ops().
#pragma once
#include <map>
#include <string>

namespace planner {

using Registry = std::map<std::string, Factory>;

// One registry per runtime library (an inline function's static is one object across it).
inline Registry& mutable_registry() {
  static Registry r;
  return r;
}

// Every registered kernel, by op name.
inline const Registry& registry() { return mutable_registry(); }

// Registers a family's kernels when the runtime library loads.
struct KernelFamily {
  explicit KernelFamily(void (*add)(Registry&)) { add(mutable_registry()); }
};

#define PLANNER_REGISTER_KERNELS(family)                                          \
  static void planner_add_##family##_kernels(::planner::Registry& r);             \
  static const ::planner::KernelFamily planner_##family##_family(                 \
      planner_add_##family##_kernels);                                            \
  static void planner_add_##family##_kernels(::planner::Registry& r)

}  // namespace planner
