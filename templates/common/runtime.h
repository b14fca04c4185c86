// What every backend's runtime shares: shapes, dtype sizes, the attribute parser, the errors a
// step raises. No oneDNN, no CUDA: the CPU (templates/cpu) and CUDA (templates/cuda) kernel
// contexts build on it.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule.h"

namespace planner {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
int dtype_bytes(int dtype);
std::string shape_text(const Shape& s);

// An op's attributes, parsed from the schedule's "key=v1,v2;..." text. Every accessor throws
// std::runtime_error naming the key when it is missing or malformed.
class Attrs {
 public:
  explicit Attrs(const char* text);
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  int64_t i(const std::string& key) const;
  uint64_t u(const std::string& key) const;
  double f(const std::string& key) const;
  bool b(const std::string& key) const { return i(key) != 0; }
  std::string s(const std::string& key) const;
  std::vector<int64_t> ints(const std::string& key) const;

 private:
  const std::string& raw(const std::string& key) const;
  std::map<std::string, std::string> values_;
};

// A permutation attr of a rank-`rank` tensor (MatMul's perm_a / perm_b / perm_y): the identity
// when absent; anything but a permutation of 0..rank-1 is refused, naming the key.
std::vector<int> permutation(const Attrs& attrs, const std::string& key, size_t rank);

struct TensorRef {
  int id;        // index into the schedule's tensors
  Shape shape;
  int dtype;
  // Channels per block of an (N, C, H, W) image the step keeps channel-blocked: (N, C/B, H, W,
  // B), oneDNN's nChw16c / nChw8c (planner/step/blocked.py); 0: plain.
  int block = 0;
  int64_t size() const { return numel(shape); }
};

// An axis attr (negative counts from the end) as an index into a shape of `rank` dims.
inline int norm_axis(int64_t axis, size_t rank) {
  int r = static_cast<int>(rank == 0 ? 1 : rank);
  return static_cast<int>((axis % r + r) % r);
}

// A shape seen as (outer, extent, inner) around the axis attribute `key` names: how every op
// that works along one axis (softmax, cumsum, layer normalization's rows) lays its tensor
// out, read once for both backends. A scalar is one element along axis 0.
struct AxisSplit {
  int axis = 0;
  int64_t outer = 1, extent = 1, inner = 1;
};

inline AxisSplit axis_split(const Attrs& attrs, const Shape& s, const char* key = "axis") {
  AxisSplit a;
  a.axis = norm_axis(attrs.i(key), s.size());
  if (s.empty()) return a;
  for (size_t k = 0; k < s.size(); ++k) {
    if (static_cast<int>(k) < a.axis) a.outer *= s[k];
    if (static_cast<int>(k) > a.axis) a.inner *= s[k];
  }
  a.extent = s[a.axis];
  return a;
}

// For kernels written for float32 alone: refuses any other tensor (int64 indices may come in).
// `N` is a backend's kernel-factory Node (its `in` and `out` TensorRefs).
template <class N>
void require_f32(const N& n) {
  for (const TensorRef& t : n.in)
    if (t.dtype != F32 && t.dtype != I64)
      throw std::runtime_error("this kernel takes float32 (and int64 index) tensors");
  for (const TensorRef& t : n.out)
    if (t.dtype != F32) throw std::runtime_error("this kernel writes float32 tensors");
}

// Thrown by kernels for bad inputs found while running (an id out of range): the executor
// adds the op's name.
struct StepError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace planner
