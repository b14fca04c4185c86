// DepthToSpace's and SpaceToDepth's blocks as both backends read them
// (planner/ops/depth_to_space.py): the space side (N, C', H b, W b) of blocksize b, the depth
// side (N, C' b^2, H, W), and where a space element lies on the depth side (CRD or DCR), on
// the host and on a device, so both backends permute alike.
#pragma once
#include <cstdint>
#include <stdexcept>

#include "host_device.h"
#include "runtime.h"

namespace planner {

struct DepthBlocks {
  int64_t n, c, h, w, b;  // the space side is (n, c, h * b, w * b)
  bool crd;
  // The depth side's index of space element (nn, ch, hh * b + i, ww * b + j).
  PLANNER_HOST_DEVICE int64_t depth(int64_t nn, int64_t ch, int64_t hh, int64_t i, int64_t ww,
                                    int64_t j) const {
    const int64_t depth_c = crd ? ch * b * b + i * b + j : (i * b + j) * c + ch;
    return ((nn * c * b * b + depth_c) * h + hh) * w + ww;
  }
};

// N: a backend's kernel-factory Node; to_space: DepthToSpace (y is the space side).
template <class N>
DepthBlocks depth_blocks(const N& n, bool to_space) {
  const Shape& space = to_space ? n.out[0].shape : n.in[0].shape;
  const int64_t b = n.attrs.i("blocksize");
  if (space.size() != 4 || b < 1) throw std::runtime_error("DepthToSpace: NCHW, blocksize >= 1");
  return {space[0], space[1], space[2] / b, space[3] / b, b, n.attrs.s("mode") == "CRD"};
}

}  // namespace planner
