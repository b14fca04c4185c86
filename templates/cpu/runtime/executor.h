// The CPU executor: loads a schedule (common/loader.h), creates every op's kernel once at load
// (on the lane that runs it, with the op's planned thread count), places every tensor and
// every op's scratch area in one arena, and runs the step on the plan's lanes (lanes.h): ops
// co-run on their planned CPUs as the plan placed them. `concurrent=false` runs the ops one
// at a time in plan order on the calling thread instead (the reference the concurrent run
// must match). A step allocates nothing.
//
// In a forked child (executor_core.h, "Fork") an executor the child inherited runs that serial
// reference, on the child's worker thread (its lanes' threads stayed in the parent, and are
// never touched there: not stepped, placed, pinned, let go nor joined); one made in the child
// runs as in any process. The bits are the parent's: the same kernels on the same teams.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "choice.h"
#include "evaluation.h"
#include "executor_core.h"
#include "kernel.h"
#include "lanes.h"
#include "weight_layouts.h"
#include "weight_packs.h"

namespace planner {

class Executor : public ExecutorCore {
 public:
  // Loads the schedule library at `path` (a shared library exporting planner_schedule).
  // jitter_us > 0 makes every lane sleep up to that long before each op (tests: adversarial
  // interleavings); a step that makes no progress for watchdog_seconds throws. adaptive (the
  // default): choose between the main schedule and its variants by the cores granted and the
  // step times measured (choice.h); every variant computes the main schedule's bits
  // (planner/memory/variants.py), so a switch changes the time, not the numbers. false runs
  // the main schedule whatever the load.
  // `concrete` / `evaluation_concrete`: a range plan's schedule (and its evaluation schedule)
  // at smaller shapes (loader.h's Concrete); null: the library's own shapes.
  // keep_weight_layouts: hold convolution weights, their gradients and optimizer state in the
  // layout their kernels read (weight_layouts.h); false holds every tensor plain.
  // `arena_of`: run on that executor's arena and host store (Memory) instead of new ones: an
  // executor of the same library (every tensor at the same offset; at other concrete shapes),
  // whose parameters and state this one then reads and updates in place, with nothing copied
  // between them (a range plan's shapes: planner/torch/shapes.py). The two take turns
  // (ExecutorCore::share_arena_lock): one call at a time, and no step while the other's is in
  // flight. Each keeps its own kernels, scratch blocks, weight packs and evaluation arena.
  // Both hold every tensor plain from then on (`arena_of`'s kept layouts released, this
  // one's never kept): a kept layout is its kernel's choice at its own shapes.
  explicit Executor(const std::string& schedule_path, bool concurrent = true,
                    int jitter_us = 0, double watchdog_seconds = 600.0, bool adaptive = true,
                    const Concrete* concrete = nullptr,
                    const Concrete* evaluation_concrete = nullptr,
                    bool keep_weight_layouts = true,
                    Executor* arena_of = nullptr);
  ~Executor() override;

  char* data(int id) const { return ptr_[id]; }
  // Point an input's bytes at caller memory for the next step (nullptr: back to its arena slot).
  void bind(int id, char* p);

  // Whether the next step runs on the plan's lanes (an executor built concurrent, not switched
  // off by set_concurrent).
  bool concurrent() const { return live_lanes() && on_lanes_; }
  // Between steps, for an executor built concurrent: run on its lanes (true) or one op at a
  // time in plan order on the calling thread's OpenMP team (false: the lanes' teams are let
  // go, so their threads no longer count against the process's OpenMP threads; the kernels
  // are the same, and so are the bits).
  void set_concurrent(bool on);
  int lanes() const { return schedule().num_lanes; }
  // Per op: the scratch bytes its kernel needs, and whether the plan's area held them (else it
  // got a block of its own at load: the plan under-estimated the library's scratchpad).
  size_t scratch_needed(int op) const { return kernels_[op]->scratch_bytes(); }
  std::string impl(int op) const { return kernels_[op] ? kernels_[op]->impl() : ""; }
  bool scratch_planned(int op) const { return overflow_[op] == nullptr; }
  int64_t arena_bytes() const { return memory_->arena.bytes(); }
  const char* arena_base() const { return memory_->arena.base(); }
  // The executors on this one's arena (arena_of), itself included: 1 where it has its own.
  int64_t arena_sharers() const { return memory_.use_count(); }
  // Whether [p, p + bytes) overlaps memory the step writes (the arena, unplanned scratch): a
  // feed there is copied in before the step, never read in place.
  bool holds(const void* p, int64_t bytes) const;
  // The host store: offloaded copies, a block of its own beside the arena (plan: host_bytes).
  int64_t host_store_bytes() const { return memory_->host_store.bytes(); }
  int64_t unplanned_scratch_bytes() const { return unplanned_; }
  // B operands several MatMuls read, packed once per step beside the arena (weight_packs.h).
  int64_t packed_weight_bytes() const { return packs_.bytes(); }
  // The tensors held in their kernels' layouts (weight_layouts.h): the edges (params,
  // load_params, evaluate) reorder them through it. Between steps.
  WeightLayouts& weight_layouts() { return *layouts_; }
  // Every family held in a kept layout released to plain for good (another executor comes
  // onto this arena: arena_of). Between steps.
  void release_weight_layouts();
  const WeightLayouts& weight_layouts() const { return *layouts_; }
  char* const* tensor_ptrs() const { return ptr_.data(); }
  int64_t pinnings() const { return live_lanes() ? lanes_->pinnings() : 0; }
  // When op k started and ended in the last step, in seconds from the step's start: the
  // timeline that shows what the plan's simulator leaves out (the lanes' hand-offs).
  std::pair<double, double> last_span(int k) const { return span_[k]; }
  // The process group of a data-parallel plan's collective ops (common/collective.h; set
  // between steps).
  void set_collective(Collective c) { collective_ = std::move(c); }
  // The process group's collective (null before set_collective): an evaluation's
  // all-gathers (ZeRO-3) run on it too.
  const Collective* collective() const { return collective_ ? &collective_ : nullptr; }
  // Where the plan's CPUs and its comm lane run in this process (Lanes::place; a rank that
  // shares its host). Between steps; nothing to place when ops run one at a time.
  void place(std::vector<int> cpu_map, std::vector<int> loose) {
    if (live_lanes()) lanes_->place(std::move(cpu_map), std::move(loose));
  }
  // Teams on the plan's CPUs (true, the default) or where the OS puts them (Lanes::set_pinning).
  void set_pinning(bool on) {
    if (live_lanes()) lanes_->set_pinning(on);
  }
  // The schedule for fewer free cores (choice.h): which one the next step runs is chosen by
  // what the process is granted and measures, unless pinned (a name from schedule_choice's
  // options; "" returns to the rule), on the lanes and one op at a time alike. Between steps.
  void set_variant(const std::string& name);
  // The choice of the way the next step runs: on the lanes, or one op at a time.
  const ScheduleChoice& schedule_choice() const { return concurrent() ? choice_ : team_choice_; }

  // ---- evaluation from the same build (Plan.evaluation; evaluation.h) -------------------
  // Whether the schedule library exports an evaluation schedule (a training plan's).
  bool has_evaluation() const { return loaded_.exports("planner_evaluation_schedule"); }
  // The evaluation, its kernels created at the first call (between steps: the caller holds
  // mutex()). Throws when the plan carries none.
  Evaluation& evaluation();

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<dnnl::stream> lane_streams_;  // one per lane: lanes never share a stream
  std::vector<KernelPtr> kernels_;
  // The arena and the host store: this executor's own, or those of the executors sharing
  // them (arena_of), freed with the last of them.
  struct Memory {
    Memory(int64_t arena_bytes, int64_t host_bytes) : arena(arena_bytes), host_store(host_bytes) {}
    Arena arena;
    Arena host_store;
  };
  std::shared_ptr<Memory> memory_;
  // `arena_of`'s memory after checking it lays out `s`'s tensors alike, else a new one.
  static std::shared_ptr<Memory> memory_for(const Schedule& s, const Executor* arena_of);
  std::vector<char*> scratch_;                 // each op's scratch area
  std::vector<std::unique_ptr<Arena>> overflow_;
  int64_t unplanned_ = 0;
  std::vector<char*> ptr_;                     // current address of every tensor
  WeightPacks packs_;
  std::unique_ptr<WeightLayouts> layouts_;     // decided before any kernel is made
  int64_t pass_ = 0;                           // runs over the schedule, failed ones too
  double watchdog_seconds_;
  std::chrono::steady_clock::time_point step_began_;
  std::vector<std::pair<double, double>> span_;  // per op: (start, end) in the last step
  Collective collective_;
  // A variant: the plan's ops on one unpinned lane with their own thread counts, its kernels
  // made the first time it runs (oneDNN sizes a kernel's work split for its team).
  struct Variant {
    std::vector<OpSpec> ops;
    Schedule schedule;
    std::vector<KernelPtr> kernels;
    std::vector<char*> scratch;
    std::vector<std::unique_ptr<Arena>> overflow;
    std::unique_ptr<dnnl::stream> stream;
    std::unique_ptr<Lanes> lanes;
  };
  std::vector<std::unique_ptr<Variant>> variants_;  // choice_ option v + 1
  ScheduleChoice choice_;
  // One op at a time on the calling thread's team (concurrent=false, set_concurrent(false)):
  // the same schedules at their own thread counts, chosen by the same rule from that way's own
  // step times (a step on the team takes other times than on the lanes). On a busy host the
  // main schedule's two-thread ops wait for a descheduled thread at every parallel region;
  // the variant for the cores granted does not (torch.compile(backend="planner")'s team way
  // chooses as the trainer's lanes do).
  ScheduleChoice team_choice_;
  int64_t quota_checked_ = -1;
  int quota_ = 1 << 30;
  int jitter_us_;
  std::unique_ptr<Lanes> lanes_;  // its threads stop before the rest is destroyed
  // The lanes, where their threads run in this process (not in a forked child's copy).
  Lanes* live_lanes() const { return inherited() ? nullptr : lanes_.get(); }
  bool on_lanes_ = true;          // set_concurrent
  Lanes* last_lanes_ = nullptr;   // the lanes of the last step's schedule (main or a variant)
  std::unique_ptr<Evaluation> evaluation_;  // made by the first evaluation()
  std::unique_ptr<Concrete> evaluation_concrete_;  // its shapes, for a range plan's
  // This step is a micro-batch before its optimizer step's last: the optimizer_step_only
  // ops do not run (Schedule::micro_batches; set by run_step before any op runs).
  bool micro_batch_only_ = false;
  bool micro_batch_only() const;
  // Runs every op: on the lanes, or one at a time in plan order (run_serial); per-op times go
  // to stats.
  void run_step() override;
  // One step one op at a time in plan order on the calling thread's team, each op on the
  // thread count of the schedule team_choice_ gives (a forked child's inherited executor: the
  // main schedule's).
  void run_serial();
  void check_feeds() override;

  char* home(int id) const;  // tensor id's bytes in the arena or the host store
  void create(int k);
  void run(int k);
  KernelPtr make_kernel(const OpSpec& op);
  // Op k's conv_kernel_weights (weight_layouts.h), asked on its planned team size.
  std::optional<dnnl::memory::desc> kernel_weights(int k);
  // Op k's scratch: its planned area when that holds what the kernel asks for, else a block
  // of its own in *overflow (never shared: ops may run at the same time), counted unplanned.
  char* scratch_area(const OpSpec& op, const Kernel& kernel, std::unique_ptr<Arena>* overflow);
  static std::vector<ScheduleChoice::Option> choice_options(const Schedule& s);
  void run_kernel(int k, Kernel& kernel, char* scratch, dnnl::stream& stream, int threads);
  Variant& variant(int v);  // made the first time it is asked for
  Lanes& variant_lanes(int v) { return *variant(v).lanes; }
  int granted_cores();
};

}  // namespace planner
