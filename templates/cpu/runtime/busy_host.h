// libgomp's spinning, throttled while the host is busy.
//
// A thread of an OpenMP team that waits (for the team's other threads at a barrier, or, idle,
// for the next team) spins GOMP_SPINCOUNT `pause`s before it sleeps: 300,000 (~4 ms) unless the
// process set another count before libgomp loaded. In PyTorch's process libgomp is PyTorch's,
// loaded with torch before the planner could set its own count (codegen/backends.py), so the
// executor's teams spin libgomp's default. On a quiet host that is what makes consecutive
// parallel regions cheap. Beside busy neighbours it is a collapse: the thread a spinning one
// waits for has been descheduled, and the spinning one holds for milliseconds the CPU that the
// other needs. gpt's trainer stepped 2.3 ms quiet and 1.4-2.2 s beside four 2-thread BLAS
// loops on the 2-core VM (every schedule, its one-core variant too: the ops whose bits follow
// the team keep their two threads, planner/memory/variants.py), the process burning ~190 ms
// of CPU a step where it needs 4; with GOMP_SPINCOUNT=3000 set before the process started,
// 14 ms (bench/results/2026-11-29-busy-host-spinning.md).
//
// libgomp's count cannot be changed once it is loaded, but libgomp itself cuts it to 100
// spins (GOMP_SPINCOUNT's min(count, 1000) where one is set) whenever it manages more threads
// than the process had CPUs when it loaded (libgomp/config/linux/wait.h, do_spin). So while
// the host is busy the executor keeps that true: an anchor thread holds a parked team of more
// threads than the host has CPUs, its workers asleep in libgomp's dock (no CPU), and every
// team in the process, PyTorch's too, spins briefly and sleeps. When the host is quiet again
// the anchor lets its team go and libgomp's own count applies again.
//
// Busy is read from the process's own threads, not the load average (which counts this
// process, lags by a minute, and sees no cgroup): each step's threads' time runnable but not
// running (the kernel's run delay, /proc/thread-self/schedstat), as a share of the step's
// wall time, a moving average over steps. Above kBusy the anchor is held. Throttled, a short
// step's threads barely wait even on a busy host (the kernel favours a thread that slept over
// a neighbour that spins), so a low run delay then says little: the anchor is let go after
// `hold_for` steps below kQuiet, a probe. A probe that finds the host busy again within
// kRelapse steps doubles `hold_for` (kFirstHold up to kLastHold) and a quiet one resets it, as
// the schedule choice probes the main schedule (choice.h): on a busy host a probe's one or two
// spinning steps come ever more rarely. A user who set OMP_WAIT_POLICY or GOMP_SPINCOUNT keeps
// what they set: no anchor. A forked child starts unthrottled: the anchor thread stayed in the
// parent (the child's copy of libgomp still counts its workers, so the child's teams spin
// briefly, as on a busy host, until it execs or exits).
#pragma once
#include <cstdint>
#include <mutex>

namespace planner {

// The calling thread's run delay: nanoseconds it was runnable but not running, since it
// started. Made (and read) by the thread it measures; -1 where the kernel keeps no count.
class RunDelay {
 public:
  RunDelay();
  ~RunDelay();
  RunDelay(const RunDelay&) = delete;
  RunDelay& operator=(const RunDelay&) = delete;
  int64_t now() const;

 private:
  int fd_ = -1;
};

class BusyHost {
 public:
  static constexpr double kBusy = 0.2, kQuiet = 0.05, kAlpha = 0.25;
  static constexpr int64_t kFirstHold = 16, kLastHold = 4096, kRelapse = 64;

  // The process's (libgomp is one per process).
  static BusyHost& process();
  // One step that took `wall` seconds on `threads` threads, which spent `waited` seconds
  // (summed over them) runnable but not running; waited < 0: not measured (ignored).
  void after_step(double wall, double waited, int threads);
  // The moving average of the steps' run-delay shares.
  double busy_share() const;
  bool throttled() const;
  // Whether the user chose libgomp's waiting themselves (then nothing is throttled).
  bool user_set() const { return user_set_; }
 private:
  BusyHost();
  void hold();     // the anchor's team parked (mu_ held)
  void let_go();   // the anchor's team released (mu_ held)

  mutable std::mutex mu_;
  bool user_set_;
  double share_ = 0.0;
  int64_t steps_ = 0;
  bool throttled_ = false;
  int64_t hold_for_ = kFirstHold;  // quiet steps, throttled, before a probe lets the anchor go
  int64_t quiet_ = 0;              // consecutive quiet steps while throttled
  int64_t released_ = -1;          // steps_ when the anchor was last let go (-1: never)
  struct Anchor;
  Anchor* anchor_ = nullptr;  // owned by its thread once released
};

}  // namespace planner
