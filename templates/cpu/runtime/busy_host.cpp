#include "busy_host.h"

#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <thread>

namespace planner {

RunDelay::RunDelay() {
  fd_ = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
}

RunDelay::~RunDelay() {
  if (fd_ >= 0) close(fd_);
}

int64_t RunDelay::now() const {
  // "<ns on a CPU> <ns runnable, waiting for one> <timeslices>"
  char buf[96];
  if (fd_ < 0) return -1;
  ssize_t n = pread(fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char* end = nullptr;
  std::strtoll(buf, &end, 10);
  if (end == buf) return -1;
  char* rest = end;
  long long waited = std::strtoll(rest, &end, 10);
  return end == rest ? -1 : static_cast<int64_t>(waited);
}

// The anchor: a thread whose team of more threads than the host has CPUs stays parked in
// libgomp until released; it then returns, and libgomp lets the team go as the thread ends.
struct BusyHost::Anchor {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;

  static void* main(void* arg) {
    Anchor* a = static_cast<Anchor*>(arg);
    const int team = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 1;
    // Not an empty region: GCC drops one, and with it the team.
    std::atomic<int> joined{0};
#pragma omp parallel num_threads(team)
    joined.fetch_add(1, std::memory_order_relaxed);
    {
      std::unique_lock<std::mutex> lock(a->mu);
      a->cv.wait(lock, [a] { return a->released; });
    }
    delete a;
    return nullptr;
  }
};

BusyHost& BusyHost::process() {
  // Made at the first step, after the package's load environment (its own GOMP_SPINCOUNT,
  // set only while the runtime loads) is gone again: what is left is the user's.
  static BusyHost host;
  return host;
}

BusyHost::BusyHost()
    : user_set_(std::getenv("OMP_WAIT_POLICY") != nullptr ||
                std::getenv("GOMP_SPINCOUNT") != nullptr) {
  // A fork while another thread holds mu_ would leave it held in the child.
  pthread_atfork([] { process().mu_.lock(); }, [] { process().mu_.unlock(); },
                 [] {
                   BusyHost& h = process();
                   h.anchor_ = nullptr;  // its thread stayed in the parent
                   h.throttled_ = false;
                   h.mu_.unlock();
                 });
}

void BusyHost::after_step(double wall, double waited, int threads) {
  if (waited < 0.0 || !(wall > 0.0) || threads < 1) return;
  const double share = std::min(1.0, waited / (wall * threads));
  std::lock_guard<std::mutex> lock(mu_);
  share_ = steps_++ == 0 ? share : kAlpha * share + (1.0 - kAlpha) * share_;
  if (user_set_) return;
  if (throttled_) {
    quiet_ = share_ < kQuiet ? quiet_ + 1 : 0;
    if (quiet_ >= hold_for_) let_go();
    return;
  }
  // Just after a probe one busy step is enough: each spinning step there is a slow one.
  const bool probing = released_ >= 0 && steps_ - released_ <= kRelapse;
  if (share_ > kBusy || (probing && share > kBusy)) {
    hold_for_ = probing ? std::min(2 * hold_for_, kLastHold) : kFirstHold;
    hold();
  }
}

double BusyHost::busy_share() const {
  std::lock_guard<std::mutex> lock(mu_);
  return share_;
}

bool BusyHost::throttled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return throttled_;
}

void BusyHost::hold() {
  auto* a = new Anchor();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const bool started = pthread_create(&thread, &attr, &Anchor::main, a) == 0;
  pthread_attr_destroy(&attr);
  if (!started) {  // no thread to spare: libgomp's own spinning stays
    delete a;
    return;
  }
  anchor_ = a;
  throttled_ = true;
  quiet_ = 0;
}

void BusyHost::let_go() {
  Anchor* a = anchor_;
  anchor_ = nullptr;
  throttled_ = false;
  released_ = steps_;
  std::lock_guard<std::mutex> lock(a->mu);
  a->released = true;
  a->cv.notify_one();
}

}  // namespace planner
