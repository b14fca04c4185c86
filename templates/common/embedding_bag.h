// The bags an EmbeddingBag or EmbeddingBagGrad node reduces (planner/ops/embedding_bag.py),
// as both backends read them: B bags of the N ids, bag b from offsets[b] to offsets[b + 1]
// (the last to N), rows of `width` floats of a `vocab`-row table.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

enum class BagMode { kSum, kMean, kMax };

struct Bags {
  int64_t vocab = 0, width = 0, ids = 0, offsets = 0, bags = 0, padding = -1;
  BagMode mode = BagMode::kSum;

  // where bag b ends: the next bag's offset, or N for the last bag (include_last_offset's
  // extra entry is not read, as PyTorch's CPU kernel)
  int64_t end(const int64_t* off, int64_t b) const { return b + 1 < bags ? off[b + 1] : ids; }
};

// N: a backend's kernel-factory Node. `forward`: EmbeddingBag [table, ids, offsets, ...] (or
// EmbeddingBagWeightGrad [table, ids, offsets, dy]); else EmbeddingBagGrad [ids, offsets, dy,
// ...] with num_embeddings.
template <class N>
Bags embedding_bags(const N& n, bool forward) {
  Bags g;
  const std::string mode = n.attrs.s("mode");
  g.mode = mode == "max" ? BagMode::kMax : mode == "mean" ? BagMode::kMean : BagMode::kSum;
  g.padding = n.attrs.i("padding_idx");
  const int k = forward ? 1 : 0;
  if (n.in[k].dtype != I64 || n.in[k + 1].dtype != I64)
    throw std::runtime_error("EmbeddingBag: int64 ids and offsets");
  g.ids = n.in[k].size();
  g.offsets = n.in[k + 1].size();
  g.bags = g.offsets - (n.attrs.b("include_last_offset") ? 1 : 0);
  const Shape& table = forward ? n.in[0].shape : n.out[0].shape;
  if (table.size() != 2) throw std::runtime_error("EmbeddingBag: the table must be (V, D)");
  g.vocab = table[0];
  g.width = table[1];
  return g;
}

// Ids in [0, vocab), offsets from 0 rising to at most N: else StepError naming the first bad
// one (host memory).
inline void check_bags(const Bags& g, const int64_t* ids, const int64_t* off) {
  for (int64_t i = 0; i < g.ids; ++i)
    if (ids[i] < 0 || ids[i] >= g.vocab)
      throw StepError("id " + std::to_string(ids[i]) + " out of range [0, " +
                      std::to_string(g.vocab) + ")");
  for (int64_t b = 0; b < g.bags; ++b) {
    const int64_t before = b == 0 ? 0 : off[b - 1];
    if (off[b] < before || off[b] > g.ids || (b == 0 && off[0] != 0))
      throw StepError("offsets must start at 0 and rise to at most " + std::to_string(g.ids) +
                      " (the ids' count): offset " + std::to_string(b) + " is " +
                      std::to_string(off[b]));
  }
}

}  // namespace planner
