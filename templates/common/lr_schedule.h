// ScheduledLR's schedule as both backends read it (planner/ops/lr_schedule.py, PyTorch's
// schedulers): its attributes parsed once, and the factor at an optimizer step by the
// reference's formulas in double, on the host and on a device (one definition, so a CPU and a
// GPU run of one plan follow the same rates).
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "host_device.h"
#include "runtime.h"

namespace planner {

enum LRScheduleKind : int { LR_CONSTANT, LR_WARMUP, LR_COSINE, LR_WARMUP_COSINE, LR_STEP,
                            LR_ONE_CYCLE };

struct LRSchedule {
  int kind;
  int64_t total, warmup, step_size;
  double start_factor, min_factor, gamma, pct_start, div_factor, final_div_factor;
};

inline LRSchedule lr_schedule(const Attrs& a) {
  // The op's shape rule checked the ranges (LRSchedule's validators).
  const std::string kind = a.s("kind");
  const char* kinds[] = {"constant", "warmup", "cosine", "warmup-cosine", "step", "one-cycle"};
  int code = -1;
  for (int k = 0; k < 6; ++k)
    if (kind == kinds[k]) code = k;
  if (code < 0) throw std::runtime_error("ScheduledLR: unknown schedule kind '" + kind + "'");
  return {code,          a.i("total"),   a.i("warmup"),    a.i("step_size"),
          a.f("start_factor"), a.f("min_factor"), a.f("gamma"), a.f("pct_start"),
          a.f("div_factor"),   a.f("final_div_factor")};
}

PLANNER_HOST_DEVICE inline double lr_linear(const LRSchedule& s, int64_t step) {
  if (s.warmup == 0) return 1.0;
  const double done = static_cast<double>(step < s.warmup ? step : s.warmup) / s.warmup;
  return s.start_factor + (1.0 - s.start_factor) * done;
}

PLANNER_HOST_DEVICE inline double lr_cosine(const LRSchedule& s, int64_t step, int64_t span) {
  const double low = s.min_factor;
  return low + (1.0 - low) * (1 + cos(M_PI * static_cast<double>(step) / span)) / 2;
}

PLANNER_HOST_DEVICE inline double lr_cos_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1);
}

// A ScheduledLR node's operands and schedule, from either backend's kernel-factory Node `n`:
// a float32 first rate, an int64 step count, a float32 rate.
struct ScheduledLROperands {
  int lr, step, out;
  LRSchedule schedule;
};

template <class N>
ScheduledLROperands scheduled_lr_operands(const N& n) {
  if (n.in[0].dtype != F32 || n.in[1].dtype != I64 || n.out[0].dtype != F32)
    throw std::runtime_error("ScheduledLR: takes a float32 rate and an int64 step count");
  return {n.in[0].id, n.in[1].id, n.out[0].id, lr_schedule(n.attrs)};
}

// The learning rate at optimizer step `step` (0-based) over a group's first one.
PLANNER_HOST_DEVICE inline double lr_factor(const LRSchedule& s, int64_t step) {
  switch (s.kind) {
    case LR_WARMUP:
      return lr_linear(s, step);
    case LR_COSINE:
      return lr_cosine(s, step, s.total);
    case LR_WARMUP_COSINE:
      return step < s.warmup ? lr_linear(s, step) : lr_cosine(s, step - s.warmup,
                                                              s.total - s.warmup);
    case LR_STEP:
      return pow(s.gamma, static_cast<double>(step / s.step_size));
    case LR_ONE_CYCLE: {
      const double first = 1.0 / s.div_factor, last = first / s.final_div_factor;
      const double up = s.pct_start * s.total - 1, down = static_cast<double>(s.total) - 1;
      const double t = static_cast<double>(step);
      return t <= up ? lr_cos_anneal(first, 1.0, t / up)
                     : lr_cos_anneal(1.0, last, (t - up) / (down - up));
    }
    default:
      return 1.0;
  }
}

}  // namespace planner
