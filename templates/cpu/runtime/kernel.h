// The kernel interface of the CPU runtime (its oneDNN kernel context): a Kernel is created
// once at load for one op of the schedule (primitives, plain-loop geometry), and run every
// step with the tensors' current addresses. Kernels allocate nothing when they run:
// temporaries and oneDNN scratchpads live in the op's own scratch area (`scratch_bytes`),
// which the plan places in the arena with the op's lifetime.
//
// Adding a kernel is one file in kernels/ with its registrations:
//
//   PLANNER_REGISTER_KERNELS(myfamily) {
//     r["MyOp"] = make_my_op;      // the op's name, as in planner/ops
//   }
//
// codegen reads the same `r["..."] =` lines to know which ops the CPU backend runs, and a test
// compares them with `registered_ops()` of the built runtime.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective.h"  // Collective: the process group of a data-parallel plan
#include "runtime.h"

namespace planner {

class WeightPacks;    // weight_packs.h
class WeightLayouts;  // weight_layouts.h

// What a kernel factory sees: the op, its tensors, attrs, the oneDNN engine, the executor's
// packed weights (weight_packs.h; none where the kernel runs outside a step) and the layouts
// it keeps weights in (weight_layouts.h; none: every tensor plain).
struct Node {
  const OpSpec* spec;
  std::vector<TensorRef> in, out;
  Attrs attrs;
  const dnnl::engine& engine;
  int threads;
  WeightPacks* packs = nullptr;
  const WeightLayouts* layouts = nullptr;
};

// What a running kernel sees: every tensor's current address, its scratch area, the stream.
struct Run {
  char* const* ptr;   // per tensor id
  char* scratch;      // scratch_bytes() bytes, 64-byte aligned, this op's alone
  dnnl_stream_t stream;
  int threads;
  const Collective* collective = nullptr;  // the executor's, for collective ops
  int64_t pass = 0;                        // this run over the schedule's (weight_packs.h)
  template <class T> T* at(int id) const { return reinterpret_cast<T*>(ptr[id]); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual size_t scratch_bytes() const { return 0; }
  // The library implementation(s) it runs, for stats() (oneDNN's impl info, "" for loops).
  virtual std::string impl() const { return ""; }
  virtual void run(const Run& r) = 0;
  // Throws StepError for input values run() would refuse (a label or id out of range), for
  // the inputs whose values are known before the step (fed[id]: a feed, a parameter or
  // state): the executor calls it for every op before any op runs, so a step that would fail
  // on them fails having changed nothing.
  virtual void check_feeds(const Run& /*r*/, const std::vector<char>& /*fed*/) const {}
};

using KernelPtr = std::unique_ptr<Kernel>;
using Factory = KernelPtr (*)(const Node&);

}  // namespace planner

// Registry, KernelFamily, PLANNER_REGISTER_KERNELS (common to every backend).
#include "registry.h"
