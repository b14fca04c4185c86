// EmbeddingBag, EmbeddingBagGrad and EmbeddingBagWeightGrad (planner/ops/embedding_bag.py),
// plain OpenMP loops.
// The forward gives each thread whole bags (a bag's row is its own); the gradient splits the
// table's columns between threads, each adding every bag's dy in id order, so repeated ids
// never race and the sums are the same whatever the thread count. Ids and offsets are
// checked before anything is read.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../loops.h"
#include "embedding_bag.h"

namespace planner {
namespace {

// The bags' geometry, ids and offsets every bag kernel reads, checked before anything is.
class BagKernel : public Kernel {
 public:
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[ids_] && fed[offsets_]) check_bags(g_, r.at<int64_t>(ids_), r.at<int64_t>(offsets_));
  }

 protected:
  // forward: [table, ids, offsets, ...] (EmbeddingBag, EmbeddingBagWeightGrad); else
  // EmbeddingBagGrad's [ids, offsets, ...]
  BagKernel(const Node& n, bool forward)
      : g_(embedding_bags(n, forward)), ids_(n.in[forward ? 1 : 0].id),
        offsets_(n.in[forward ? 2 : 1].id) {}
  // this run's ids, checked with the offsets before anything reads either
  const int64_t* checked_ids(const Run& r) const {
    check_bags(g_, r.at<int64_t>(ids_), r.at<int64_t>(offsets_));
    return r.at<int64_t>(ids_);
  }
  Bags g_;
  int ids_, offsets_;
};

class EmbeddingBag : public BagKernel {
 public:
  explicit EmbeddingBag(const Node& n)
      : BagKernel(n, true), table_(n.in[0].id),
        weights_(n.in.size() > 3 ? n.in[3].id : -1), y_(n.out[0].id),
        arg_(n.out.size() > 1 ? n.out[1].id : -1) {
    if (n.in[0].dtype != F32 || n.out[0].dtype != F32 || (weights_ >= 0 && n.in[3].dtype != F32))
      throw std::runtime_error("EmbeddingBag: float32 table, weights and output");
  }
  void run(const Run& r) override {
    const float* table = r.at<float>(table_);
    const int64_t* ids = checked_ids(r);
    const int64_t* off = r.at<int64_t>(offsets_);
    const float* w = weights_ >= 0 ? r.at<float>(weights_) : nullptr;
    float* y = r.at<float>(y_);
    int64_t* arg = arg_ >= 0 ? r.at<int64_t>(arg_) : nullptr;
    const Bags g = g_;
    const int64_t d = g.width;
#pragma omp parallel for if(g.ids * d >= kGrain)
    for (int64_t b = 0; b < g.bags; ++b) {
      float* yr = y + b * d;
      std::fill_n(yr, d, 0.0f);
      int64_t* ar = arg ? arg + b * d : nullptr;
      if (ar) std::fill_n(ar, d, int64_t{-1});
      int64_t count = 0;
      for (int64_t i = off[b]; i < g.end(off, b); ++i) {
        const int64_t id = ids[i];
        if (id == g.padding) continue;
        const float* row = table + id * d;
        if (g.mode == BagMode::kMax) {
          for (int64_t c = 0; c < d; ++c) {
            // the first of equal values; NaN wins, as numpy's argmax
            const bool nan = std::isnan(row[c]), held = std::isnan(yr[c]);
            if (count == 0 || (nan && !held) || (!held && row[c] > yr[c])) {
              yr[c] = row[c];
              ar[c] = id;
            }
          }
        } else {
          const float s = w ? w[i] : 1.0f;
          for (int64_t c = 0; c < d; ++c) yr[c] += s * row[c];
        }
        ++count;
      }
      if (g.mode == BagMode::kMean && count > 0)
        for (int64_t c = 0; c < d; ++c) yr[c] /= static_cast<float>(count);
    }
  }

 private:
  int table_, weights_, y_, arg_;
};

class EmbeddingBagGrad : public BagKernel {
 public:
  explicit EmbeddingBagGrad(const Node& n)
      : BagKernel(n, false), dy_(n.in[2].id), extra_(n.in.size() > 3 ? n.in[3].id : -1),
        dt_(n.out[0].id) {
    if (n.in[2].dtype != F32 || n.out[0].dtype != F32)
      throw std::runtime_error("EmbeddingBagGrad: float32 dy and dtable");
    if (g_.vocab != n.attrs.i("num_embeddings"))
      throw std::runtime_error("EmbeddingBagGrad: dtable must have num_embeddings rows");
  }
  void run(const Run& r) override {
    const int64_t* ids = checked_ids(r);
    const int64_t* off = r.at<int64_t>(offsets_);
    const float* dy = r.at<float>(dy_);
    float* dt = r.at<float>(dt_);
    const Bags g = g_;
    const int64_t d = g.width;
    std::memset(dt, 0, sizeof(float) * g.vocab * d);
    if (g.mode == BagMode::kMax) {
      const int64_t* arg = r.at<int64_t>(extra_);
      for (int64_t k = 0; k < g.bags * d; ++k)
        if (arg[k] < -1 || arg[k] >= g.vocab)
          throw StepError("argmax " + std::to_string(arg[k]) + " is no row of the table");
    }
    const float* w = g.mode == BagMode::kMax || extra_ < 0 ? nullptr : r.at<float>(extra_);
    const int64_t* arg = g.mode == BagMode::kMax ? r.at<int64_t>(extra_) : nullptr;
#pragma omp parallel if(g.ids * d >= kGrain)
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = d * t / nt, hi = d * (t + 1) / nt;
      for (int64_t b = 0; b < g.bags; ++b) {
        const float* g_row = dy + b * d;
        if (arg) {
          for (int64_t c = lo; c < hi; ++c)
            if (arg[b * d + c] >= 0) dt[arg[b * d + c] * d + c] += g_row[c];
          continue;
        }
        int64_t count = 0;
        for (int64_t i = off[b]; i < g.end(off, b); ++i) count += ids[i] != g.padding;
        const float mean = g.mode == BagMode::kMean && count > 0 ? 1.0f / count : 1.0f;
        for (int64_t i = off[b]; i < g.end(off, b); ++i) {
          if (ids[i] == g.padding) continue;
          const float s = (w ? w[i] : 1.0f) * mean;
          float* row = dt + ids[i] * d;
          for (int64_t c = lo; c < hi; ++c) row[c] += s * g_row[c];
        }
      }
    }
  }

 private:
  int dy_, extra_, dt_;
};

// dweights[i] = dy[bag] . table[ids[i]]: each thread whole bags, each id its own output.
class EmbeddingBagWeightGrad : public BagKernel {
 public:
  explicit EmbeddingBagWeightGrad(const Node& n)
      : BagKernel(n, true), table_(n.in[0].id), dy_(n.in[3].id), dw_(n.out[0].id) {
    if (n.in[0].dtype != F32 || n.in[3].dtype != F32 || n.out[0].dtype != F32)
      throw std::runtime_error("EmbeddingBagWeightGrad: float32 table, dy and dweights");
  }
  void run(const Run& r) override {
    const float* table = r.at<float>(table_);
    const int64_t* ids = checked_ids(r);
    const int64_t* off = r.at<int64_t>(offsets_);
    const float* dy = r.at<float>(dy_);
    float* dw = r.at<float>(dw_);
    const Bags g = g_;
    const int64_t d = g.width;
    std::fill_n(dw, g.ids, 0.0f);  // ids before the first offset's bag: none; padding: 0
#pragma omp parallel for if(g.ids * d >= kGrain)
    for (int64_t b = 0; b < g.bags; ++b) {
      const float* g_row = dy + b * d;
      for (int64_t i = off[b]; i < g.end(off, b); ++i) {
        if (ids[i] == g.padding) continue;
        const float* row = table + ids[i] * d;
        float acc = 0.0f;
        for (int64_t c = 0; c < d; ++c) acc += g_row[c] * row[c];
        dw[i] = acc;
      }
    }
  }

 private:
  int table_, dy_, dw_;
};

KernelPtr embedding_bag(const Node& n) { return std::make_unique<EmbeddingBag>(n); }
KernelPtr embedding_bag_weight_grad(const Node& n) {
  return std::make_unique<EmbeddingBagWeightGrad>(n);
}
KernelPtr embedding_bag_grad(const Node& n) { return std::make_unique<EmbeddingBagGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(embedding_bag) {
  r["EmbeddingBag"] = embedding_bag;
  r["EmbeddingBagGrad"] = embedding_bag_grad;
  r["EmbeddingBagWeightGrad"] = embedding_bag_weight_grad;
}

}  // namespace planner
