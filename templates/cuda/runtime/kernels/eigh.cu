// MatrixEigh (planner/ops/linalg.py) on the GPU through cuSOLVER: cusolverDnXsyevBatched on a
// copy of the batch's matrices in the op's scratch, then one thread per eigenvector that
// writes it into v row-major, signed as the op's reference and the CPU kernel sign theirs (its
// entry of largest magnitude, the first such, positive). cuSOLVER reads column-major: the
// row-major matrix is its transpose, the same symmetric matrix, with the triangles swapped, so
// the node's lower triangle is cuSOLVER's upper; its eigenvectors come out as columns, i.e.
// rows of the row-major copy. Eigenvalues ascending, as LAPACK's (cuSOLVER's syev). A matrix
// whose info is not 0 (no convergence) gets NaN values and vectors, as the CUDA linalg kernels
// give NaN where the CPU raises. float32 only (the CUDA runtime has no float64 tensors).
// The scratch holds the copy, the infos and cuSOLVER's device workspace (asked at load); its
// host workspace, if it asks for one, is the kernel's own.
#include <cusolverDn.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../kernel.h"

namespace planner {
namespace {

void check_cusolver(cusolverStatus_t s, const char* what) {
  if (s != CUSOLVER_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuSOLVER status " + std::to_string(s));
}
#define PLANNER_CUSOLVER(call) check_cusolver((call), #call)

constexpr size_t kEighAlign = 256;

size_t eigh_aligned(size_t bytes) { return (bytes + kEighAlign - 1) / kEighAlign * kEighAlign; }

// Eigenvector j of matrix b: row j of the column-major result `a`, written as column j of v.
__global__ void eigh_vectors(const float* __restrict__ a, const int* __restrict__ info,
                             float* __restrict__ w, float* __restrict__ v, int64_t batch,
                             int64_t n) {
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < batch * n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = t / n, j = t % n;
    const float* vec = a + b * n * n + j * n;
    float* out = v + b * n * n + j;
    if (info[b] != 0) {
      w[b * n + j] = NAN;
      for (int64_t i = 0; i < n; ++i) out[i * n] = NAN;
      continue;
    }
    int64_t top = 0;
    for (int64_t i = 1; i < n; ++i)
      if (fabsf(vec[i]) > fabsf(vec[top])) top = i;
    const float sign = vec[top] < 0 ? -1.0f : 1.0f;
    for (int64_t i = 0; i < n; ++i) out[i * n] = sign * vec[i];
  }
}

class Eigh : public Kernel {
 public:
  explicit Eigh(const Node& n)
      : x_(n.in[0].id), w_(n.out[0].id), v_(n.out[1].id), threads_(block_threads(n)) {
    const Shape& s = n.in[0].shape;
    if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2] || n.in[0].dtype != F32)
      throw std::runtime_error("MatrixEigh: x must be float32 [..., n, n], got " +
                               shape_text(s));
    n_ = s.back();
    batch_ = numel(s) / std::max<int64_t>(1, n_ * n_);
    // the node's lower triangle, row-major, is the column-major matrix's upper one
    uplo_ = n.attrs.has("upper") && n.attrs.b("upper") ? CUBLAS_FILL_MODE_LOWER
                                                       : CUBLAS_FILL_MODE_UPPER;
    blocks_ = blocks_for(batch_ * n_, threads_);
    if (batch_ * n_ == 0) return;
    PLANNER_CUSOLVER(cusolverDnCreate(&handle_));
    PLANNER_CUSOLVER(cusolverDnCreateParams(&params_));
    size_t host = 0;
    PLANNER_CUSOLVER(cusolverDnXsyevBatched_bufferSize(
        handle_, params_, CUSOLVER_EIG_MODE_VECTOR, uplo_, n_, CUDA_R_32F, nullptr, n_,
        CUDA_R_32F, nullptr, CUDA_R_32F, &device_work_, &host, batch_));
    host_work_.resize(host);
  }
  ~Eigh() override {
    if (params_) cusolverDnDestroyParams(params_);
    if (handle_) cusolverDnDestroy(handle_);
  }
  // the matrices' copy, the infos, cuSOLVER's workspace, each 256-byte aligned
  size_t scratch_bytes() const override {
    return copy_bytes() + info_bytes() + device_work_;
  }
  size_t temp_bytes() const override { return copy_bytes() + info_bytes(); }
  std::string detail() const override { return "cusolver:syevBatched"; }
  void run(const Run& r) override {
    if (batch_ * n_ == 0) return;
    char* copy = r.scratch;
    int* info = reinterpret_cast<int*>(r.scratch + copy_bytes());
    char* work = r.scratch + copy_bytes() + info_bytes();
    PLANNER_CUDA(cudaMemcpyAsync(copy, r.at<float>(x_), sizeof(float) * batch_ * n_ * n_,
                                 cudaMemcpyDeviceToDevice, r.stream));
    PLANNER_CUSOLVER(cusolverDnSetStream(handle_, r.stream));
    PLANNER_CUSOLVER(cusolverDnXsyevBatched(
        handle_, params_, CUSOLVER_EIG_MODE_VECTOR, uplo_, n_, CUDA_R_32F, copy, n_,
        CUDA_R_32F, r.at<float>(w_), CUDA_R_32F, work, device_work_,
        host_work_.empty() ? nullptr : host_work_.data(), host_work_.size(), info, batch_));
    eigh_vectors<<<blocks_, threads_, 0, r.stream>>>(reinterpret_cast<const float*>(copy),
                                                      info, r.at<float>(w_), r.at<float>(v_),
                                                      batch_, n_);
    PLANNER_LAUNCHED("MatrixEigh vectors");
  }

 private:
  size_t copy_bytes() const { return eigh_aligned(sizeof(float) * batch_ * n_ * n_); }
  size_t info_bytes() const { return eigh_aligned(sizeof(int) * batch_); }

  int x_, w_, v_, threads_;
  int64_t n_ = 0, batch_ = 0;
  cublasFillMode_t uplo_ = CUBLAS_FILL_MODE_UPPER;
  cusolverDnHandle_t handle_ = nullptr;
  cusolverDnParams_t params_ = nullptr;
  size_t device_work_ = 0;
  std::vector<char> host_work_;
  unsigned blocks_ = 1;
};

KernelPtr eigh(const Node& n) { return std::make_unique<Eigh>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(eigh) { r["MatrixEigh"] = eigh; }

}  // namespace planner
