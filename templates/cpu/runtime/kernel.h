// The kernel interface of the CPU runtime: a Kernel is created once at load for one op of the
// schedule (primitives, plain-loop geometry), and run every step with the tensors' current
// addresses. Kernels allocate nothing when they run: temporaries and oneDNN scratchpads live in
// the scratch area the executor reserves in the arena (`scratch_bytes`).
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <memory>
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

struct TensorRef {
  int id;        // index into the schedule's tensors
  Shape shape;
  int dtype;
  int64_t size() const { return numel(shape); }
};

// What a kernel factory sees: the op, its tensors, attrs, and the oneDNN engine.
struct Node {
  const OpSpec* spec;
  std::vector<TensorRef> in, out;
  Attrs attrs;
  const dnnl::engine& engine;
  int threads;
};

// What a running kernel sees: every tensor's current address, its scratch area, the stream.
struct Run {
  char* const* ptr;   // per tensor id
  char* scratch;      // scratch_bytes() bytes, 64-byte aligned
  dnnl_stream_t stream;
  int threads;
  template <class T> T* at(int id) const { return reinterpret_cast<T*>(ptr[id]); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual size_t scratch_bytes() const { return 0; }
  virtual void run(const Run& r) = 0;
};

using KernelPtr = std::unique_ptr<Kernel>;
using Factory = KernelPtr (*)(const Node&);
using Registry = std::map<std::string, Factory>;

// Each family registers its ops (one .cpp per family, in kernels/).
void add_conv_kernels(Registry& r);
void add_matmul_kernels(Registry& r);
void add_pool_kernels(Registry& r);
void add_norm_kernels(Registry& r);
void add_eltwise_kernels(Registry& r);
void add_binary_kernels(Registry& r);
void add_reduce_kernels(Registry& r);
void add_shape_kernels(Registry& r);
void add_embedding_kernels(Registry& r);
void add_loss_kernels(Registry& r);
void add_optim_kernels(Registry& r);
void add_dropout_kernels(Registry& r);
void add_math_kernels(Registry& r);
void add_broadcast_kernels(Registry& r);
void add_pad_kernels(Registry& r);
void add_layer_norm_kernels(Registry& r);
void add_max_pool_kernels(Registry& r);
void add_softmax_kernels(Registry& r);

const Registry& registry();

// Thrown by kernels for bad inputs found while running (an id out of range): the executor
// adds the op's name.
struct StepError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace planner
