// DepthToSpace and SpaceToDepth (planner/ops/depth_to_space.py): a permutation of NCHW, each
// element copied once. The loop walks the space side (N, C', H b, W b) and finds the element's
// place on the depth side (N, C' b^2, H, W): DepthToSpace copies depth -> space, SpaceToDepth
// space -> depth.
#include <omp.h>

#include "../loops.h"
#include "depth_to_space.h"

namespace planner {
namespace {

class DepthToSpace : public Kernel {
 public:
  DepthToSpace(const Node& n, bool to_space)
      : to_space_(to_space), x_(n.in[0].id), y_(n.out[0].id),
        g_(depth_blocks(n, to_space)),  // common/depth_to_space.h
        bytes_(dtype_bytes(n.in[0].dtype)) {}
  void run(const Run& r) override {
    const char* x = r.ptr[x_];
    char* y = r.ptr[y_];
    const DepthBlocks g = g_;
    const int64_t b = g.b, c = g.c, h = g.h, w = g.w, bytes = bytes_;
    const int64_t rows = g.n * c * h * b;  // rows of the space side
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t sh = row % (h * b), ch = (row / (h * b)) % c, nn = row / (h * b * c);
      const int64_t hh = sh / b, i = sh % b;
      for (int64_t sw = 0; sw < w * b; ++sw) {
        const int64_t ww = sw / b, j = sw % b;
        const int64_t depth = g.depth(nn, ch, hh, i, ww, j);
        const int64_t space = row * w * b + sw;
        if (to_space_)
          std::memcpy(y + space * bytes, x + depth * bytes, bytes);
        else
          std::memcpy(y + depth * bytes, x + space * bytes, bytes);
      }
    }
  }

 private:
  bool to_space_;
  int x_, y_;
  DepthBlocks g_;
  int64_t bytes_;
};

KernelPtr depth_to_space(const Node& n) { return std::make_unique<DepthToSpace>(n, true); }
KernelPtr space_to_depth(const Node& n) { return std::make_unique<DepthToSpace>(n, false); }

}  // namespace

PLANNER_REGISTER_KERNELS(depth_to_space) {
  r["DepthToSpace"] = {depth_to_space, "*"};
  r["SpaceToDepth"] = {space_to_depth, "*"};
}

}  // namespace planner
