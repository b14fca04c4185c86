// UpdateLossScale's attributes as both backends read them (planner/ops/loss_scale.py, PyTorch's
// GradScaler): the factor a clean run of `growth_interval` steps grows the scale by, and the
// factor an overflow shrinks it by.
#pragma once
#include "runtime.h"

namespace planner {

struct LossScaleRule {
  float growth, backoff, interval;
};

inline LossScaleRule loss_scale_rule(const Attrs& attrs) {
  // The op's shape rule checked the ranges (planner/ops/loss_scale.py).
  return {static_cast<float>(attrs.f("growth_factor")),
          static_cast<float>(attrs.f("backoff_factor")),
          static_cast<float>(attrs.i("growth_interval"))};
}

}  // namespace planner
