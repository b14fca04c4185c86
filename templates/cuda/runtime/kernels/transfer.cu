// The transfers memory planning adds (planner.memory.decision.TRANSFER_OPS): an offload copies
// a tensor from the device arena into its slot of the pinned host store, a prefetch copies it
// back before its backward readers. Each is one cudaMemcpyAsync on the op's planned stream
// (the plan gives each direction a copy stream of its own; the executor orders it against the
// compute stream with events), so it overlaps compute and is captured in a CUDA graph like any
// op. The store is pinned and allocated once at load: a copy allocates nothing.
#include <stdexcept>
#include <string>

#include "../kernel.h"

namespace planner {
namespace {

class Transfer : public Kernel {
 public:
  Transfer(int from, int to, int64_t bytes, cudaMemcpyKind kind)
      : from_(from), to_(to), bytes_(bytes), kind_(kind) {}
  void run(const Run& r) override {
    check_cuda(cudaMemcpyAsync(r.ptr[to_], r.ptr[from_], static_cast<size_t>(bytes_), kind_,
                               r.stream),
               "cudaMemcpyAsync (transfer)");
  }

 private:
  int from_, to_;
  int64_t bytes_;
  cudaMemcpyKind kind_;
};

KernelPtr make(const Node& n, cudaMemcpyKind kind) {
  if (n.in.size() != 1 || n.out.size() != 1)
    throw std::runtime_error("a transfer copies one tensor into one slot");
  const TensorRef &x = n.in[0], &y = n.out[0];
  const int64_t bytes = x.size() * dtype_bytes(x.dtype);
  if (y.size() * dtype_bytes(y.dtype) != bytes)
    throw std::runtime_error("a transfer's source and slot differ in size");
  return std::make_unique<Transfer>(x.id, y.id, bytes, kind);
}

KernelPtr offload(const Node& n) { return make(n, cudaMemcpyDeviceToHost); }
KernelPtr prefetch(const Node& n) { return make(n, cudaMemcpyHostToDevice); }

}  // namespace

PLANNER_REGISTER_KERNELS(transfer) {
  r["Offload"] = offload;
  r["Prefetch"] = prefetch;
}

}  // namespace planner
