// The transfers memory planning adds (planner.memory.decision.TRANSFER_OPS): an offload copies
// a tensor from the arena into its host store slot, a prefetch copies it back into the arena
// before its backward readers. On a CPU both are a memcpy between two host blocks on the op's
// planned thread; the slot sizes were checked at load (a tensor and its copies share a shape).
#include <stdexcept>

#include "../loops.h"

namespace planner {
namespace {

KernelPtr transfer(const Node& n) {
  if (n.in.size() != 1 || n.out.size() != 1)
    throw std::runtime_error("a transfer copies one tensor into one slot");
  const TensorRef &x = n.in[0], &y = n.out[0];
  const int64_t bytes = x.size() * dtype_bytes(x.dtype);
  if (y.size() * dtype_bytes(y.dtype) != bytes)
    throw std::runtime_error("a transfer's source and slot differ in size");
  return std::make_unique<Copy>(x.id, y.id, bytes);
}

}  // namespace

PLANNER_REGISTER_KERNELS(transfer) {
  r["Offload"] = {transfer, "*"};
  r["Prefetch"] = {transfer, "*"};
}

}  // namespace planner
