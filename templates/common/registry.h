// The kernel registry every backend's runtime has: op name -> factory, filled by the kernel
// families' static registrations when the runtime library loads. A backend's kernel.h defines
// its `Factory` (a function from its Node to its KernelPtr) and then includes this:
//
//   PLANNER_REGISTER_KERNELS(myfamily) {
//     r["MyOp"] = make_my_op;      // the op's name, as in planner/ops
//     r["MyIntOp"] = {make_my_int_op, "float32|int64|int32"};  // the dtypes it takes
//   }
//
// codegen reads the same `r["..."] =` lines to know which ops the backend runs and in which
// dtypes (codegen/backends.py), and a test compares them with the built runtime's
// registered_ops().
#pragma once
#include <map>
#include <string>

#include "kernel_dtypes.h"

namespace planner {

// A registration: the factory and the dtype sets it takes (common/kernel_dtypes.h; null: not
// declared). Calling it refuses a node outside them before the factory sees it.
struct KernelEntry {
  Factory make = nullptr;
  const char* dtypes = nullptr;
  KernelEntry() = default;
  KernelEntry(Factory f) : make(f) {}  // NOLINT: `r["Op"] = factory;`
  KernelEntry(Factory f, const char* d) : make(f), dtypes(d) {}
  template <class N>
  auto operator()(const N& n) const {
    if (dtypes && !dtype_set_admitted(dtypes, dtype_set_text(n)))
      throw std::runtime_error("the kernel takes dtypes " + std::string(dtypes) + ", not " +
                               dtype_set_text(n));
    return make(n);
  }
};

using Registry = std::map<std::string, KernelEntry>;

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
