// ShardedUpdate (ZeRO-1 and ZeRO-3, planner/ops/collective.py) as both backends read it:
//   [p_1..p_k, s, state shards, (t), lr, wd] -> [p_1'..p_k', state shards']
// its operands, which floats of which parameter lie in a rank's shard, and the optimizer's
// element formulas (planner/ops/optim.py), so that a CPU and a GPU run of a plan update alike.
// The CPU's per-parameter updates (cpu/runtime/kernels/update_math.h) use the same formulas.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective.h"
#include "host_device.h"
#include "runtime.h"

namespace planner {

// The optimizer's hyperparameters besides the learning rate and weight decay (a parameter
// group's scalars, read each step where the backend runs the update).
struct UpdateHyper {
  float momentum = 0.9f, dampening = 0.f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  bool nesterov = false, decoupled = false, amsgrad = false;
};

// The hyperparameters node n's op takes (the rest keep their defaults). N: a backend's Node.
template <class N>
UpdateHyper update_hyper(const N& n) {
  UpdateHyper a;
  if (n.attrs.has("decoupled")) a.decoupled = n.attrs.b("decoupled");
  if (n.attrs.has("momentum")) a.momentum = static_cast<float>(n.attrs.f("momentum"));
  if (n.attrs.has("nesterov")) a.nesterov = n.attrs.b("nesterov");
  if (n.attrs.has("beta1")) a.beta1 = static_cast<float>(n.attrs.f("beta1"));
  if (n.attrs.has("beta2")) a.beta2 = static_cast<float>(n.attrs.f("beta2"));
  if (n.attrs.has("epsilon")) a.epsilon = static_cast<float>(n.attrs.f("epsilon"));
  if (n.attrs.has("dampening")) a.dampening = static_cast<float>(n.attrs.f("dampening"));
  if (n.attrs.has("amsgrad")) a.amsgrad = n.attrs.b("amsgrad");
  return a;
}

// p' = p - lr (g + wd p)
PLANNER_HOST_DEVICE inline float sgd_element(float p, float g, float lr, float wd) {
  return wd != 0.f ? p - lr * (g + wd * p) : p - lr * g;
}

// g' = g + wd p; v' = m v + g'; p' = p - lr (nesterov ? g' + m v' : v')
PLANNER_HOST_DEVICE inline void momentum_element(float p, float g, float v, float& po, float& vo,
                                                 float lr, float wd, float momentum,
                                                 bool nesterov) {
  const float gi = wd != 0.f ? g + wd * p : g;
  const float vn = momentum * v + gi;
  vo = vn;
  po = p - lr * (nesterov ? gi + momentum * vn : vn);
}

// With dampening d (torch.optim.SGD's): v' = g' on the first step (first), else
// m v + (1 - d) g'; p' = p - lr v' (torch refuses nesterov with dampening).
PLANNER_HOST_DEVICE inline void dampened_momentum_element(float p, float g, float v, float& po,
                                                          float& vo, float lr, float wd,
                                                          float momentum, float dampening,
                                                          bool first) {
  const float gi = wd != 0.f ? g + wd * p : g;
  const float vn = first ? gi : momentum * v + (1.f - dampening) * gi;
  vo = vn;
  po = p - lr * vn;
}

// torch.optim.Adam's per-step scalars with bias correction by the step count t (this step's,
// from 1); decoupled: AdamW's p (1 - lr wd) in place of the gradient's wd p.
struct AdamStep {
  float wd, shrink, step_size, root;
};
PLANNER_HOST_DEVICE inline AdamStep adam_step(const UpdateHyper& a, float lr, float wd, float t) {
  return {a.decoupled ? 0.f : wd, a.decoupled ? 1.f - lr * wd : 1.f,
          lr / (1.f - powf(a.beta1, t)), sqrtf(1.f - powf(a.beta2, t))};
}
PLANNER_HOST_DEVICE inline void adam_element(float p, float g, float m, float v, float& po,
                                             float& mo, float& vo, const UpdateHyper& a,
                                             const AdamStep& s) {
  const float gi = s.wd != 0.f ? g + s.wd * p : g;
  const float mn = a.beta1 * m + (1.f - a.beta1) * gi;
  const float vn = a.beta2 * v + (1.f - a.beta2) * gi * gi;
  const float denom = sqrtf(vn) / s.root + a.epsilon;
  mo = mn;
  vo = vn;
  po = p * s.shrink - s.step_size * (mn / denom);
}

// amsgrad: the running maximum of v' (v_max') in the denominator.
PLANNER_HOST_DEVICE inline void amsgrad_element(float p, float g, float m, float v, float vmax,
                                                float& po, float& mo, float& vo, float& vmaxo,
                                                const UpdateHyper& a, const AdamStep& s) {
  const float gi = s.wd != 0.f ? g + s.wd * p : g;
  const float mn = a.beta1 * m + (1.f - a.beta1) * gi;
  const float vn = a.beta2 * v + (1.f - a.beta2) * gi * gi;
  const float vm = (vmax > vn || vmax != vmax) ? vmax : vn;  // NaN kept, as torch.maximum
  const float denom = sqrtf(vm) / s.root + a.epsilon;
  mo = mn;
  vo = vn;
  vmaxo = vm;
  po = p * s.shrink - s.step_size * (mn / denom);
}

// A ShardedUpdate node's operands: the parameters' bucket (laid out at `alignment`), the
// gradient shard, the state shards (SGD none, ApplyMomentum v, ApplyAdam m and v), Adam's step
// count, lr, wd, and with `skip_on_overflow` the overflow flag (fp16-mixed: every rank's the
// same, reduced over the ranks); the outputs: the parameters, then the state shards.
class ShardedUpdateOperands {
 public:
  template <class N>
  ShardedUpdateOperands(const N& n, int64_t alignment)
      : update(n.attrs.s("update")),
        slots(update == "SGD" ? 0 : update == "ApplyMomentum" ? 1 : 2),
        params(std::vector<TensorRef>(n.in.begin(), n.in.begin() + param_count(n)),
               n.attrs.i("ranks"), alignment),
        hyper(update_hyper(n)) {
    require_f32(n);
    if (update != "SGD" && update != "ApplyMomentum" && update != "ApplyAdam")
      throw std::runtime_error("a sharded update runs SGD, ApplyMomentum or ApplyAdam");
    const size_t k = params.size();
    if (n.out.size() != k + static_cast<size_t>(slots))
      throw std::runtime_error("a sharded update writes its parameters and state shards");
    for (size_t j = 0; j <= static_cast<size_t>(slots); ++j)
      if (n.in[k + j].size() != params.shard())
        throw std::runtime_error("a sharded update's gradient and state are one shard each");
    grad = n.in[k].id;
    for (int j = 0; j < slots; ++j) {
      state.push_back(n.in[k + 1 + j].id);
      state_out.push_back(n.out[k + j].id);
    }
    if (update == "ApplyAdam") step_count = n.in[k + 1 + slots].id;
    const size_t flag = skips(n) ? 1 : 0;
    if (flag) found_inf = n.in.back().id;
    lr = n.in[n.in.size() - 2 - flag].id;
    wd = n.in[n.in.size() - 1 - flag].id;
    for (size_t j = 0; j < k; ++j) out.push_back(n.out[j].id);
  }

  // f(j, a, e, i, count) for each parameter j with floats in rank `rank`'s shard: `count` of
  // them, from float a of the bucket, float e of the parameter, float i of the shard (the
  // padding is left alone).
  template <class F>
  void each_piece(int rank, F f) const {
    const int64_t lo = rank * params.shard();
    for (size_t j = 0; j < params.size(); ++j) {
      const auto [a, b] = params.in_shard(j, rank);
      if (a < b) f(j, a, a - params.at(j), a - lo, b - a);
    }
  }

  std::string update;
  int slots;
  ShardedBucket params;
  UpdateHyper hyper;
  int grad = -1, step_count = -1, lr = -1, wd = -1, found_inf = -1;
  std::vector<int> state, state_out, out;

 private:
  template <class N>
  static bool skips(const N& n) {
    return n.attrs.has("skip_on_overflow") && n.attrs.b("skip_on_overflow");
  }
  template <class N>
  static size_t param_count(const N& n) {
    const std::string u = n.attrs.s("update");
    const size_t rest = 3 + (u == "SGD" ? 0 : u == "ApplyMomentum" ? 1 : 3) + (skips(n) ? 1 : 0);
    if (n.in.size() <= rest) throw std::runtime_error("a sharded update needs parameters");
    return n.in.size() - rest;
  }
};

}  // namespace planner
