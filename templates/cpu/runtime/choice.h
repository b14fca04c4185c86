// Which schedule a step runs: the plan's main one (pinned teams co-running on its lanes) or a
// variant for fewer free cores (planner/memory/variants.py: one unpinned lane). No oneDNN,
// no threads: the executor asks before each step and reports the step's time after it.
//
// The rule (docs/executor.md, "Busy machines"):
//  - never a schedule that needs more cores than the process is granted (affinity mask,
//    cgroup quota: granted.h); when the running one stops fitting, the fastest predicted one
//    that fits;
//  - each schedule's step time is tracked (a moving average, the first step after a switch
//    left out: its pages and caches are cold); when the running schedule has become slower
//    than its own best by kSlow, or runs kSlowPredicted times its prediction (other
//    processes hold its cores), and by more than kNoise seconds (a sub-millisecond step's
//    jitter is no contention), fitting schedules not measured yet are tried, one at a time,
//    for kMeasured steps each;
//  - once, kTrialAfter steps into the run (a step above kNoise), a trial: every fitting
//    schedule is measured, one after another, for kMeasured steps, the running one afresh
//    first (the run's first steps fault pages in and start teams: measured then, the main
//    schedule looked slower than a variant measured after it, and mobilenet_v2's default ran
//    its one-core variant, 1.4x slower, on the 2-core VM); the plan's prediction may misprice
//    this machine (a cost table measured with its operands in cache, a machine the table was
//    not measured on), and a run of thousands of steps should take the schedule that runs
//    fastest here (issue 60: ResNet-18's main schedule ran 1.15x its one-lane variant on the
//    2-core VM, predicted 0.78x). The trial keeps the fastest predicted schedule unless one
//    measured beside it is faster by kMargin, then forgets the others' times (they were the
//    trial's conditions);
//  - a measured schedule replaces the running one only when faster by kMargin (hysteresis);
//  - now and then (every kFirstProbe steps, doubling to kLastProbe while probes lose) the
//    fastest predicted schedule is measured again, so the executor goes back to the main
//    schedule when the machine quietens; at once when the running schedule itself has become
//    faster than it ran when it was chosen by kSlow (and kNoise): the others' times, measured
//    under the contention that has gone, are stale.
// A user may pin one (pin(i)); pin(-1) returns to the rule. The executor pins the main
// schedule when built with adaptive=false (executor.h). Every variant computes the main
// schedule's bits (planner/memory/variants.py: reductions split by the data, not the team;
// oneDNN ops whose split follows the team keep the main thread count), so the choice changes
// the step's time only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace planner {

class ScheduleChoice {
 public:
  struct Option {
    std::string name;
    int cores;          // the fewest granted cores it runs on
    double predicted;   // the plan's predicted step, seconds
    double mean = 0.0;  // measured step, moving average (seconds)
    int64_t steps = 0;  // steps measured since it was last (re)started
    int64_t runs = 0;   // steps it ran, all told
    double best = 0.0;  // the lowest moving average since it was (re)started
    double settled = 0.0;  // its moving average when it was chosen (kMeasured steps in)
  };
  static constexpr double kSlow = 1.3, kSlowPredicted = 3.0, kNoise = 5e-4;
  static constexpr double kMargin = 0.9, kAlpha = 0.25;
  static constexpr int64_t kMeasured = 3, kFirstProbe = 64, kLastProbe = 4096;
  static constexpr int64_t kTrialAfter = 8;

  explicit ScheduleChoice(std::vector<Option> options) : options_(std::move(options)) {}

  // The schedule the next step runs, given the cores the process is granted now.
  int before_step(int granted) {
    granted_ = granted;
    if (pinned_ >= 0) return current_;
    if (!fits(current_)) {
      int best = fastest_predicted();
      switch_to(best, "granted " + std::to_string(granted) + " core(s): " +
                          options_[current_].name + " needs " +
                          std::to_string(options_[current_].cores));
      return current_;
    }
    if (++since_probe_ >= probe_every_) {
      since_probe_ = 0;
      int best = fastest_predicted();
      if (best != current_) {
        probe_ = best;
        probe_every_ = std::min(probe_every_ * 2, kLastProbe);
        restart(best);
        switch_to(best, "measuring " + options_[best].name + " again (the machine may have "
                        "quietened)");
      }
    }
    return current_;
  }

  void after_step(double seconds) {
    Option& o = options_[current_];
    o.runs += 1;
    steps_ += 1;
    if (warm_) {
      o.mean = o.steps ? (1 - kAlpha) * o.mean + kAlpha * seconds : seconds;
      o.steps += 1;
    }
    warm_ = true;
    if (pinned_ >= 0 || o.steps < kMeasured) return;
    if (o.steps == kMeasured || o.mean < o.best) o.best = o.mean;
    if (o.steps == kMeasured) o.settled = o.mean;
    if (!tried_all_ && steps_ >= kTrialAfter) return trial(o);
    // A measured schedule faster by the margin wins (a probe that wins resets the backoff).
    int best = current_;
    for (int i = 0; i < static_cast<int>(options_.size()); ++i)
      if (fits(i) && options_[i].steps >= kMeasured &&
          options_[i].mean < options_[best].mean * kMargin)
        best = i;
    if (best != current_) {
      switch_to(best, "measured " + ms(options_[best].mean) + " per step against " +
                          ms(o.mean) + " on " + o.name);
      return;
    }
    if (probe_ == current_) {
      probe_ = -1;
      probe_every_ = kFirstProbe;  // the probe won or tied: keep it, probe rarely again
    }
    const int fastest = fastest_predicted();
    if (current_ != fastest && o.mean * kSlow < o.settled && o.settled - o.mean > kNoise) {
      // The machine has quietened: measure the fastest predicted schedule now.
      o.settled = o.mean;
      probe_ = fastest;
      restart(fastest);
      switch_to(fastest, o.name + " now takes " + ms(o.mean) + " per step, faster than when " +
                             "it was chosen: measuring " + options_[fastest].name + " again");
      return;
    }
    const bool slowed = o.mean > o.best * kSlow && o.mean - o.best > kNoise;
    const bool contended = o.mean > o.predicted * kSlowPredicted && o.mean - o.predicted > kNoise;
    if (slowed || contended) {
      for (int i = 0; i < static_cast<int>(options_.size()); ++i)
        if (i != current_ && fits(i) && options_[i].steps < kMeasured) {
          switch_to(i, o.name + " took " + ms(o.mean) + " per step (its best " + ms(o.best) +
                           ", predicted " + ms(o.predicted) + "): trying " +
                           options_[i].name);
          return;
        }
    }
  }

  // Run option i from now on (-1: back to the rule).
  void pin(int i, std::string why = "pinned by set_variant") {
    pinned_ = i;
    if (i >= 0) switch_to(i, std::move(why));
    else reason_ = "chosen by the rule again (set_variant(None))";
  }
  int current() const { return current_; }
  int pinned() const { return pinned_; }
  int granted() const { return granted_; }
  int64_t switches() const { return switches_; }
  const std::string& reason() const { return reason_; }
  const std::vector<Option>& options() const { return options_; }

 private:
  // A step of the trial (the rule above) on the running schedule o, measured kMeasured steps.
  void trial(const Option& o) {
    if (o.mean <= kNoise) {  // a sub-millisecond step: its jitter is any difference
      tried_all_ = true;
      return;
    }
    if (!trial_started_) {
      trial_started_ = true;
      for (Option& each : options_) each.steps = 0;
      reason_ = "measuring every schedule once on this machine, " + o.name + " afresh first";
      return;
    }
    for (int i = 0; i < static_cast<int>(options_.size()); ++i)
      if (fits(i) && options_[i].steps < kMeasured) {
        switch_to(i, "measuring every schedule once on this machine: " + o.name + " took " +
                         ms(o.mean) + " per step, " + options_[i].name + " predicted " +
                         ms(options_[i].predicted));
        return;
      }
    int fastest = current_;
    for (int i = 0; i < static_cast<int>(options_.size()); ++i)
      if (fits(i) && options_[i].mean < options_[fastest].mean) fastest = i;
    const int predicted = fastest_predicted();
    const int chosen =
        options_[predicted].mean * kMargin <= options_[fastest].mean ? predicted : fastest;
    tried_all_ = true;
    switch_to(chosen, "measured every schedule once: " + options_[chosen].name + " " +
                          ms(options_[chosen].mean) + " per step, the fastest" +
                          (chosen == predicted && chosen != fastest
                               ? " predicted, within the margin of " + options_[fastest].name
                               : ""));
    // The others' times are of the trial's conditions, not a later one's (a contention later
    // tries them afresh, as before the trial).
    for (int i = 0; i < static_cast<int>(options_.size()); ++i)
      if (i != current_) restart(i);
  }

  bool fits(int i) const { return options_[i].cores <= granted_; }
  int fastest_predicted() const {
    int best = -1;
    for (int i = 0; i < static_cast<int>(options_.size()); ++i)
      if (fits(i) && (best < 0 || options_[i].predicted < options_[best].predicted)) best = i;
    // Nothing fits (granted fewer cores than the smallest variant needs): the smallest.
    return best >= 0 ? best : static_cast<int>(options_.size()) - 1;
  }
  void restart(int i) { options_[i].steps = 0; }
  void switch_to(int i, std::string why) {
    reason_ = std::move(why);
    if (i == current_) return;
    if (current_ == probe_) probe_ = -1;  // the probe lost: its backoff stands
    current_ = i;
    warm_ = false;
    switches_ += 1;
  }
  static std::string ms(double s) { return std::to_string(static_cast<int>(s * 1e6)) + " us"; }

  std::vector<Option> options_;  // 0: the main schedule; then the variants, most cores first
  int current_ = 0;
  int pinned_ = -1;
  int granted_ = 1 << 30;
  bool warm_ = false;
  bool tried_all_ = false;      // the trial is over (kTrialAfter)
  bool trial_started_ = false;  // the trial has begun: every schedule re-measured
  int64_t steps_ = 0;       // steps run, all schedules together
  int probe_ = -1;  // the schedule being measured again, until it wins, ties or loses
  int64_t since_probe_ = 0, probe_every_ = kFirstProbe;
  int64_t switches_ = 0;
  std::string reason_ = "the plan's schedule (nothing contends)";
};

}  // namespace planner
