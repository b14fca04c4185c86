// The optimizer updates' element loops (planner/ops/optim.py), over n floats at the given
// pointers, shared by the per-parameter kernels (optim.cpp) and ZeRO-1's update of a rank's
// shard (collective.cpp's ShardedUpdate). Outputs may be the inputs' bytes (in place).
#pragma once
#include <omp.h>

#include <cmath>
#include <cstdint>

#include "../loops.h"

namespace planner {

// lr and weight_decay are the step's inputs (a parameter group's scalars), read each run:
// with_hyperparameters gives them.
struct UpdateAttrs {
  float lr = 0, weight_decay = 0, momentum = 0.9f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  bool nesterov = false, decoupled = false;
};

// The update attrs of node n (those its op takes; the rest keep their defaults).
inline UpdateAttrs update_attrs(const Node& n) {
  UpdateAttrs a;
  if (n.attrs.has("decoupled")) a.decoupled = n.attrs.b("decoupled");
  if (n.attrs.has("momentum")) a.momentum = static_cast<float>(n.attrs.f("momentum"));
  if (n.attrs.has("nesterov")) a.nesterov = n.attrs.b("nesterov");
  if (n.attrs.has("beta1")) a.beta1 = static_cast<float>(n.attrs.f("beta1"));
  if (n.attrs.has("beta2")) a.beta2 = static_cast<float>(n.attrs.f("beta2"));
  if (n.attrs.has("epsilon")) a.epsilon = static_cast<float>(n.attrs.f("epsilon"));
  return a;
}

// `a` with this step's learning rate and weight decay (the scalars at lr and wd).
inline UpdateAttrs with_hyperparameters(UpdateAttrs a, const float* lr, const float* wd) {
  a.lr = *lr;
  a.weight_decay = *wd;
  return a;
}

// p' = p - lr (g + wd p)
inline void sgd_update(const float* p, const float* g, float* o, int64_t n, const UpdateAttrs& a) {
  const float lr = a.lr, wd = a.weight_decay;
  if (wd != 0.f) {
#pragma omp parallel for if(n >= kGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = p[i] - lr * (g[i] + wd * p[i]);
  } else {
#pragma omp parallel for if(n >= kGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = p[i] - lr * g[i];
  }
}

// g' = g + wd p; v' = m v + g'; p' = p - lr (nesterov ? g' + m v' : v')
inline void momentum_update(const float* p, const float* g, const float* v, float* po, float* vo,
                            int64_t n, const UpdateAttrs& a) {
  const float lr = a.lr, m = a.momentum, wd = a.weight_decay;
  const bool nesterov = a.nesterov;
#pragma omp parallel for if(n >= kGrain)
  for (int64_t i = 0; i < n; ++i) {
    float gi = wd != 0.f ? g[i] + wd * p[i] : g[i];
    float vn = m * v[i] + gi;
    float step = nesterov ? gi + m * vn : vn;
    vo[i] = vn;
    po[i] = p[i] - lr * step;
  }
}

// torch.optim.Adam with bias correction by the step count t (this step's, from 1); decoupled:
// AdamW's p (1 - lr wd) in place of the gradient's wd p
inline void adam_update(const float* p, const float* g, const float* m, const float* v, float t,
                        float* po, float* mo, float* vo, int64_t n, const UpdateAttrs& a) {
  const float b1 = a.beta1, b2 = a.beta2, eps = a.epsilon;
  const float wd = a.decoupled ? 0.f : a.weight_decay;
  const float shrink = a.decoupled ? 1.f - a.lr * a.weight_decay : 1.f;
  const float step_size = a.lr / (1.f - std::pow(b1, t));
  const float root = std::sqrt(1.f - std::pow(b2, t));
  // simd: the shared scalars are read through OpenMP's data block, which the stores could
  // alias as far as the compiler knows; every element is independent.
#pragma omp parallel for simd if(n >= kGrain)
  for (int64_t i = 0; i < n; ++i) {
    float gi = wd != 0.f ? g[i] + wd * p[i] : g[i];
    float mn = b1 * m[i] + (1.f - b1) * gi;
    float vn = b2 * v[i] + (1.f - b2) * gi * gi;
    float denom = std::sqrt(vn) / root + eps;
    mo[i] = mn;
    vo[i] = vn;
    po[i] = p[i] * shrink - step_size * (mn / denom);
  }
}

}  // namespace planner
