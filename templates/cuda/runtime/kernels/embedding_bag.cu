// EmbeddingBag, EmbeddingBagGrad and EmbeddingBagWeightGrad on the GPU, following
// planner/ops/embedding_bag.py and the CPU kernels (common/embedding_bag.h's bags).
//
// Why it is built this way:
// - One thread per (bag, column), walking the bag's ids in order: the forward sums in the
//   CPU's order; adjacent threads read adjacent columns of a row, so loads coalesce.
// - Bad ids or offsets cannot raise StepError without a host read (a sync): the bag's row
//   goes NaN instead (forward), or NaN is stored over the table gradient's row 0 (backward),
//   never reading or writing outside a buffer.
// - The gradient adds with float atomics (repeated ids across bags): within rounding of the
//   CPU's ordered sums, not bitwise equal to them.
#include <cmath>
#include <cstdint>

#include "../groups.cuh"
#include "embedding_bag.h"

namespace planner {
namespace {

// The bag's [start, end) in ids, or start > end when its offsets are bad.
__device__ __forceinline__ void bag_range(const Bags& g, const int64_t* off, int64_t b,
                                          int64_t* start, int64_t* end) {
  const int64_t s = off[b], e = b + 1 < g.bags ? off[b + 1] : g.ids;
  const bool ok = (b > 0 || s == 0) && s >= 0 && s <= e && e <= g.ids;
  *start = ok ? s : 1;
  *end = ok ? e : 0;
}

__global__ void bag_forward(Bags g, const float* __restrict__ table,
                            const int64_t* __restrict__ ids, const int64_t* __restrict__ off,
                            const float* __restrict__ w, float* __restrict__ y,
                            int64_t* __restrict__ arg) {
  const int64_t total = g.bags * g.width;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / g.width, c = k % g.width;
    int64_t s, e;
    bag_range(g, off, b, &s, &e);
    float acc = s > e ? NAN : 0.0f;
    int64_t chosen = -1, count = 0;
    for (int64_t i = s; i < e; ++i) {
      const int64_t id = ids[i];
      if (id == g.padding) continue;
      if (id < 0 || id >= g.vocab) {
        acc = NAN;
        break;
      }
      const float v = table[id * g.width + c];
      if (g.mode == BagMode::kMax) {
        const bool nan = isnan(v), held = isnan(acc);
        if (count == 0 || (nan && !held) || (!held && v > acc)) {
          acc = v;
          chosen = id;
        }
      } else {
        acc += (w ? w[i] : 1.0f) * v;
      }
      ++count;
    }
    if (g.mode == BagMode::kMean && count > 0) acc /= static_cast<float>(count);
    y[k] = acc;
    if (arg) arg[k] = chosen;
  }
}

__global__ void bag_backward(Bags g, const int64_t* __restrict__ ids,
                             const int64_t* __restrict__ off, const float* __restrict__ dy,
                             const float* __restrict__ w, const int64_t* __restrict__ arg,
                             float* __restrict__ dt) {
  const int64_t total = g.bags * g.width;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / g.width, c = k % g.width;
    if (arg) {
      const int64_t id = arg[k];
      if (id >= g.vocab || id < -1) dt[c] = NAN;
      else if (id >= 0) atomicAdd(dt + id * g.width + c, dy[k]);
      continue;
    }
    int64_t s, e, count = 0;
    bag_range(g, off, b, &s, &e);
    if (s > e) dt[c] = NAN;
    for (int64_t i = s; i < e; ++i) count += ids[i] != g.padding;
    const float mean = g.mode == BagMode::kMean && count > 0 ? 1.0f / count : 1.0f;
    for (int64_t i = s; i < e; ++i) {
      const int64_t id = ids[i];
      if (id == g.padding) continue;
      if (id < 0 || id >= g.vocab) {
        dt[c] = NAN;
        continue;
      }
      atomicAdd(dt + id * g.width + c, (w ? w[i] : 1.0f) * mean * dy[k]);
    }
  }
}

// One thread per bag, each id of it its own output (dy[bag] . table[id], in the CPU's order);
// a bag with bad offsets or ids stores NaN over dweights[0].
__global__ void bag_weight_backward(Bags g, const float* __restrict__ table,
                                    const int64_t* __restrict__ ids,
                                    const int64_t* __restrict__ off,
                                    const float* __restrict__ dy, float* __restrict__ dw) {
  for (int64_t b = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; b < g.bags;
       b += int64_t{gridDim.x} * blockDim.x) {
    int64_t s, e;
    bag_range(g, off, b, &s, &e);
    if (s > e && g.ids > 0) dw[0] = NAN;
    for (int64_t i = s; i < e; ++i) {
      const int64_t id = ids[i];
      if (id == g.padding) continue;
      if (id < 0 || id >= g.vocab) {
        dw[0] = NAN;
        continue;
      }
      float acc = 0.0f;
      for (int64_t c = 0; c < g.width; ++c) acc += dy[b * g.width + c] * table[id * g.width + c];
      dw[i] = acc;
    }
  }
}

class EmbeddingBag : public Kernel {
 public:
  explicit EmbeddingBag(const Node& n)
      : threads_(block_threads(n)), g_(embedding_bags(n, true)), table_(n.in[0].id),
        ids_(n.in[1].id), offsets_(n.in[2].id), w_(n.in.size() > 3 ? n.in[3].id : -1),
        y_(n.out[0].id), arg_(n.out.size() > 1 ? n.out[1].id : -1) {
    blocks_ = blocks_for(g_.bags * g_.width, threads_);
  }
  void run(const Run& r) override {
    if (g_.bags * g_.width == 0) return;
    bag_forward<<<blocks_, threads_, 0, r.stream>>>(
        g_, r.at<float>(table_), r.at<int64_t>(ids_), r.at<int64_t>(offsets_),
        w_ >= 0 ? r.at<float>(w_) : nullptr, r.at<float>(y_),
        arg_ >= 0 ? r.at<int64_t>(arg_) : nullptr);
    PLANNER_LAUNCHED("EmbeddingBag");
  }

 private:
  int threads_;
  Bags g_;
  int table_, ids_, offsets_, w_, y_, arg_;
  unsigned blocks_ = 1;
};

class EmbeddingBagGrad : public Kernel {
 public:
  explicit EmbeddingBagGrad(const Node& n)
      : threads_(block_threads(n)), g_(embedding_bags(n, false)), ids_(n.in[0].id),
        offsets_(n.in[1].id), dy_(n.in[2].id), extra_(n.in.size() > 3 ? n.in[3].id : -1),
        dt_(n.out[0].id) {
    blocks_ = blocks_for(g_.bags * g_.width, threads_);
  }
  void run(const Run& r) override {
    float* dt = r.at<float>(dt_);
    if (g_.vocab * g_.width > 0)
      PLANNER_CUDA(cudaMemsetAsync(dt, 0, sizeof(float) * g_.vocab * g_.width, r.stream));
    if (g_.bags * g_.width == 0) return;
    const bool max = g_.mode == BagMode::kMax;
    bag_backward<<<blocks_, threads_, 0, r.stream>>>(
        g_, r.at<int64_t>(ids_), r.at<int64_t>(offsets_), r.at<float>(dy_),
        !max && extra_ >= 0 ? r.at<float>(extra_) : nullptr,
        max ? r.at<int64_t>(extra_) : nullptr, dt);
    PLANNER_LAUNCHED("EmbeddingBagGrad");
  }

 private:
  int threads_;
  Bags g_;
  int ids_, offsets_, dy_, extra_, dt_;
  unsigned blocks_ = 1;
};

class EmbeddingBagWeightGrad : public Kernel {
 public:
  explicit EmbeddingBagWeightGrad(const Node& n)
      : threads_(block_threads(n)), g_(embedding_bags(n, true)), table_(n.in[0].id),
        ids_(n.in[1].id), offsets_(n.in[2].id), dy_(n.in[3].id), dw_(n.out[0].id) {
    blocks_ = blocks_for(g_.bags, threads_);
  }
  void run(const Run& r) override {
    float* dw = r.at<float>(dw_);
    if (g_.ids > 0) PLANNER_CUDA(cudaMemsetAsync(dw, 0, sizeof(float) * g_.ids, r.stream));
    if (g_.bags == 0) return;
    bag_weight_backward<<<blocks_, threads_, 0, r.stream>>>(
        g_, r.at<float>(table_), r.at<int64_t>(ids_), r.at<int64_t>(offsets_),
        r.at<float>(dy_), dw);
    PLANNER_LAUNCHED("EmbeddingBagWeightGrad");
  }

 private:
  int threads_;
  Bags g_;
  int table_, ids_, offsets_, dy_, dw_;
  unsigned blocks_ = 1;
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
