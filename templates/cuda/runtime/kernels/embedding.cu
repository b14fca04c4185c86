// Embedding gather and its scatter-add gradient on the GPU, following planner/ops/embedding.py:
//   Embedding [table (V, D), ids (int64, any shape)] -> (*ids.shape, D)
//   EmbeddingGrad [ids, dy] num_embeddings -> dtable (V, D): zeros, then dtable[ids[i]] += dy[i]
//
// Why it is built this way:
// - An id outside [0, V) is a StepError on the CPU; here that would need a host read of the ids
//   (a sync), so a bad id poisons instead, visibly and without a branch on the host:
//   Embedding writes a NaN row for it (so the loss goes NaN); EmbeddingGrad writes NaN over
//   row (position % V) of dtable (a NaN store and an atomic add to the same word end NaN in
//   either order), so the update cannot silently drop it either.
// - The gradient adds with float atomics: repeated ids then sum in an unspecified order, so
//   dtable is within rounding of numpy's add.at but not bitwise reproducible (the CPU kernel's
//   column split is). Rows of four floats go as one float4 atomic on sm_90 when aligned.
// - Both run over flat element indices with 32-bit arithmetic when the sizes allow.
#include <cmath>
#include <cstdint>

#include "../groups.cuh"
#include "embedding.h"

namespace planner {
namespace {

// y[i, c] = table[ids[i], c] over `count` rows of `d` elements (T: float or float4, d in Ts).
template <class T, class I>
__global__ void gather_rows(const T* __restrict__ table, const int64_t* __restrict__ ids,
                            I count, I d, int64_t v, T* __restrict__ y) {
  const I n = count * d;
  for (I k = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<I>(gridDim.x) * blockDim.x) {
    const I i = k / d, c = k - i * d;
    const int64_t id = ids[i];
    if (id >= 0 && id < v) {
      y[k] = table[id * d + c];
    } else {
      const float q = NAN;
      T nan;
      float* f = reinterpret_cast<float*>(&nan);
      for (unsigned j = 0; j < sizeof(T) / sizeof(float); ++j) f[j] = q;
      y[k] = nan;
    }
  }
}

__device__ __forceinline__ void add_to(float* p, float x) { atomicAdd(p, x); }
__device__ __forceinline__ void add_to(float4* p, float4 x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(p, x);
#else
  float* f = reinterpret_cast<float*>(p);
  atomicAdd(f, x.x);
  atomicAdd(f + 1, x.y);
  atomicAdd(f + 2, x.z);
  atomicAdd(f + 3, x.w);
#endif
}

// dtable[ids[i], c] += dy[i, c]; dtable was zeroed on the stream before. The threads of a
// position i with a bad id store NaN over row i % V instead (bounded work however many ids
// are bad).
template <class T, class I>
__global__ void scatter_rows(const int64_t* __restrict__ ids, const T* __restrict__ dy, I count,
                             I d, int64_t v, T* __restrict__ dt) {
  const I n = count * d;
  for (I k = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<I>(gridDim.x) * blockDim.x) {
    const I i = k / d, c = k - i * d;
    const int64_t id = ids[i];
    if (id >= 0 && id < v) {
      add_to(dt + id * d + c, dy[k]);
    } else {
      float* w = reinterpret_cast<float*>(dt + (static_cast<int64_t>(i) % v) * d + c);
      for (unsigned j = 0; j < sizeof(T) / sizeof(float); ++j) w[j] = NAN;
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The launch both ops share: `count` rows of `d` floats, table rows 0..v-1.
class Rows : public Kernel {
 protected:
  Rows(const Node& n, const EmbeddingRows& rows)  // common/embedding.h
      : threads_(block_threads(n)), v_(rows.vocab), d_(rows.width), count_(rows.count) {
    vec_ = d_ % 4 == 0;
    blocks_ = blocks_for(count_ * d_, threads_);
    blocks4_ = blocks_for(count_ * (d_ / 4), threads_);
    // The float4 loop covers fewer elements with fewer blocks: the float one decides.
    small_ = index32(count_ * d_, blocks_, threads_);
  }
  int threads_;
  int64_t v_, d_, count_;
  bool vec_ = false, small_ = true;
  unsigned blocks_ = 1, blocks4_ = 1;
};

class Embedding : public Rows {
 public:
  explicit Embedding(const Node& n)
      : Rows(n, embedding_rows(n)), table_(n.in[0].id), ids_(n.in[1].id), y_(n.out[0].id) {}
  void run(const Run& r) override {
    if (count_ * d_ == 0) return;
    const float* table = r.at<float>(table_);
    const int64_t* ids = r.at<int64_t>(ids_);
    float* y = r.at<float>(y_);
    if (vec_ && aligned16(table) && aligned16(y)) {
      const auto* t4 = reinterpret_cast<const float4*>(table);
      auto* y4 = reinterpret_cast<float4*>(y);
      if (small_)
        gather_rows<float4, int32_t><<<blocks4_, threads_, 0, r.stream>>>(
            t4, ids, static_cast<int32_t>(count_), static_cast<int32_t>(d_ / 4), v_, y4);
      else
        gather_rows<float4, int64_t><<<blocks4_, threads_, 0, r.stream>>>(t4, ids, count_,
                                                                          d_ / 4, v_, y4);
    } else if (small_) {
      gather_rows<float, int32_t><<<blocks_, threads_, 0, r.stream>>>(
          table, ids, static_cast<int32_t>(count_), static_cast<int32_t>(d_), v_, y);
    } else {
      gather_rows<float, int64_t><<<blocks_, threads_, 0, r.stream>>>(table, ids, count_, d_,
                                                                      v_, y);
    }
    PLANNER_LAUNCHED("Embedding");
  }

 private:
  int table_, ids_, y_;
};

class EmbeddingGrad : public Rows {
 public:
  explicit EmbeddingGrad(const Node& n)
      : Rows(n, embedding_grad_rows(n)), ids_(n.in[0].id), dy_(n.in[1].id), dt_(n.out[0].id) {}
  void run(const Run& r) override {
    const int64_t* ids = r.at<int64_t>(ids_);
    const float* dy = r.at<float>(dy_);
    float* dt = r.at<float>(dt_);
    if (v_ * d_ > 0)
      PLANNER_CUDA(cudaMemsetAsync(dt, 0, sizeof(float) * v_ * d_, r.stream));
    if (count_ * d_ == 0) return;
    if (vec_ && aligned16(dy) && aligned16(dt)) {
      const auto* g4 = reinterpret_cast<const float4*>(dy);
      auto* t4 = reinterpret_cast<float4*>(dt);
      if (small_)
        scatter_rows<float4, int32_t><<<blocks4_, threads_, 0, r.stream>>>(
            ids, g4, static_cast<int32_t>(count_), static_cast<int32_t>(d_ / 4), v_, t4);
      else
        scatter_rows<float4, int64_t><<<blocks4_, threads_, 0, r.stream>>>(ids, g4, count_,
                                                                           d_ / 4, v_, t4);
    } else if (small_) {
      scatter_rows<float, int32_t><<<blocks_, threads_, 0, r.stream>>>(
          ids, dy, static_cast<int32_t>(count_), static_cast<int32_t>(d_), v_, dt);
    } else {
      scatter_rows<float, int64_t><<<blocks_, threads_, 0, r.stream>>>(ids, dy, count_, d_, v_,
                                                                       dt);
    }
    PLANNER_LAUNCHED("EmbeddingGrad");
  }

 private:
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
