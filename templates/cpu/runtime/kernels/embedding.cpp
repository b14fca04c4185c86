// Embedding gather and its scatter-add gradient, plain OpenMP loops.
//   Embedding [table (V, D), ids (int64, any shape)] -> (*ids.shape, D)
//   EmbeddingGrad [ids, dy] num_embeddings -> dtable (V, D): zeros, then dtable[ids[i]] += dy[i]
// The gradient splits the D columns between threads, so repeated ids never race and each
// column accumulates in id order, as numpy's add.at does.
#include <omp.h>

#include <cstring>
#include <string>

#include "../loops.h"
#include "embedding.h"

namespace planner {
namespace {

void check_ids(const int64_t* ids, const EmbeddingRows& rows) {
  const int64_t v = rows.vocab;
  for (int64_t i = 0; i < rows.count; ++i)
    if (ids[i] < 0 || ids[i] >= v)
      throw StepError("id " + std::to_string(ids[i]) + " out of range [0, " + std::to_string(v) + ")");
}

class Embedding : public Kernel {
 public:
  explicit Embedding(const Node& n)
      : rows_(embedding_rows(n)), table_(n.in[0].id), ids_(n.in[1].id), y_(n.out[0].id) {}
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[ids_]) check_ids(r.at<int64_t>(ids_), rows_);
  }
  void run(const Run& r) override {
    const float* table = r.at<float>(table_);
    const int64_t* ids = r.at<int64_t>(ids_);
    float* y = r.at<float>(y_);
    check_ids(ids, rows_);
    const int64_t count = rows_.count, d = rows_.width;
#pragma omp parallel for
    for (int64_t i = 0; i < count; ++i) std::memcpy(y + i * d, table + ids[i] * d, d * sizeof(float));
  }

 private:
  EmbeddingRows rows_;
  int table_, ids_, y_;
};

class EmbeddingGrad : public Kernel {
 public:
  explicit EmbeddingGrad(const Node& n)
      : rows_(embedding_grad_rows(n)), ids_(n.in[0].id), dy_(n.in[1].id), dt_(n.out[0].id) {}
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[ids_]) check_ids(r.at<int64_t>(ids_), rows_);
  }
  void run(const Run& r) override {
    const int64_t* ids = r.at<int64_t>(ids_);
    const float* dy = r.at<float>(dy_);
    float* dt = r.at<float>(dt_);
    check_ids(ids, rows_);
    const int64_t count = rows_.count, d = rows_.width, v = rows_.vocab;
    std::memset(dt, 0, v * d * sizeof(float));
#pragma omp parallel
    {
      int nt = omp_get_num_threads(), t = omp_get_thread_num();
      int64_t lo = d * t / nt, hi = d * (t + 1) / nt;
      for (int64_t i = 0; i < count; ++i) {
        float* row = dt + ids[i] * d;
        const float* g = dy + i * d;
        for (int64_t c = lo; c < hi; ++c) row[c] += g[c];
      }
    }
  }

 private:
  EmbeddingRows rows_;
  int ids_, dy_, dt_;
};

KernelPtr embedding(const Node& n) { return std::make_unique<Embedding>(n); }
KernelPtr embedding_grad(const Node& n) { return std::make_unique<EmbeddingGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(embedding) {
  r["Embedding"] = embedding;
  r["EmbeddingGrad"] = embedding_grad;
}

}  // namespace planner
