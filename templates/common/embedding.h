// The rows an Embedding or EmbeddingGrad node moves, as both backends read them
// (planner/ops/embedding.py): `count` positions (the ids' elements) of `width` floats, out of
// or into a table of `vocab` rows. Read once so that both backends take the same ids as in
// range, [0, vocab).
#pragma once
#include <cstdint>
#include <stdexcept>

#include "runtime.h"

namespace planner {

struct EmbeddingRows {
  int64_t vocab, width, count;
};

// Embedding [table (V, D), ids] -> y. N: a backend's kernel-factory Node. `wide` (the CPU's
// kernels): a float64 table too, and ids of any integer type (their own kernel checks which).
template <class N>
EmbeddingRows embedding_rows(const N& n, bool wide = false) {
  const bool table = n.in[0].dtype == F32 || (wide && n.in[0].dtype == F64);
  if (!table || (!wide && n.in[1].dtype != I64) || n.out[0].dtype != n.in[0].dtype)
    throw std::runtime_error("Embedding takes a float32 table and int64 ids");
  if (n.in[0].shape.size() != 2) throw std::runtime_error("Embedding: the table must be (V, D)");
  return {n.in[0].shape[0], n.in[0].shape[1], n.in[1].size()};
}

// EmbeddingGrad [ids, dy] num_embeddings -> dtable (V, D).
template <class N>
EmbeddingRows embedding_grad_rows(const N& n, bool wide = false) {
  const bool dy = n.in[1].dtype == F32 || (wide && n.in[1].dtype == F64);
  if ((!wide && n.in[0].dtype != I64) || !dy || n.out[0].dtype != n.in[1].dtype)
    throw std::runtime_error("EmbeddingGrad takes int64 ids and a float32 dy");
  const Shape& table = n.out[0].shape;
  const EmbeddingRows r{n.attrs.i("num_embeddings"), table.size() == 2 ? table[1] : 0,
                        n.in[0].size()};
  if (r.vocab <= 0) throw std::runtime_error("EmbeddingGrad: num_embeddings must be positive");
  if (table.size() != 2 || table[0] != r.vocab)
    throw std::runtime_error("EmbeddingGrad: dtable must be (num_embeddings, D)");
  return r;
}

}  // namespace planner
