// The optimizer updates' element loops (planner/ops/optim.py), over n floats at the given
// pointers, shared by the per-parameter kernels (optim.cpp) and the update of a rank's shard
// (collective.cpp's ShardedUpdate); the element formulas are common/sharded_update.h's, which
// the CUDA executor's sharded update runs too. Outputs may be the inputs' bytes (in place).
#pragma once
#include <omp.h>

#include <cstdint>

#include "../loops.h"
#include "sharded_update.h"

namespace planner {

// lr and weight_decay are the step's inputs (a parameter group's scalars), read each run:
// with_hyperparameters gives them.
struct UpdateAttrs : UpdateHyper {
  float lr = 0, weight_decay = 0;
};

// The update attrs of node n (those its op takes; the rest keep their defaults).
inline UpdateAttrs update_attrs(const Node& n) {
  UpdateAttrs a;
  static_cast<UpdateHyper&>(a) = update_hyper(n);
  return a;
}

// `a` with this step's learning rate and weight decay (the scalars at lr and wd).
inline UpdateAttrs with_hyperparameters(UpdateAttrs a, const float* lr, const float* wd) {
  a.lr = *lr;
  a.weight_decay = *wd;
  return a;
}

inline void sgd_update(const float* p, const float* g, float* o, int64_t n, const UpdateAttrs& a) {
  const float lr = a.lr, wd = a.weight_decay;
#pragma omp parallel for simd if(parallel: n >= kGrain)
  for (int64_t i = 0; i < n; ++i) o[i] = sgd_element(p[i], g[i], lr, wd);
}

inline void momentum_update(const float* p, const float* g, const float* v, float* po, float* vo,
                            int64_t n, const UpdateAttrs& a) {
  const float lr = a.lr, m = a.momentum, wd = a.weight_decay;
  const bool nesterov = a.nesterov;
#pragma omp parallel for if(n >= kGrain)
  for (int64_t i = 0; i < n; ++i) momentum_element(p[i], g[i], v[i], po[i], vo[i], lr, wd, m,
                                                   nesterov);
}

// dampening (a.dampening != 0): t, this step's count, from 1 (the first is not dampened)
inline void dampened_momentum_update(const float* p, const float* g, const float* v, float t,
                                     float* po, float* vo, int64_t n, const UpdateAttrs& a) {
  const float lr = a.lr, m = a.momentum, d = a.dampening, wd = a.weight_decay;
  const bool first = t == 1.f;
#pragma omp parallel for if(n >= kGrain)
  for (int64_t i = 0; i < n; ++i) dampened_momentum_element(p[i], g[i], v[i], po[i], vo[i], lr,
                                                            wd, m, d, first);
}

// amsgrad: vmax, the running maximum of v, read and written beside m and v
inline void amsgrad_update(const float* p, const float* g, const float* m, const float* v,
                           const float* vmax, float t, float* po, float* mo, float* vo,
                           float* vmaxo, int64_t n, const UpdateAttrs& a) {
  const UpdateHyper hyper = a;
  const AdamStep s = adam_step(hyper, a.lr, a.weight_decay, t);
#pragma omp parallel for simd if(parallel: n >= kGrain)
  for (int64_t i = 0; i < n; ++i) amsgrad_element(p[i], g[i], m[i], v[i], vmax[i], po[i], mo[i],
                                                  vo[i], vmaxo[i], hyper, s);
}

// t: this step's count, from 1 (Adam's bias correction)
inline void adam_update(const float* p, const float* g, const float* m, const float* v, float t,
                        float* po, float* mo, float* vo, int64_t n, const UpdateAttrs& a) {
  const UpdateHyper hyper = a;
  const AdamStep s = adam_step(hyper, a.lr, a.weight_decay, t);
  // simd: the shared scalars are read through OpenMP's data block, which the stores could
  // alias as far as the compiler knows; every element is independent.
#pragma omp parallel for simd if(parallel: n >= kGrain)
  for (int64_t i = 0; i < n; ++i) adam_element(p[i], g[i], m[i], v[i], po[i], mo[i], vo[i],
                                               hyper, s);
}

}  // namespace planner
