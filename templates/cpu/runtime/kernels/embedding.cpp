// Embedding gather and its scatter-add gradient, plain OpenMP loops.
//   Embedding [table (V, D), ids (any shape)] -> (*ids.shape, D)
//   EmbeddingGrad [ids, dy] num_embeddings -> dtable (V, D): zeros, then dtable[ids[i]] += dy[i]
// The table is float32 or float64; the ids any integer type (int64, int32, and the storage
// types int16, int8, uint8: quantized codes, byte tokens), each id read as it is stored, so a
// lookup moves the table's bits exactly. The gradient splits the D columns between threads,
// so repeated ids never race and each column accumulates in id order, as numpy's add.at does.
#include <omp.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "../loops.h"
#include "embedding.h"

namespace planner {
namespace {

template <class Id>
void check_ids(const Id* ids, const EmbeddingRows& rows) {
  const int64_t v = rows.vocab;
  for (int64_t i = 0; i < rows.count; ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= v)
      throw StepError("id " + std::to_string(id) + " out of range [0, " + std::to_string(v) + ")");
  }
}

template <class T, class Id>
class Embedding : public Kernel {
 public:
  explicit Embedding(const Node& n)
      : rows_(embedding_rows(n, true)), table_(n.in[0].id), ids_(n.in[1].id), y_(n.out[0].id) {}
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[ids_]) check_ids(r.at<Id>(ids_), rows_);
  }
  void run(const Run& r) override {
    const T* table = r.at<T>(table_);
    const Id* ids = r.at<Id>(ids_);
    T* y = r.at<T>(y_);
    check_ids(ids, rows_);
    const int64_t count = rows_.count, d = rows_.width;
#pragma omp parallel for
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(y + i * d, table + static_cast<int64_t>(ids[i]) * d, d * sizeof(T));
  }

 private:
  EmbeddingRows rows_;
  int table_, ids_, y_;
};

template <class T, class Id>
class EmbeddingGrad : public Kernel {
 public:
  explicit EmbeddingGrad(const Node& n)
      : rows_(embedding_grad_rows(n, true)), ids_(n.in[0].id), dy_(n.in[1].id), dt_(n.out[0].id) {}
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[ids_]) check_ids(r.at<Id>(ids_), rows_);
  }
  void run(const Run& r) override {
    const Id* ids = r.at<Id>(ids_);
    const T* dy = r.at<T>(dy_);
    T* dt = r.at<T>(dt_);
    check_ids(ids, rows_);
    const int64_t count = rows_.count, d = rows_.width, v = rows_.vocab;
    std::memset(dt, 0, v * d * sizeof(T));
#pragma omp parallel
    {
      int nt = omp_get_num_threads(), t = omp_get_thread_num();
      int64_t lo = d * t / nt, hi = d * (t + 1) / nt;
      for (int64_t i = 0; i < count; ++i) {
        T* row = dt + static_cast<int64_t>(ids[i]) * d;
        const T* g = dy + i * d;
        for (int64_t c = lo; c < hi; ++c) row[c] += g[c];
      }
    }
  }

 private:
  EmbeddingRows rows_;
  int ids_, dy_, dt_;
};

// K<T, Id> for the node's value type (float32 or float64) and id type.
template <template <class, class> class K>
KernelPtr by_types(const Node& n, int value_dtype, int id_dtype) {
  auto with_ids = [&](auto value) -> KernelPtr {
    using T = decltype(value);
    switch (id_dtype) {
      case I64: return std::make_unique<K<T, int64_t>>(n);
      case I32: return std::make_unique<K<T, int32_t>>(n);
      case I16: return std::make_unique<K<T, int16_t>>(n);
      case I8: return std::make_unique<K<T, int8_t>>(n);
      case U8: return std::make_unique<K<T, uint8_t>>(n);
    }
    throw std::runtime_error(n.spec->op + std::string(": ids must be an integer tensor"));
  };
  if (value_dtype == F64) return with_ids(double{});
  return with_ids(float{});
}

KernelPtr embedding(const Node& n) { return by_types<Embedding>(n, n.in[0].dtype, n.in[1].dtype); }
KernelPtr embedding_grad(const Node& n) {
  return by_types<EmbeddingGrad>(n, n.in[1].dtype, n.in[0].dtype);
}

}  // namespace

// A float32 or float64 table with ids of one integer type.
PLANNER_REGISTER_KERNELS(embedding) {
  r["Embedding"] = {embedding, "float32,int64|float32,int32|float32,int16|float32,int8|float32,uint8|float64,int64|float64,int32|float64,int16|float64,int8|float64,uint8"};
  r["EmbeddingGrad"] = {embedding_grad, "float32,int64|float32,int32|float32,int16|float32,int8|float32,uint8|float64,int64|float64,int32|float64,int16|float64,int8|float64,uint8"};
}

}  // namespace planner
