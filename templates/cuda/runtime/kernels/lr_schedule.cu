// ScheduledLR [lr, t] -> lr * factor(t) on the GPU (planner/ops/lr_schedule.py): one thread
// reads the optimizer steps taken from device memory and writes the rate there, so a step
// with a recorded schedule reads nothing back to the host and stays capturable in a CUDA
// graph. The factor is common/lr_schedule.h's, as on the CPU.
#include "../kernel.h"
#include "lr_schedule.h"

namespace planner {
namespace {

__global__ void scheduled_lr(const float* lr, const int64_t* step, float* y, LRSchedule s) {
  *y = static_cast<float>(static_cast<double>(*lr) * lr_factor(s, *step));
}

class ScheduledLR : public Kernel {
 public:
  explicit ScheduledLR(const Node& n) : o_(scheduled_lr_operands(n)) {}
  void run(const Run& r) override {
    scheduled_lr<<<1, 1, 0, r.stream>>>(r.at<float>(o_.lr), r.at<int64_t>(o_.step),
                                        r.at<float>(o_.out), o_.schedule);
    PLANNER_LAUNCHED("scheduled_lr");
  }

 private:
  ScheduledLROperands o_;  // common/lr_schedule.h
};

KernelPtr make_scheduled_lr(const Node& n) { return std::make_unique<ScheduledLR>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(lr_schedule) { r["ScheduledLR"] = make_scheduled_lr; }

}  // namespace planner
