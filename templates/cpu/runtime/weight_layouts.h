// Convolution weights kept in the layout their kernels read (issue 89). oneDNN's convolutions
// run on blocked weights (OIhw16i16o and kin, chosen by the primitive on `any`); a weight held
// plain is reordered into that layout by every convolution that reads it, every step, and its
// gradient is written blocked and reordered back: ResNet-50 b32's weight reorders took 2.7 ms
// of a ~25 ms step. So the executor holds such a parameter, its gradient and its optimizer
// state in the forward primitive's layout across steps, and reorders only at the edges.
//
// Which parameters (a family: the parameter, its update's output over the same bytes, its
// gradient, its optimizer state): a float32 parameter every op of whose family reads or writes
// it where the kernel takes that layout, and no other op:
//
//   - Conv2D and Conv2DBackpropInput reading it as their weights, on oneDNN's kernels (not the
//     columns layouts, whose own kernels read plain weights), and ConvTranspose2D (one group),
//     which reads it with its two channel axes swapped and reorders from the kept layout (the
//     layout is the Conv2D's: a transposed convolution's weight is kept where its data
//     gradient, a Conv2D, reads it, as DCGAN's generator's are);
//   - one Conv2DBackpropFilter writing its gradient, on oneDNN's kernel (where oneDNN would
//     take its GEMM fallback the runtime's own kernel writes plain: left plain);
//   - one SGD, ApplyMomentum or ApplyAdam (float32) updating it: elementwise over parameter,
//     gradient and state alike, so any one permutation of all of them gives the same bits (a
//     layout without padding is a permutation: one whose size is not the plain size is left
//     plain; the updates' lr and weight decay are scalars).
//
// Anything else keeps the family plain: a view, a cast (mixed precision), a grouped transposed
// convolution, an offload, a gradient read by a collective (data parallel, ZeRO), clipping's
// global norm (its sum's order would change), loss scaling or accumulation, a graph output,
// the evaluation's or a variant's other layout (a kernel whose chosen layout is not the kept
// one reorders from it, as from plain). The common case: a CNN's convolutions trained by SGD,
// momentum or Adam on one process.
//
// Edges, each reordering to or from plain (bit-exact: a permutation): params() copies,
// load_params, evaluate() (the evaluation's kernels read plain: the family is reordered to
// plain for it and back after), and params(copy=False): a live view must see plain bytes,
// so a view of a kept tensor first releases its family to plain for good (its kernels then
// reorder every step as before: the torch trainer once its module views the executor).
// `weight_layouts="plain"` at construction keeps every family plain from the start (the
// reference the kept layouts are bit-equal to).
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <optional>
#include <vector>

#include "runtime.h"

namespace planner {

struct Node;  // kernel.h

// The layout node n's oneDNN kernel holds its weights in: a Conv2D's forward primitive's
// weights, a Conv2DBackpropFilter's gradient (nullopt where the runtime's own kernel writes
// it plain). The same primitive descriptors its kernel makes (conv.cpp).
std::optional<dnnl::memory::desc> conv_kernel_weights(const Node& n);

class WeightLayouts {
 public:
  // Which families schedule `s` keeps (header comment): `kernel_weights(k)` gives op k's
  // conv_kernel_weights, on its planned team. None when `keep` is false.
  WeightLayouts(const Schedule& s, bool keep, const dnnl::engine& engine,
                const std::function<std::optional<dnnl::memory::desc>(int)>& kernel_weights);
  // The layout tensor `id` is kept in, whether or not held so now; null for a plain one.
  const dnnl::memory::desc* kept(int id) const;
  // Whether tensor `id`'s bytes are in its kept layout now (false once released).
  bool held(int id) const;
  // Releases tensor `id`'s family to plain for good: its persistent tensors (at ptr[t])
  // reordered in place. Between steps.
  void release(int id, char* const* ptr);
  // Every held family's persistent tensors reordered to plain in place (plain = true) or back
  // (false); the flags stay: evaluate()'s edge. Between steps.
  void reorder_all(char* const* ptr, bool plain);
  // Tensor `id`'s bytes at `from` into `to`: from its kept layout to plain (to_plain) or back.
  void reorder(int id, const char* from, char* to, bool to_plain) const;
  // Bytes of persistent tensors held in kept layouts now.
  int64_t held_bytes() const;

 private:
  struct Family {
    dnnl::memory::desc plain, kept;
    std::vector<int> persistent;  // the parameter and its optimizer state
    std::vector<int> members;     // those, the update's outputs over them, the gradient
    bool held = true;
  };
  std::vector<Family> families_;
  std::vector<int> family_of_;  // per tensor id, -1: plain
  dnnl::engine engine_;
};

}  // namespace planner
