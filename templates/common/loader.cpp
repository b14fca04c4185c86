#include "loader.h"

#include "runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace planner {

// No size or offset may come near 2^63, where int64 sums wrap.
constexpr int64_t kMaxBytes = int64_t{1} << 62;

std::string op_label(const OpSpec& op) {
  return std::string("op '") + op.name + "' (" + op.op + ")";
}

std::string op_failure(const OpSpec& op, const std::string& what) {
  static const std::string probe = "/invalid_probabilities";
  const std::string name = op.name;
  if (name.size() > probe.size() &&
      name.compare(name.size() - probe.size(), probe.size(), probe) == 0)
    return "op '" + name.substr(0, name.size() - probe.size()) +
           "' (multinomial): probability tensor contains either inf, nan or element < 0, or "
           "a row sums to 0 (torch.multinomial refuses it)";
  return op_label(op) + ": " + what;
}

LoadedSchedule::LoadedSchedule(const std::string& path, int backend, const Concrete* concrete) {
  lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) throw std::runtime_error("cannot load schedule " + path + ": " + dlerror());
  using Get = const Schedule* (*)();
  auto get = reinterpret_cast<Get>(dlsym(lib_, "planner_schedule"));
  if (!get) throw std::runtime_error(path + " exports no planner_schedule");
  s_ = get();
  if (concrete) concretize(*concrete, path);
  index(path, backend);
}

LoadedSchedule::LoadedSchedule(const LoadedSchedule& training, const char* symbol,
                               const Concrete* concrete)
    : training_(&training.get()) {
  using Get = const Schedule* (*)();
  auto get = reinterpret_cast<Get>(training.exports(symbol) ? dlsym(training.lib_, symbol)
                                                            : nullptr);
  if (!get || !get())
    throw std::runtime_error(std::string("plan '") + training.get().name + "' has no " +
                             symbol + " (it was planned without one)");
  s_ = get();
  std::string label = std::string(symbol) + " of plan '" + training.get().name + "'";
  if (concrete) concretize(*concrete, label);
  index(label, training.get().backend);
}

void LoadedSchedule::concretize(const Concrete& c, const std::string& label) {
  const Schedule& s = *s_;
  if (c.shapes.size() != static_cast<size_t>(s.num_tensors) ||
      c.attrs.size() != static_cast<size_t>(s.num_ops))
    throw std::runtime_error(label + ": concrete shapes for " + std::to_string(c.shapes.size()) +
                             " tensors and " + std::to_string(c.attrs.size()) + " ops; the "
                             "schedule has " + std::to_string(s.num_tensors) + " and " +
                             std::to_string(s.num_ops));
  tensors_.assign(s.tensors, s.tensors + s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) {
    TensorSpec& t = tensors_[i];
    const std::vector<int64_t>& dims = c.shapes[i];
    std::string name = std::string("tensor '") + t.name + "'";
    if (dims.size() != static_cast<size_t>(t.rank))
      throw std::runtime_error(name + ": a concrete shape of rank " + std::to_string(dims.size()) +
                               ", the range's is rank " + std::to_string(t.rank));
    int64_t n = dtype_bytes(t.dtype);
    for (int k = 0; k < t.rank; ++k) {
      if (dims[k] < 0 || (dims[k] && n > t.nbytes / dims[k]))
        throw std::runtime_error(name + ": the concrete shape does not fit the " +
                                 std::to_string(t.nbytes) + " bytes the range gives it");
      n *= dims[k];
      t.shape[k] = dims[k];
    }
    t.nbytes = n;
  }
  attrs_ = c.attrs;  // never resized again: ops_ point into these strings
  ops_.assign(s.ops, s.ops + s.num_ops);
  for (int k = 0; k < s.num_ops; ++k) ops_[k].attrs = attrs_[k].c_str();
  own_ = s;
  own_.tensors = tensors_.data();
  own_.ops = ops_.data();
  s_ = &own_;
}

bool LoadedSchedule::exports(const char* symbol) const {
  return lib_ != nullptr && dlsym(lib_, symbol) != nullptr;
}

void LoadedSchedule::index(const std::string& path, int backend) {
  validate(path, backend);
  const Schedule& s = *s_;
  for (int i = 0; i < s.num_tensors; ++i) index_[s.tensors[i].name] = i;
  root_.resize(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) {
    int r = i;
    for (int hops = 0; s.tensors[r].alias_of >= 0; ++hops) {
      if (hops > s.num_tensors)
        throw std::runtime_error(std::string("tensor '") + s.tensors[i].name +
                                 "': its aliases form a cycle");
      r = s.tensors[r].alias_of;
    }
    root_[i] = r;
    // bind() points an alias at its root's memory (caller arrays too): it must fit inside.
    if (r != i && (s.tensors[i].nbytes > s.tensors[r].nbytes ||
                   s.tensors[i].offset != s.tensors[r].offset))
      throw std::runtime_error(std::string("tensor '") + s.tensors[i].name + "' aliases '" +
                               s.tensors[r].name + "' but does not sit inside its bytes");
  }
  sharing_.assign(s.num_tensors, {});
  for (int i = 0; i < s.num_tensors; ++i) sharing_[root_[i]].push_back(i);
}

int LoadedSchedule::tensor_index(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

// [offset, offset + bytes) inside [0, arena) without overflow.
static bool inside(int64_t offset, int64_t bytes, int64_t arena) {
  return offset >= 0 && bytes >= 0 && offset <= arena && bytes <= arena - offset;
}

// An evaluation schedule's tensor in the training arena: the training schedule's parameter
// or state tensor of the same name, bytes and dtype, at the same offset.
void LoadedSchedule::check_training(const std::string& label, const TensorSpec& t) const {
  if (!training_) throw std::runtime_error(label + ": bad store");
  for (int i = 0; i < training_->num_tensors; ++i) {
    const TensorSpec& u = training_->tensors[i];
    if (std::strcmp(u.name, t.name) != 0) continue;
    if (u.store != ARENA || (u.role != PARAM && u.role != STATE) || u.offset != t.offset ||
        u.nbytes != t.nbytes || u.dtype != t.dtype || t.alias_of >= 0 || u.rank != t.rank ||
        t.rank < 0 || t.rank > kMaxRank || !std::equal(t.shape, t.shape + t.rank, u.shape))
      break;
    return;
  }
  throw std::runtime_error(label + ": not a parameter or state tensor of the training "
                           "schedule at the same offset, bytes and dtype");
}

void LoadedSchedule::validate(const std::string& path, int backend) const {
  const Schedule& s = *s_;
  const char* names[] = {"cpu", "cuda"};
  if (s.backend != backend)
    throw std::runtime_error(path + ": the plan is for the " +
                             std::string(s.backend == CUDA ? names[1] : names[0]) +
                             " backend, this runtime is the " + names[backend == CUDA] + " one");
  if (s.num_tensors < 0 || s.num_ops < 0 || s.num_outputs < 0 || s.num_lanes < 0 ||
      s.arena_bytes < 0 || s.host_bytes < 0)
    throw std::runtime_error(path + ": negative counts in the schedule");
  if (s.arena_bytes > kMaxBytes || s.host_bytes > kMaxBytes)  // as planner/verify/graph.py
    throw std::runtime_error(path + ": an arena or host store of " +
                             std::to_string(std::max(s.arena_bytes, s.host_bytes)) +
                             " bytes is past 2^62");
  for (int i = 0; i < s.num_tensors; ++i) {
    const TensorSpec& t = s.tensors[i];
    std::string label = std::string("tensor '") + t.name + "'";
    if (t.store == TRAINING_ARENA) {
      check_training(label, t);
      continue;
    }
    if (t.store != ARENA && t.store != HOST_STORE)
      throw std::runtime_error(label + ": bad store");
    const int64_t room = t.store == HOST_STORE ? s.host_bytes : s.arena_bytes;
    if (!inside(t.offset, t.nbytes, room))
      throw std::runtime_error(label + ": bytes [" + std::to_string(t.offset) + ", +" +
                               std::to_string(t.nbytes) + ") lie outside the " +
                               std::to_string(room) + "-byte " +
                               (t.store == HOST_STORE ? "host store" : "arena"));
    if (t.store == HOST_STORE && t.alias_of >= 0)
      throw std::runtime_error(label + ": a host store copy aliases another tensor");
    if (t.rank < 0 || t.rank > kMaxRank) throw std::runtime_error(label + ": bad rank");
    if (t.dtype < F32 || t.dtype > U8) throw std::runtime_error(label + ": bad dtype");
    int64_t n = 1;
    for (int k = 0; k < t.rank; ++k) {
      if (t.shape[k] < 0 || (t.shape[k] && n > std::numeric_limits<int64_t>::max() / 8 / t.shape[k]))
        throw std::runtime_error(label + ": shape out of range");
      n *= t.shape[k];
    }
    // Kernels size their loops by the shape, the arena by nbytes: they must agree.
    if (n * dtype_bytes(t.dtype) != t.nbytes)
      throw std::runtime_error(label + ": " + std::to_string(t.nbytes) + " bytes, but its " +
                               "shape and dtype hold " + std::to_string(n * dtype_bytes(t.dtype)));
    if (t.alias_of >= s.num_tensors || t.updates >= s.num_tensors || t.alias_of < -1 ||
        t.updates < -1)
      throw std::runtime_error(label + ": alias or update index out of range");
    if (t.alias_of >= 0 && s.tensors[t.alias_of].store != t.store)
      throw std::runtime_error(label + ": aliases a tensor in another store");
    if (t.block != 0 && (backend != CPU || (t.block != 8 && t.block != 16) || t.rank != 4 ||
                         t.dtype != F32 || t.shape[1] % t.block != 0 ||
                         (t.role != ACTIVATION && t.role != GRAD)))
      throw std::runtime_error(label + ": a channel block of " + std::to_string(t.block) +
                               " is a float32 (N, C, H, W) activation's or gradient's on the " +
                               "cpu backend, C a multiple of 8 or 16");
  }
  int args = 0;
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    if (op.threads < 1 || op.lane < 0 || op.lane >= s.num_lanes || op.num_inputs < 0 ||
        op.num_outputs < 0 || op.num_cpus < 0 || op.num_waits < 0)
      throw std::runtime_error(op_label(op) + ": bad thread count, lane or counts");
    if (op.first_input != args || op.first_output != args + op.num_inputs)
      throw std::runtime_error(op_label(op) + ": arguments out of order");
    for (int a = 0; a < op.num_inputs + op.num_outputs; ++a) {
      int id = s.args[args + a];
      if (id < 0 || id >= s.num_tensors)
        throw std::runtime_error(op_label(op) + ": argument tensor index out of range");
    }
    args += op.num_inputs + op.num_outputs;
    for (int w = 0; w < op.num_waits; ++w) {
      int before = s.waits[op.first_wait + w];
      if (before < 0 || before >= k)
        throw std::runtime_error(op_label(op) + ": waits on an op that does not come before "
                                 "it in plan order");
    }
    if (op.scratch_bytes > 0 && !inside(op.scratch_offset, op.scratch_bytes, s.arena_bytes))
      throw std::runtime_error(op_label(op) + ": scratch bytes lie outside the arena");
  }
  if (s.args[args] != -1) throw std::runtime_error(path + ": argument list is malformed");
  for (int o = 0; o < s.num_outputs; ++o)
    if (s.outputs[o] < 0 || s.outputs[o] >= s.num_tensors)
      throw std::runtime_error(path + ": output index out of range");
}

Arena::Arena(int64_t bytes) : bytes_(bytes) {
  int64_t rounded = (std::max<int64_t>(bytes, 64) + 63) / 64 * 64;
  base_ = static_cast<char*>(std::aligned_alloc(64, static_cast<size_t>(rounded)));
  if (!base_)
    throw std::runtime_error("cannot allocate the arena (" + std::to_string(bytes) + " bytes)");
  std::memset(base_, 0, static_cast<size_t>(rounded));
}

Arena::~Arena() { std::free(base_); }

}  // namespace planner
