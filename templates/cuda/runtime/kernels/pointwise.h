// Launching the TVM-generated kernels (generated/tvm_pointwise.cuh) and the hand-written sums
// (reduce.cu), shared by pointwise.cu and reduce.cu.
#pragma once
#include <utility>
#include <vector>

#include "../kernel.h"

namespace planner {

struct TvmKernel;  // generated/tvm_pointwise.cuh

// The index space of a generated kernel: n elements, and for a broadcast the output's
// collapsed dims with each input's strides along them (0 where it broadcasts).
struct Geometry {
  int64_t n = 0;
  Shape dims;
  std::vector<Shape> strides;
  static Geometry flat(int64_t n);
  static Geometry broadcast(const Shape& out, const std::vector<Shape>& ins);
};

// One generated kernel bound at load (op, dtypes, form, rank, nearest block, its scalar
// arguments); run() fills in the tensors' addresses and launches on the op's stream. A tensor
// id of -1 is the op's scratch area. In a low float type with every input contiguous with the
// output and an even count, the paired kernel (two elements per thread) is bound too, and a
// step runs it when every address is 4-byte aligned.
class GeneratedLaunch {
 public:
  GeneratedLaunch(const Node& n, const char* op, const std::vector<TensorRef>& in,
                  const std::vector<TensorRef>& out, const Geometry& geometry, bool broadcast);
  void run(const Run& r);
  bool paired() const { return two_.fn != nullptr; }

 private:
  union Slot {
    void* p;
    float f;
    double d;
    int64_t l;
    int32_t i;
    uint64_t u;
  };
  struct Bound {
    const void* fn = nullptr;
    int block = 256;
    int64_t threads = 0;  // one per element, or per pair
    std::vector<Slot> slots;
    std::vector<void*> argv;
    std::vector<std::pair<size_t, int>> pointers;  // (slot, tensor id)
    // Dropout's `seed` param: moved to the data-parallel rank's stream at launch
    size_t seed_slot = static_cast<size_t>(-1);
    uint64_t seed = 0;
  };
  static Bound bind(const Node& n, const char* op, const TvmKernel& k,
                    const std::vector<TensorRef>& in, const std::vector<TensorRef>& out,
                    const Geometry& geometry, int64_t threads);
  static void launch(Bound& b, const Run& r);
  Bound one_, two_;
};

// y = x summed down to `to` (a shape x broadcasts from: 1 on the summed axes, or fewer axes),
// times `scale`, in double; hand-written (reduce.cu): one block per output element.
class SumTo {
 public:
  SumTo(const Shape& from, const Shape& to, double scale, int block);
  // x, y device addresses (float32)
  void run(const float* x, float* y, cudaStream_t stream) const;
  // x of dtype `x_dtype` (float32, bfloat16 or float16), y float32
  void run(const void* x, int x_dtype, float* y, cudaStream_t stream) const;

  static constexpr int kMaxRank = 8;
  struct Dims {
    int rank = 0;
    int64_t size[kMaxRank] = {};
    int64_t stride[kMaxRank] = {};
  };

 private:
  int64_t outputs_ = 0, reduced_ = 1;
  Dims kept_, summed_;
  double scale_;
  int block_;
};

}  // namespace planner
