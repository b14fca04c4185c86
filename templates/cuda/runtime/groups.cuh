// What the hand-written CUDA kernels share: row reductions by a warp or a whole block. The
// reductions are fixed trees over a fixed number of threads (xor butterflies, then one value
// per warp), so a result depends on the launch geometry only, never on timing: losses and normalisation statistics come out bitwise the same every
// step, which atomics would not give.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernel.h"

namespace planner {

struct SumOp {
  template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Every lane ends with the same value: at each step lanes i and i^o add the same two numbers.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread of the block ends with the same value. All threads must call it (it syncs).
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T part[32];
  v = warp_reduce(v, op);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call's readers are done with `part`
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? part[lane] : identity;
  return warp_reduce(v, op);
}

// The threads that work on one row: a warp (kWarp, short rows: blockDim/32 rows per block) or
// the whole block (long rows). Rows are walked grid-stride, uniformly per group, so a block
// group's barriers are reached by all its threads.
template <bool kWarp>
struct RowGroup {
  __device__ int lane() const { return kWarp ? (threadIdx.x & 31) : threadIdx.x; }
  __device__ int size() const { return kWarp ? 32 : blockDim.x; }
  __device__ int64_t first() const {
    return kWarp ? int64_t{blockIdx.x} * (blockDim.x >> 5) + (threadIdx.x >> 5)
                 : int64_t{blockIdx.x};
  }
  __device__ int64_t stride() const {
    return kWarp ? int64_t{gridDim.x} * (blockDim.x >> 5) : int64_t{gridDim.x};
  }
  template <class T> __device__ T sum(T v) const {
    if constexpr (kWarp) return warp_reduce(v, SumOp{});
    else return block_reduce(v, SumOp{}, T(0));
  }
  __device__ float max(float v) const {
    if constexpr (kWarp) return warp_reduce(v, MaxOp{});
    else return block_reduce(v, MaxOp{}, -INFINITY);
  }
};

// Rows up to this long go one per warp; longer ones one per block.
constexpr int64_t kWarpRowMax = 1024;

inline unsigned row_blocks(int64_t rows, bool warp, int threads) {
  return blocks_for(warp ? rows * 32 : rows * threads, threads);
}

}  // namespace planner
