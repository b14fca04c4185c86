// ClipGradNorm [g1 .. gn] -> [g1 * c .. gn * c, total_norm] on the GPU (planner/ops/
// clip_grad_norm.py), nothing read back to the host: each gradient's sum of squares by one
// block in double, in a fixed order (deterministic, so a resumed run repeats bit for bit), its
// norm rounded to float and squared into total_norm; then total_norm's square root and the
// scale c = min(max_norm / (total_norm + 1e-6), 1), read on the device by every scale kernel.
// The outputs may be the gradients' bytes: every norm is taken before any scale is written.
// One block per gradient's norm: enough for the small step it is (a wide reduction is a
// later change).
//   ShardedClipGradNorm [s1 .. sn] -> [s1 * c .. sn * c, total_norm] (--shard-optimizer or
//     --shard-parameters, planner/ops/collective.py): the same over this rank's gradient
//     shards, their squares summed into the op's scratch and all-reduced over the ranks on the
//     op's stream (the executor's collective) before the root; compiled, not yet run on a GPU,
//     and refused at planning for GPU targets until it is (planner.target.backends).
#include <string>
#include <vector>

#include "../kernel.h"
#include "clip_grad_norm.h"

namespace planner {
namespace {

constexpr int kNormThreads = 512;

__global__ void add_square_of_norm(const float* g, int64_t n, float* total) {
  __shared__ double part[kNormThreads];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) sum += double(g[i]) * g[i];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kNormThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(sqrt(part[0]));
    *total += norm * norm;
  }
}

__global__ void finish_norm(float* total) { *total = sqrtf(*total); }

__global__ void root_into(const float* squares, float* total) { *total = sqrtf(*squares); }

__global__ void scale_by_clip(const float* g, float* y, const float* total, float max_norm,
                              int64_t n) {
  const float coef = clip_factor(max_norm, *total);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = g[i] * coef;
}

class ClipGradNorm : public Kernel {
 public:
  explicit ClipGradNorm(const Node& n)
      : c_(grad_clip(n)), threads_(block_threads(n)) {}  // common/clip_grad_norm.h
  void run(const Run& r) override {
    float* total = r.at<float>(c_.total);
    add_squares(r, total);
    finish_norm<<<1, 1, 0, r.stream>>>(total);
    PLANNER_LAUNCHED("finish_norm");
    scale(r, total);
  }

 protected:
  // *into = the sum of every gradient's squared norm
  void add_squares(const Run& r, float* into) const {
    PLANNER_CUDA(cudaMemsetAsync(into, 0, sizeof(float), r.stream));
    for (size_t k = 0; k < c_.in.size(); ++k) {
      if (c_.sizes[k] == 0) continue;
      add_square_of_norm<<<1, kNormThreads, 0, r.stream>>>(r.at<float>(c_.in[k]),
                                                           c_.sizes[k], into);
      PLANNER_LAUNCHED("add_square_of_norm");
    }
  }
  // every output = its gradient times the clip factor of the norm *total (on the device)
  void scale(const Run& r, const float* total) const {
    for (size_t k = 0; k < c_.in.size(); ++k) {
      if (c_.sizes[k] == 0) continue;
      scale_by_clip<<<blocks_for(c_.sizes[k], threads_), threads_, 0, r.stream>>>(
          r.at<float>(c_.in[k]), r.at<float>(c_.out[k]), total, c_.max_norm, c_.sizes[k]);
      PLANNER_LAUNCHED("scale_by_clip");
    }
  }
  int total() const { return c_.total; }

 private:
  GradClip c_;
  int threads_;
};

// The shards' squares summed over the ranks (one float in scratch, all-reduced on the op's
// stream), then clipped as above.
class ShardedClipGradNorm : public ClipGradNorm {
 public:
  using ClipGradNorm::ClipGradNorm;
  size_t scratch_bytes() const override { return 256; }  // the float the ranks sum
  std::string detail() const override { return "all-reduce of the squares"; }
  void run(const Run& r) override {
    float* squares = reinterpret_cast<float*>(r.scratch);
    add_squares(r, squares);
    process_group(r.collective).run(kAllReduce, squares, 1, r.stream);
    float* total = r.at<float>(ClipGradNorm::total());
    root_into<<<1, 1, 0, r.stream>>>(squares, total);
    PLANNER_LAUNCHED("root_into");
    scale(r, total);
  }
};

KernelPtr clip_grad_norm(const Node& n) { return std::make_unique<ClipGradNorm>(n); }
KernelPtr sharded_clip_grad_norm(const Node& n) {
  return std::make_unique<ShardedClipGradNorm>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(clip_grad_norm) {
  r["ClipGradNorm"] = clip_grad_norm;
  r["ShardedClipGradNorm"] = sharded_clip_grad_norm;
}

}  // namespace planner
