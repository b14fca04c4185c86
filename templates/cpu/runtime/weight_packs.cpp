#include "weight_packs.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "dnnl_kernel.h"
#include "executor_core.h"

namespace planner {

namespace {

char* aligned_block(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<char*>(p);
}

}  // namespace

WeightPacks::Pack::Pack(int tensor, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                        const dnnl::engine& engine)
    : tensor_(tensor), from_(from), to_(to), block_(aligned_block(to.get_size()), std::free),
      scratchpad_(nullptr, std::free) {
  // Its own scratchpad (a pack runs one pass at a time, under its lock): nothing the library
  // shares between threads.
  dnnl::reorder::primitive_desc pd(engine, from, engine, to, user_scratchpad());
  reorder_ = dnnl::reorder(pd);
  src_ = dnnl::memory(from, engine, DNNL_MEMORY_NONE);
  dst_ = dnnl::memory(to, engine, block_.get());
  const size_t pad = pd.scratchpad_desc().get_size();
  if (pad > 0) {
    scratchpad_.reset(aligned_block(pad));
    pad_ = dnnl::memory(pd.scratchpad_desc(), engine, scratchpad_.get());
  }
}

char* WeightPacks::Pack::current(int64_t pass, char* src, dnnl_stream_t stream) {
  std::lock_guard<std::mutex> hold(mutex_);
  if (pass_ != pass) {
    src_.set_data_handle(src);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, src_.get()}, {DNNL_ARG_TO, dst_.get()},
                              {DNNL_ARG_SCRATCHPAD, scratchpad_ ? pad_.get() : nullptr}};
    dnnl_status_t st = dnnl_primitive_execute(reorder_.get(), stream, scratchpad_ ? 3 : 2,
                                              args);
    if (st != dnnl_success)
      throw std::runtime_error("oneDNN reorder packing a MatMul weight failed with status " +
                               std::to_string(st));
    pass_ = pass;
  }
  return block_.get();
}

WeightPacks::WeightPacks(const Schedule& s) {
  if (!s.pack_weights) return;  // a plan under a memory budget: nothing beside its arena
  std::vector<TensorRef> in, out;
  for (int k = 0; k < s.num_ops; ++k) {
    if (std::strcmp(s.ops[k].op, "MatMul") != 0) continue;
    Attrs attrs(s.ops[k].attrs);
    if (attrs.has("perm_b")) continue;
    in.clear();
    out.clear();
    op_tensors(s, s.ops[k], &in, &out);
    if (in.size() >= 2) readers_[{in[1].id, attrs.b("transpose_b")}] += 1;
  }
}

WeightPacks::Pack* WeightPacks::pack(int id, const dnnl::memory::desc& from,
                                     const dnnl::memory::desc& to, const dnnl::engine& engine) {
  std::lock_guard<std::mutex> hold(mutex_);
  for (Pack& p : packs_)
    if (p.tensor() == id && p.from() == from && p.to() == to) return &p;
  return &packs_.emplace_back(id, from, to, engine);
}

int64_t WeightPacks::bytes() const {
  std::lock_guard<std::mutex> hold(mutex_);
  int64_t total = 0;
  for (const Pack& p : packs_) total += static_cast<int64_t>(p.bytes());
  return total;
}

}  // namespace planner
