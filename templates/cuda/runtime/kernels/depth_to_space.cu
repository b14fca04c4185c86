// DepthToSpace and SpaceToDepth on the GPU, following planner/ops/depth_to_space.py and the
// CPU kernel: a permutation of NCHW, one thread per element of the space side (N, C', H b,
// W b) finding its place on the depth side (N, C' b^2, H, W). Elements are copied as 1, 2, 4
// or 8 byte words (every planner dtype), so one kernel serves them all.
#include <cstdint>

#include "../groups.cuh"
#include "depth_to_space.h"

namespace planner {
namespace {

template <class T>
__global__ void permute_blocks(const T* __restrict__ x, T* __restrict__ y, DepthBlocks g,
                               bool to_space) {
  const int64_t h = g.h, w = g.w, b = g.b, c = g.c;
  const int64_t total = g.n * c * h * b * w * b;
  for (int64_t s = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; s < total;
       s += int64_t{gridDim.x} * blockDim.x) {
    const int64_t sw = s % (w * b), row = s / (w * b);
    const int64_t sh = row % (h * b), ch = (row / (h * b)) % c, nn = row / (h * b * c);
    const int64_t hh = sh / b, i = sh % b, ww = sw / b, j = sw % b;
    const int64_t d = g.depth(nn, ch, hh, i, ww, j);
    if (to_space)
      y[s] = x[d];
    else
      y[d] = x[s];
  }
}

class DepthToSpace : public Kernel {
 public:
  DepthToSpace(const Node& n, bool to_space)
      : to_space_(to_space), threads_(block_threads(n)), x_(n.in[0].id), y_(n.out[0].id),
        g_(depth_blocks(n, to_space)),  // common/depth_to_space.h
        bytes_(dtype_bytes(n.in[0].dtype)) {
    total_ = g_.n * g_.c * g_.h * g_.b * g_.w * g_.b;
    blocks_ = blocks_for(total_, threads_);
  }
  void run(const Run& r) override {
    if (total_ == 0) return;
    switch (bytes_) {
      case 1: go<uint8_t>(r); break;
      case 2: go<uint16_t>(r); break;
      case 4: go<uint32_t>(r); break;
      case 8: go<uint64_t>(r); break;
      default: throw std::runtime_error("DepthToSpace: unsupported element size");
    }
    PLANNER_LAUNCHED(to_space_ ? "DepthToSpace" : "SpaceToDepth");
  }

 private:
  template <class T> void go(const Run& r) {
    permute_blocks<T><<<blocks_, threads_, 0, r.stream>>>(
        r.at<T>(x_), r.at<T>(y_), g_, to_space_);
  }
  bool to_space_;
  int threads_;
  int x_, y_;
  DepthBlocks g_;
  int bytes_;
  int64_t total_ = 0;
  unsigned blocks_ = 1;
};

KernelPtr depth_to_space(const Node& n) { return std::make_unique<DepthToSpace>(n, true); }
KernelPtr space_to_depth(const Node& n) { return std::make_unique<DepthToSpace>(n, false); }

}  // namespace

PLANNER_REGISTER_KERNELS(depth_to_space) {
  r["DepthToSpace"] = depth_to_space;
  r["SpaceToDepth"] = space_to_depth;
}

}  // namespace planner
