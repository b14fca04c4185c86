// Helpers for kernels made of oneDNN primitives: plain (row-major) memory descriptors, and
// DnnlKernel, which runs one or more primitives with user scratchpads and temporaries placed
// in the executor's scratch area. Execution goes through the C API with argument arrays built
// at load, so a run allocates nothing.
#pragma once
#include "kernel.h"

namespace planner {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

memory::data_type dnnl_type(int dtype);
// Row-major descriptor of `shape` (a scalar becomes {1}).
memory::desc plain_md(const Shape& shape, int dtype);
// A tensor's descriptor as the arena holds it: plain, or channel-blocked (TensorRef::block).
memory::desc held_md(const TensorRef& t);
// Row-major descriptor of a tensor viewed with `dims` (same element count).
memory::desc view_md(const Shape& dims, int dtype);
// Attributes every primitive gets: user-managed scratchpad.
dnnl::primitive_attr user_scratchpad();

class DnnlKernel : public Kernel {
 public:
  // Where an argument's bytes are: a tensor, a temporary in this kernel's scratch area, the
  // address a slot holds when the primitive runs (a packed weight, weight_packs.h), or the
  // primitive's scratchpad.
  struct Arg {
    int dnnl_arg;
    int tensor;          // >= 0: tensor id
    int64_t temp = -1;   // >= 0: byte offset of a temporary in the scratch area
    char* const* slot = nullptr;
  };

  // Add a primitive; its args name tensors or temporaries. Returns its index. With
  // `zero_scratchpad` its scratchpad is zeroed before every run (a primitive that reads
  // scratchpad it never wrote: conv.cpp's low-precision weight gradients).
  size_t add(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::vector<Arg> args, bool zero_scratchpad = false);
  // Reserve a temporary of `bytes` in the scratch area; returns its offset.
  int64_t temp(size_t bytes);

  size_t scratch_bytes() const override { return temps_ + scratchpad_; }
  // oneDNN's implementation names of its primitives in run order, " + "-joined (which ISA a
  // bf16 convolution got, or the reorders of the float32 fallback around it).
  std::string impl() const override { return impl_; }
  void run(const Run& r) override { run_all(r); }

 protected:
  void run_all(const Run& r);
  void run_one(size_t k, const Run& r);

 private:
  struct Step {
    dnnl::primitive prim;
    std::vector<Arg> args;
    std::vector<memory> mems;
    std::vector<dnnl_exec_arg_t> c_args;
    size_t zeroed_bytes = 0;  // of the scratchpad, zeroed before each run
  };
  std::vector<Step> steps_;
  size_t temps_ = 0;
  size_t scratchpad_ = 0;  // the largest of the primitives' (they run one after another)
  std::string impl_;
};

// The float32 kernel `make` builds, run on an op whose tensors include bfloat16 / float16 ones
// (mixed precision's ops between convolutions: Relu, MaxPool and their gradients): oneDNN
// reorders widen the low inputs into float32 temporaries (exact), the float32 kernel runs on
// them, and reorders round its float32 results once into the low outputs (to nearest even),
// the reference interpreter's semantics to the bit. An op without low tensors gets make(n)
// itself. The temporaries are the op's scratch (planner.ops.base.widening_scratch plans them).
KernelPtr widened(const Node& n, Factory make);
// make(n), a oneDNN kernel on the tensors' own types; where this CPU's oneDNN has no
// implementation for an op's bfloat16 / float16 tensors (bf16 batch norm, pooling and binary
// need AVX512_CORE or AVX2_VNNI_2), the same kernel in float32 on widened copies.
KernelPtr native_or_widened(const Node& n, Factory make);

// oneDNN dilation is "extra gap": 0 means dense.
memory::dims dnnl_dilation(const std::vector<int64_t>& d);

}  // namespace planner
