#include "executor.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace planner {

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    add_conv_kernels(reg);
    add_matmul_kernels(reg);
    add_pool_kernels(reg);
    add_norm_kernels(reg);
    add_eltwise_kernels(reg);
    add_binary_kernels(reg);
    add_reduce_kernels(reg);
    add_shape_kernels(reg);
    add_embedding_kernels(reg);
    add_loss_kernels(reg);
    add_optim_kernels(reg);
    add_dropout_kernels(reg);
    add_math_kernels(reg);
    add_broadcast_kernels(reg);
    add_pad_kernels(reg);
    add_layer_norm_kernels(reg);
    add_max_pool_kernels(reg);
    add_softmax_kernels(reg);
    return reg;
  }();
  return r;
}

static TensorRef ref(const Schedule& s, int id) {
  const TensorSpec& t = s.tensors[id];
  return TensorRef{id, Shape(t.shape, t.shape + t.rank), t.dtype};
}

static std::string op_label(const OpSpec& op) {
  return std::string("op '") + op.name + "' (" + op.op + ")";
}

Executor::Executor(const std::string& schedule_path)
    : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
  lib_ = dlopen(schedule_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) throw std::runtime_error("cannot load schedule " + schedule_path + ": " + dlerror());
  using Get = const Schedule* (*)();
  auto get = reinterpret_cast<Get>(dlsym(lib_, "planner_schedule"));
  if (!get) throw std::runtime_error(schedule_path + " exports no planner_schedule");
  s_ = get();
  const Schedule& s = *s_;
  for (int i = 0; i < s.num_tensors; ++i) index_[s.tensors[i].name] = i;
  root_.resize(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) {
    int r = i;
    while (s.tensors[r].alias_of >= 0) r = s.tensors[r].alias_of;
    root_[i] = r;
  }

  // Kernels, each created with its planned team size on this (the running) thread.
  const Registry& reg = registry();
  int saved_threads = omp_get_max_threads();
  size_t scratch = 0;
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    auto it = reg.find(op.op);
    if (it == reg.end()) throw std::runtime_error(op_label(op) + ": no CPU kernel for this op");
    std::vector<TensorRef> in, out;
    for (int a = 0; a < op.num_inputs; ++a) in.push_back(ref(s, s.args[op.first_input + a]));
    for (int a = 0; a < op.num_outputs; ++a) out.push_back(ref(s, s.args[op.first_output + a]));
    omp_set_num_threads(op.threads);
    try {
      Node node{&op, in, out, Attrs(op.attrs), engine_, op.threads};
      kernels_.push_back(it->second(node));
    } catch (const std::exception& e) {
      omp_set_num_threads(saved_threads);
      throw std::runtime_error(op_label(op) + ": " + e.what());
    }
    scratch = std::max(scratch, kernels_.back()->scratch_bytes());
  }
  omp_set_num_threads(saved_threads);

  // One arena: the tensors at their planned offsets, then the scratch area (ops run one at a
  // time, so they share it).
  int64_t tensors = (s.arena_bytes + 63) / 64 * 64;
  scratch_bytes_ = static_cast<int64_t>(scratch);
  arena_bytes_ = tensors + scratch_bytes_;
  arena_ = static_cast<char*>(std::aligned_alloc(64, std::max<int64_t>(64, (arena_bytes_ + 63) / 64 * 64)));
  if (!arena_) throw std::runtime_error("cannot allocate the arena (" +
                                        std::to_string(arena_bytes_) + " bytes)");
  std::memset(arena_, 0, arena_bytes_);
  ptr_.resize(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) ptr_[i] = arena_ + s.tensors[i].offset;
  stats_.assign(s.num_ops, OpStats{});
  loaded_.assign(s.num_tensors, 0);
}

std::vector<std::string> Executor::missing(const std::vector<int>& also_given) const {
  std::vector<std::string> out;
  for (int i = 0; i < s_->num_tensors; ++i) {
    if (!required(s_->tensors[i]) || loaded_[i]) continue;
    if (std::find(also_given.begin(), also_given.end(), i) == also_given.end())
      out.push_back(s_->tensors[i].name);
  }
  return out;
}

Executor::~Executor() {
  kernels_.clear();
  std::free(arena_);
  // The schedule library stays loaded: its data may back strings handed to Python.
}

int Executor::tensor_index(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

Shape Executor::shape(int id) const {
  const TensorSpec& t = s_->tensors[id];
  return Shape(t.shape, t.shape + t.rank);
}

void Executor::bind(int id, char* p) {
  char* target = p ? p : arena_ + s_->tensors[id].offset;
  for (int i = 0; i < s_->num_tensors; ++i)
    if (root_[i] == id) ptr_[i] = target;
}

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t k = 0; k < names.size() && k < 5; ++k) out += (k ? ", '" : "'") + names[k] + "'";
  if (names.size() > 5) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

void Executor::step() {
  const Schedule& s = *s_;
  const std::vector<std::string> absent = missing();
  if (!absent.empty())
    throw std::runtime_error("parameters not loaded: " + name_list(absent) +
                             "; call load_params first (or create the executor with "
                             "Executor(init=True) to start from the graph's init hints)");
  char* scratch = arena_ + (arena_bytes_ - scratch_bytes_);
  int saved_threads = omp_get_max_threads();
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    omp_set_num_threads(op.threads);
    Run r{ptr_.data(), scratch, stream_.get(), op.threads};
    auto t0 = std::chrono::steady_clock::now();
    try {
      kernels_[k]->run(r);
    } catch (const std::exception& e) {
      omp_set_num_threads(saved_threads);
      throw StepError(op_label(op) + ": " + e.what());
    }
    auto t1 = std::chrono::steady_clock::now();
    stats_[k].seconds += std::chrono::duration<double>(t1 - t0).count();
    stats_[k].calls += 1;
  }
  omp_set_num_threads(saved_threads);
  steps_ += 1;
}

void Executor::reset_stats() {
  stats_.assign(s_->num_ops, OpStats{});
  steps_ = 0;
}

}  // namespace planner
