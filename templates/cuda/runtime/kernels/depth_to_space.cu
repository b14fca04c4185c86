// DepthToSpace and SpaceToDepth on the GPU, following planner/ops/depth_to_space.py and the
// CPU kernel: a permutation of NCHW, one thread per element of the space side (N, C', H b,
// W b) finding its place on the depth side (N, C' b^2, H, W). Elements are copied as 1, 2, 4
// or 8 byte words (every planner dtype), so one kernel serves them all.
#include <cstdint>

#include "../groups.cuh"

namespace planner {
namespace {

template <class T>
__global__ void permute_blocks(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t c,
                               int64_t h, int64_t w, int64_t b, bool crd, bool to_space) {
  const int64_t total = n * c * h * b * w * b;
  for (int64_t s = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; s < total;
       s += int64_t{gridDim.x} * blockDim.x) {
    const int64_t sw = s % (w * b), row = s / (w * b);
    const int64_t sh = row % (h * b), ch = (row / (h * b)) % c, nn = row / (h * b * c);
    const int64_t hh = sh / b, i = sh % b, ww = sw / b, j = sw % b;
    const int64_t depth_c = crd ? ch * b * b + i * b + j : (i * b + j) * c + ch;
    const int64_t d = ((nn * c * b * b + depth_c) * h + hh) * w + ww;
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
        b_(n.attrs.i("blocksize")), crd_(n.attrs.s("mode") == "CRD"),
        bytes_(dtype_bytes(n.in[0].dtype)) {
    const Shape& space = to_space ? n.out[0].shape : n.in[0].shape;
    if (space.size() != 4 || b_ < 1) throw std::runtime_error("DepthToSpace: NCHW, blocksize >= 1");
    n_ = space[0], c_ = space[1], h_ = space[2] / b_, w_ = space[3] / b_;
    total_ = n_ * c_ * h_ * b_ * w_ * b_;
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
        r.at<T>(x_), r.at<T>(y_), n_, c_, h_, w_, b_, crd_, to_space_);
  }
  bool to_space_;
  int threads_;
  int x_, y_;
  int64_t b_;
  bool crd_;
  int bytes_;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, total_ = 0;
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
