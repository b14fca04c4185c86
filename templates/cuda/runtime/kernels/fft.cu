// FFT (planner/ops/fft.py) on the GPU: the complex-to-complex DFT of a complex tensor's planes
// ([..., 2], each element a cufftComplex in memory) along the node's axes, by cuFFT's C2C, in
// the passes of fft_layout.h (runs of adjacent axes, up to three at a time), then the scale.
// float32 only: the CUDA runtime has no float64 tensors (codegen.backends).
// The plans come from the executor's cache (fft_plans.h), made at load; each run points them
// at the op's stream and at its scratch, which the plan sized with the op's `gpu_scratch` rule
// and which holds cuFFT's work area (the largest of the passes': they run one after another).
// cuFFT's inverse is unnormalized, as the op's: the scale is the caller's, applied once, after
// the last pass, one multiply per plane (the CPU kernel folds it into its first pass; either is
// one rounding per element).
#include <cstdint>
#include <memory>
#include <vector>

#include "../fft_layout.h"
#include "../fft_plans.h"
#include "../kernel.h"

namespace planner {
namespace {

__global__ void fft_scale(float* __restrict__ y, int64_t n, float scale) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] *= scale;
}

std::vector<int64_t> fft_planes(const Node& n) {
  const Shape& shape = n.in[0].shape;
  if (shape.size() < 2 || shape.back() != 2 || n.in[0].dtype != F32 || n.out[0].dtype != F32)
    throw std::runtime_error("FFT: x must be float32 of shape [..., 2], got " +
                             shape_text(shape));
  return std::vector<int64_t>(shape.begin(), shape.end() - 1);
}

std::vector<int64_t> fft_axes(const Node& n, size_t rank) {
  std::vector<int64_t> axes;
  for (int64_t a : n.attrs.ints("axes")) axes.push_back(norm_axis(a, rank));
  return axes;
}

class Fft : public Kernel {
 public:
  explicit Fft(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), threads_(block_threads(n)),
        inverse_(n.attrs.b("inverse")), scale_(static_cast<float>(n.attrs.f("scale"))) {
    const std::vector<int64_t> planes = fft_planes(n);
    floats_ = 2 * numel(planes);
    FftPlans* cache = n.fft_plans;
    if (!cache) cache = (own_ = std::make_unique<FftPlans>()).get();
    for (const FftPass& p : fft_passes(planes, fft_axes(n, planes.size()))) {
      const FftPlans::Plan& plan = cache->get(p.geometry);
      passes_.push_back({p, plan.handle});
      work_bytes_ = std::max(work_bytes_, plan.work_bytes);
    }
    blocks_ = blocks_for(floats_, threads_);
  }
  size_t scratch_bytes() const override { return work_bytes_; }
  std::string detail() const override {
    return "cufft:c2c, " + std::to_string(passes_.size()) + " pass(es), work " +
           std::to_string(work_bytes_) + " bytes";
  }
  void run(const Run& r) override {
    if (passes_.empty()) return;
    auto* x = r.at<cufftComplex>(x_);
    auto* y = r.at<cufftComplex>(y_);
    const int direction = inverse_ ? CUFFT_INVERSE : CUFFT_FORWARD;
    for (size_t k = 0; k < passes_.size(); ++k) {
      const auto& [pass, plan] = passes_[k];
      PLANNER_CUFFT(cufftSetStream(plan, r.stream));
      if (work_bytes_ > 0) PLANNER_CUFFT(cufftSetWorkArea(plan, r.scratch));
      cufftComplex* in = k == 0 ? x : y;
      for (int64_t e = 0; e < pass.execs; ++e)
        PLANNER_CUFFT(cufftExecC2C(plan, in + e * pass.exec_step, y + e * pass.exec_step,
                                   direction));
    }
    if (scale_ != 1.0f) {
      fft_scale<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(y_), floats_, scale_);
      PLANNER_LAUNCHED("FFT scale");
    }
  }

 private:
  int x_, y_, threads_;
  bool inverse_;
  float scale_;
  int64_t floats_ = 0;
  std::unique_ptr<FftPlans> own_;  // without the executor's cache (declared before passes_)
  std::vector<std::pair<FftPass, cufftHandle>> passes_;
  size_t work_bytes_ = 0;
  unsigned blocks_ = 1;
};

KernelPtr fft(const Node& n) { return std::make_unique<Fft>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(fft) { r["FFT"] = fft; }

}  // namespace planner
