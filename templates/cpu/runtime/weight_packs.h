// Weights packed once per step. oneDNN's matmul on a plain (strided) B copies B into its own
// blocked layout at every call; an LSTM's recurrent weight is read by every time step's cell,
// so each step packed it as many times as the sequence is long: (32,512) x (512,1024) on two
// threads 0.156 ms with a plain B, 0.105 from a packed one, the packing itself 0.075 (2-core
// Xeon, oneDNN 3.2 brgemm; from a transposed view, 0.080). A B operand that two or more
// MatMuls of the schedule read the same way (both transposed or neither; a permuted B is left
// alone) is therefore packed once per pass over the schedule, by whichever reader comes first,
// into a block the executor holds beside the arena (stats(): packed_weight_bytes, in
// held_bytes); every reader of the pass multiplies from it. A B read once per pass is left to
// the primitive: packing it separately would cost the same copy again.
//
// Why a pack made by the first reader holds for the others: a tensor's bytes do not change
// while it is alive, and every reader of a pass reads it alive (a parameter is updated after
// its last reader, an activation is written before its first; a recomputed or reloaded one
// gets the same values back). A pass is one run over the schedule: a step, a micro-batch, a
// forward; each gets a new number (Run::pass), so a pack never outlives its pass, even one
// that failed half-way.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime.h"

namespace planner {

class WeightPacks {
 public:
  class Pack {
   public:
    Pack(int tensor, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
         const dnnl::engine& engine);
    // The packed bytes of `src` (tensor `tensor` read through `from`) for `pass`: packed now,
    // on the calling thread's team and `stream`, unless this pass has packed them already.
    char* current(int64_t pass, char* src, dnnl_stream_t stream);
    int tensor() const { return tensor_; }
    const dnnl::memory::desc& from() const { return from_; }
    const dnnl::memory::desc& to() const { return to_; }
    size_t bytes() const { return to_.get_size(); }

   private:
    int tensor_;
    dnnl::memory::desc from_, to_;
    std::unique_ptr<char, void (*)(void*)> block_, scratchpad_;
    dnnl::reorder reorder_;
    dnnl::memory src_, dst_, pad_;
    std::mutex mutex_;
    int64_t pass_ = -1;
  };

  // Counts each tensor's MatMul readers (as B, transposed or not) in schedule `s`; none where
  // the schedule holds no packs (Schedule::pack_weights: a plan under a memory budget).
  explicit WeightPacks(const Schedule& s);
  // Whether two or more MatMuls read tensor `id` as B, `transposed` as this one does.
  bool shared(int id, bool transposed) const {
    auto it = readers_.find({id, transposed});
    return it != readers_.end() && it->second >= 2;
  }
  // The pack of tensor `id` read through `from`, in layout `to`: made on the first ask, the
  // same one for every later ask of the same three (kernels are created on their lanes, at
  // the same time: thread-safe).
  Pack* pack(int id, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
             const dnnl::engine& engine);
  // The bytes of every pack made.
  int64_t bytes() const;

 private:
  std::map<std::pair<int, bool>, int> readers_;
  mutable std::mutex mutex_;
  std::deque<Pack> packs_;
};

}  // namespace planner
