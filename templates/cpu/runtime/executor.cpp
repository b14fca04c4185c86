#include "executor.h"

#include <omp.h>
#include <pthread.h>

#include "busy_host.h"
#include "granted.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>

namespace planner {

// Lets the calling thread's OpenMP workers go before a step on lanes whose teams do not share
// a CPU with another lane. In PyTorch's process (the torch front end) the caller's team is
// PyTorch's, and the two share one libgomp (PyTorch's, loaded first, before the executor's
// load environment could set its spinning: codegen/backends.py). That costs a step twice:
// after each PyTorch op of the user's loop PyTorch's idle worker spins for milliseconds on a
// CPU the step's ops need, and while its threads are counted libgomp holds more threads than
// CPUs and cuts every team's spinning to ~1 us, so each parallel region of the step wakes its
// workers from sleep. resnet18's 2-thread, one-lane step took 29.8 ms after a 256x256 torch
// matmul and 11.3 with the caller's team let go (2-core Xeon VM; bench/RESULTS.md). PyTorch
// starts a new team at its next parallel op. Where lanes share CPUs, the lanes' own workers
// then spin libgomp's default milliseconds on the CPU another lane's thread waits for (a
// transformer encoder's main schedule 7.7 -> 10.3 ms): the caller's team is left as it is.
// Inside a parallel region (an executor called from an OpenMP thread) nothing is let go.
// In a forked child the calling thread's pool may be the parent's copy, whose workers are not
// there to let go (the pause would wait for them): nothing is let go.
static void release_callers_team(const Lanes& lanes) {
  if (!lanes.shares_cpus() && omp_get_level() == 0 && !forked_child())
    omp_pause_resource_all(omp_pause_soft);
}

namespace {
// Fork: the forking thread's libgomp pool is let go just before the fork (its workers joined),
// so the child's only thread starts a pool of its own at its first team, as threads made in
// the child do, and PyTorch's ops there (MKL's GEMM with its own thread count, ATen's loops)
// run as in the parent, at the parent's thread count (which Dynamo's guards read). Without
// that, a team started from the child's copy of the pool waits forever for workers that
// stayed in the parent (libgomp's known fork problem). Where the pool cannot be let go (a fork
// from inside a parallel region, or from a thread whose pool is itself such a copy), the
// child's forking thread runs one thread per region instead. Per thread: fork copies the
// forking thread's value into the child.
thread_local bool pool_is_parents_copy = false;
thread_local bool pool_let_go = false;
[[maybe_unused]] const int pool_let_go_at_fork = pthread_atfork(
    [] {
      pool_let_go = !pool_is_parents_copy && omp_get_level() == 0 &&
                    omp_pause_resource_all(omp_pause_soft) == 0;
    },
    nullptr,
    [] {
      pool_is_parents_copy = !pool_let_go;
      if (pool_is_parents_copy) omp_set_num_threads(1);
    });
}  // namespace

Executor::Executor(const std::string& schedule_path, bool concurrent, int jitter_us,
                   double watchdog_seconds, bool adaptive, const Concrete* concrete,
                   const Concrete* evaluation_concrete, bool keep_weight_layouts,
                   Executor* arena_of)
    : ExecutorCore(schedule_path, CPU, concrete),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_),
      memory_(memory_for(loaded_.get(), arena_of)),
      packs_(loaded_.get()),
      watchdog_seconds_(watchdog_seconds),
      choice_(choice_options(loaded_.get())),
      team_choice_(choice_options(loaded_.get())),
      jitter_us_(jitter_us) {
  if (evaluation_concrete) evaluation_concrete_ = std::make_unique<Concrete>(*evaluation_concrete);
  if (arena_of) share_arena_lock(*arena_of);
  // NaN compares false: a step would never time out, or (0, negative) fail at once.
  if (!(watchdog_seconds > 0.0) || watchdog_seconds == HUGE_VAL)
    throw std::invalid_argument("watchdog_seconds=" + std::to_string(watchdog_seconds) +
                                ": give a finite number of seconds > 0 (how long a step may "
                                "make no progress before it raises)");
  if (jitter_us < 0)
    throw std::invalid_argument("jitter_us=" + std::to_string(jitter_us) +
                                ": give microseconds >= 0");
  const Schedule& s = loaded_.get();
  int host_cpus = omp_get_num_procs();
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    if (registry().find(op.op) == registry().end())
      throw std::runtime_error(op_label(op) + ": no CPU kernel for this op");
    if (op.threads > std::max(host_cpus, 1) * 4)
      throw std::runtime_error(op_label(op) + ": " + std::to_string(op.threads) +
                               " threads on a host of " + std::to_string(host_cpus) +
                               " CPUs; plan it for this host");
  }
  ptr_.resize(s.num_tensors);
  for (int i = 0; i < s.num_tensors; ++i) ptr_[i] = home(i);
  // On a shared arena every tensor is plain: a kept layout is one kernel's choice at its own
  // shapes, which another executor's kernels at other shapes would read as plain.
  if (arena_of) arena_of->release_weight_layouts();
  const bool keep = keep_weight_layouts && !arena_of;
  run_off_inherited_pool([this, &s, keep] {
    layouts_ = std::make_unique<WeightLayouts>(s, keep, engine_,
                                               [this](int k) { return kernel_weights(k); });
  });
  kernels_.resize(s.num_ops);
  scratch_.assign(s.num_ops, nullptr);
  span_.assign(s.num_ops, {0.0, 0.0});
  overflow_.resize(s.num_ops);
  if (concurrent && s.num_lanes > 0) {
    for (int lane = 0; lane < s.num_lanes; ++lane) lane_streams_.emplace_back(engine_);
    // Each kernel is created on the lane that runs it, with the op's planned team size.
    lanes_ = std::make_unique<Lanes>(s, [this](int k) { create(k); }, [this](int k) { run(k); },
                                     jitter_us);
  } else {
    run_off_inherited_pool([this, &s] {
      int saved_threads = omp_get_max_threads();
      try {
        for (int k = 0; k < s.num_ops; ++k) {
          omp_set_num_threads(kernel_threads(s.ops[k]));
          create(k);
        }
      } catch (...) {
        omp_set_num_threads(saved_threads);
        throw;
      }
      omp_set_num_threads(saved_threads);
    });
  }
  // Each op's scratch: its planned area when that holds what the kernel asks for, else a block
  // of its own (never shared: ops may run at the same time).
  for (int k = 0; k < s.num_ops; ++k)
    scratch_[k] = scratch_area(s.ops[k], *kernels_[k], &overflow_[k]);
  for (int v = 0; v < s.num_variants; ++v) variants_.push_back(nullptr);
  if (!adaptive)
    for (ScheduleChoice* c : {&choice_, &team_choice_})
      c->pin(0, "the main schedule whatever the load (adaptive=False; "
                "set_variant(None) switches by load)");
}

std::shared_ptr<Executor::Memory> Executor::memory_for(const Schedule& s,
                                                       const Executor* arena_of) {
  if (!arena_of) return std::make_shared<Memory>(s.arena_bytes, s.host_bytes);
  // The same library: every tensor of the same name, store, offset and dtype (a concrete
  // shape's bytes fit the range's, checked at load), and the same arena and host store.
  const Schedule& o = arena_of->schedule();
  std::string differs;
  if (std::string(o.name) != s.name) differs = "it is plan '" + std::string(o.name) + "'";
  else if (o.arena_bytes != s.arena_bytes || o.host_bytes != s.host_bytes)
    differs = "its arena or host store has other bytes";
  else if (o.num_tensors != s.num_tensors) differs = "it has other tensors";
  for (int i = 0; differs.empty() && i < s.num_tensors; ++i) {
    const TensorSpec &a = s.tensors[i], &b = o.tensors[i];
    if (std::string(a.name) != b.name || a.store != b.store || a.offset != b.offset ||
        a.dtype != b.dtype)
      differs = "it places tensor '" + std::string(b.name) + "' otherwise";
  }
  if (!differs.empty())
    throw std::invalid_argument("arena_of: the executor given is not of the build of plan '" +
                                std::string(s.name) + "' (" + differs + "); executors share "
                                "an arena only within one plan's build");
  return arena_of->memory_;
}

void Executor::release_weight_layouts() {
  for (int id = 0; id < schedule().num_tensors; ++id)
    if (layouts_->held(id)) layouts_->release(id, ptr_.data());
}

char* Executor::scratch_area(const OpSpec& op, const Kernel& kernel,
                             std::unique_ptr<Arena>* overflow) {
  int64_t need = static_cast<int64_t>(kernel.scratch_bytes());
  if (need <= std::max<int64_t>(op.scratch_bytes, 0))
    return op.scratch_bytes > 0 ? memory_->arena.base() + op.scratch_offset : nullptr;
  *overflow = std::make_unique<Arena>(need);
  unplanned_ += need;
  return (*overflow)->base();
}

std::vector<ScheduleChoice::Option> Executor::choice_options(const Schedule& s) {
  // The main schedule needs every logical CPU it pins a team to.
  std::vector<char> used;
  for (int k = 0; k < s.num_ops; ++k)
    for (int c = 0; c < s.ops[k].num_cpus; ++c) {
      int cpu = s.cpus[s.ops[k].first_cpu + c];
      if (cpu >= static_cast<int>(used.size())) used.resize(cpu + 1, 0);
      used[cpu] = 1;
    }
  int cores = std::max<int>(1, static_cast<int>(std::count(used.begin(), used.end(), 1)));
  std::vector<ScheduleChoice::Option> out{{"main", cores, s.step_seconds}};
  for (int v = 0; v < s.num_variants; ++v)
    out.push_back({s.variant_names[v], s.variant_cores[v], s.variant_seconds[v]});
  return out;
}

Executor::Variant& Executor::variant(int v) {
  std::unique_ptr<Variant>& slot = variants_[v];
  if (slot) return *slot;
  const Schedule& s = schedule();
  auto x = std::make_unique<Variant>();
  x->ops.assign(s.ops, s.ops + s.num_ops);
  for (int k = 0; k < s.num_ops; ++k) {
    OpSpec& op = x->ops[k];
    // One lane in plan order: every wait names an earlier op, already done on this lane.
    op.threads = s.variant_threads[v * s.num_ops + k];
    op.lane = 0;
    op.num_cpus = 0;
    op.smt = false;
    op.group = -1;
  }
  x->schedule = s;
  x->schedule.ops = x->ops.data();
  x->schedule.num_lanes = 1;
  x->kernels.resize(s.num_ops);
  x->scratch.assign(s.num_ops, nullptr);
  x->overflow.resize(s.num_ops);
  x->stream = std::make_unique<dnnl::stream>(engine_);
  Variant* raw = x.get();
  x->lanes = std::make_unique<Lanes>(
      x->schedule, [this, raw](int k) { raw->kernels[k] = make_kernel(raw->ops[k]); },
      [this, raw](int k) {
        run_kernel(k, *raw->kernels[k], raw->scratch[k], *raw->stream, raw->ops[k].threads);
      },
      jitter_us_);
  x->lanes->set_pinning(false);
  for (int k = 0; k < s.num_ops; ++k)
    x->scratch[k] = scratch_area(x->ops[k], *x->kernels[k], &x->overflow[k]);
  slot = std::move(x);
  return *slot;
}

void Executor::set_variant(const std::string& name) {
  if (name.empty()) {
    choice_.pin(-1);
    return team_choice_.pin(-1);
  }
  const auto& options = choice_.options();
  for (int i = 0; i < static_cast<int>(options.size()); ++i)
    if (options[i].name == name) {
      choice_.pin(i);
      return team_choice_.pin(i);
    }
  std::string known;
  for (const auto& o : options) known += (known.empty() ? "" : ", ") + o.name;
  throw std::invalid_argument("no schedule named '" + name + "' in this plan (it has " + known +
                              ")");
}

int Executor::granted_cores() {
  // The quota changes rarely and costs a few file reads: read every 64 steps.
  if (quota_checked_ < 0 || steps_ - quota_checked_ >= 64) {
    quota_ = quota_cores();
    quota_checked_ = steps_;
  }
  return std::min(affinity_cores(), quota_);
}

void Executor::create(int k) { kernels_[k] = make_kernel(schedule().ops[k]); }

namespace {

// The ops whose CPU kernels take channel-blocked images (TensorRef::block): the planner's
// OpDef.channel_blocked, between which planner/step/blocked.py keeps a tensor blocked
// (tests/codegen/test_blocked_images.py compares the two), and the transfers, which copy bytes.
// The by-position ones visit elements by position, so their operands must be alike (but scalar
// bounds, read the same at every element).
const char* const kByPosition[] = {"Relu", "ReluGrad", "LeakyRelu", "LeakyReluGrad", "Tanh",
                                   "TanhGrad", "Sigmoid", "SigmoidGrad", "Add", "Sub", "Mul",
                                   "AddN", "HardTanh", "HardTanhGradA", "Offload", "Prefetch"};
const char* const kOwnLayouts[] = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                                   "ConvTranspose2D", "BatchNorm", "BatchNormGrad",
                                   "MaxPool", "MaxPoolGrad", "GlobalAvgPool", "AvgPoolGrad"};

bool listed(const char* op, const char* const* first, const char* const* last) {
  return std::any_of(first, last, [op](const char* o) { return std::strcmp(o, op) == 0; });
}

// Refuses a plan (a hostile one: the planner keeps no other) giving `op` a blocked operand its
// kernel would read as plain.
void check_blocked(const Schedule& s, const OpSpec& op, const std::vector<TensorRef>& in,
                   const std::vector<TensorRef>& out) {
  std::vector<TensorRef> all;
  for (const auto* side : {&in, &out})
    for (const TensorRef& t : *side)
      if (t.size() > 1) all.push_back(t);
  const bool any = std::any_of(all.begin(), all.end(), [](const TensorRef& t) { return t.block; });
  if (!any || listed(op.op, std::begin(kOwnLayouts), std::end(kOwnLayouts))) return;
  const bool alike = std::all_of(all.begin(), all.end(), [&](const TensorRef& t) {
    return t.block == all[0].block && t.shape == all[0].shape;
  });
  if (!listed(op.op, std::begin(kByPosition), std::end(kByPosition)) || !alike)
    for (const TensorRef& t : all)
      if (t.block)
        throw std::runtime_error(std::string("tensor '") + s.tensors[t.id].name +
                                 "' is channel-blocked, which this op's kernel does not read " +
                                 "(or its other operands are not alike)");
}

}  // namespace

KernelPtr Executor::make_kernel(const OpSpec& op) {
  std::vector<TensorRef> in, out;
  op_tensors(schedule(), op, &in, &out);
  try {
    check_blocked(schedule(), op, in, out);
    Node node{&op, in, out, Attrs(op.attrs), engine_, kernel_threads(op), &packs_,
              layouts_.get()};
    return registry().at(op.op)(node);
  } catch (const std::exception& e) {
    throw std::runtime_error(op_failure(op, e.what()));
  }
}

std::optional<dnnl::memory::desc> Executor::kernel_weights(int k) {
  const OpSpec& op = schedule().ops[k];
  std::vector<TensorRef> in, out;
  op_tensors(schedule(), op, &in, &out);
  // oneDNN sizes a kernel (and may choose its layouts) by the team that creates it.
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(kernel_threads(op));
  try {
    Node node{&op, in, out, Attrs(op.attrs), engine_, kernel_threads(op)};
    std::optional<dnnl::memory::desc> md = conv_kernel_weights(node);
    omp_set_num_threads(saved_threads);
    return md;
  } catch (const std::exception& e) {
    omp_set_num_threads(saved_threads);
    throw std::runtime_error(op_failure(op, e.what()));
  }
}

void Executor::run(int k) {
  const OpSpec& op = schedule().ops[k];
  dnnl::stream& stream = lane_streams_.empty() ? stream_ : lane_streams_[op.lane];
  run_kernel(k, *kernels_[k], scratch_[k], stream, kernel_threads(op));
}

void Executor::run_kernel(int k, Kernel& kernel, char* scratch, dnnl::stream& stream,
                          int threads) {
  if (micro_batch_only_ && schedule().ops[k].optimizer_step_only) {
    span_[k] = {0.0, 0.0};
    return;
  }
  Run r{ptr_.data(), scratch, stream.get(), threads, &collective_, pass_};
  auto t0 = std::chrono::steady_clock::now();
  kernel.run(r);
  auto t1 = std::chrono::steady_clock::now();
  stats_[k].seconds += std::chrono::duration<double>(t1 - t0).count();
  stats_[k].calls += 1;
  span_[k] = {std::chrono::duration<double>(t0 - step_began_).count(),
              std::chrono::duration<double>(t1 - step_began_).count()};
}

char* Executor::home(int id) const {
  const TensorSpec& t = schedule().tensors[id];
  return (t.store == HOST_STORE ? memory_->host_store.base() : memory_->arena.base()) +
         t.offset;
}

void Executor::bind(int id, char* p) {
  char* target = p ? p : home(id);
  // A feed's views with it (a plan's step feeds hundreds: a scan of every tensor per feed took
  // about 5% of a mobilenet_v2 forward call)
  for (int i : loaded_.sharing(id)) ptr_[i] = target;
}

bool Executor::holds(const void* p, int64_t bytes) const {
  auto within = [p, bytes](const Arena& a) {
    const char* c = static_cast<const char*>(p);
    return bytes > 0 && c < a.base() + a.bytes() && a.base() < c + bytes;
  };
  if (within(memory_->arena)) return true;
  for (const auto& block : overflow_)
    if (block && within(*block)) return true;
  return false;
}

void Executor::check_feeds() {
  check_fed_values(loaded_, kernels_, Run{ptr_.data(), nullptr, stream_.get(), 1});
}

Executor::~Executor() {
  if (inherited()) {
    // A forked child's copy: its lanes' threads are in the parent; destroying the lanes would
    // wait for them forever. Their memory is the child's, freed with the process.
    (void)lanes_.release();
    for (auto& v : variants_)
      if (v) (void)v->lanes.release();
  }
  finish_async();
}

Evaluation& Executor::evaluation() {
  if (!evaluation_)
    evaluation_ = std::make_unique<Evaluation>(loaded_, memory_->arena.base(), engine_,
                                               evaluation_concrete_.get());
  return *evaluation_;
}

bool Executor::micro_batch_only() const {
  const Schedule& s = schedule();
  if (s.micro_batches < 2 || s.micro_step < 0) return false;
  int64_t taken = *reinterpret_cast<const int64_t*>(ptr_[s.micro_step]);
  return taken % s.micro_batches != s.micro_batches - 1;
}

void Executor::set_concurrent(bool on) {
  if (!lanes_) {
    if (on)
      throw std::invalid_argument("set_concurrent(True): this executor was built to run ops "
                                  "one at a time (concurrent=False); it has no lanes");
    return;
  }
  if (!on && on_lanes_ && last_lanes_ != nullptr && !inherited()) last_lanes_->release_teams();
  if (!on) last_lanes_ = nullptr;
  on_lanes_ = on;
}

void Executor::run_step() {
  pass_ += 1;
  step_began_ = std::chrono::steady_clock::now();
  micro_batch_only_ = micro_batch_only();
  if (live_lanes() && on_lanes_) {
    try {
      int chosen = choice_.before_step(granted_cores());
      Lanes& lanes = chosen == 0 ? *lanes_ : variant_lanes(chosen - 1);
      if (last_lanes_ != nullptr && last_lanes_ != &lanes) last_lanes_->release_teams();
      last_lanes_ = &lanes;
      step_began_ = std::chrono::steady_clock::now();
      release_callers_team(lanes);  // timed: the choice compares what a step costs
      lanes.step(watchdog_seconds_);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_began_).count();
      BusyHost::process().after_step(wall, lanes.waited(), lanes.count());
      // The choice compares steps of one kind: with accumulation, the micro-batches'.
      if (micro_batch_only_ || schedule().micro_batches < 2) choice_.after_step(wall);
    } catch (const std::exception& e) {
      throw StepError(e.what());
    }
    steps_ += 1;
    return;
  }
  run_off_inherited_pool([this] { run_serial(); });
}

void Executor::run_serial() {
  const Schedule& s = schedule();
  // A forked child's inherited executor runs the main schedule's serial reference (executor.h):
  // a variant would make lanes in the child for an executor whose lanes stayed in the parent.
  const bool choose = !inherited();
  const int chosen = choose ? team_choice_.before_step(granted_cores()) : 0;
  Variant* x = chosen == 0 ? nullptr : &variant(chosen - 1);
  const RunDelay delay;  // this thread's: its team's master runs every op
  const int64_t delay_before = delay.now();
  step_began_ = std::chrono::steady_clock::now();
  int saved_threads = omp_get_max_threads();
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = x ? x->ops[k] : s.ops[k];
    omp_set_num_threads(kernel_threads(op));
    try {
      if (x)
        run_kernel(k, *x->kernels[k], x->scratch[k], *x->stream, op.threads);
      else
        run(k);
    } catch (const std::exception& e) {
      omp_set_num_threads(saved_threads);
      throw StepError(op_failure(s.ops[k], e.what()));
    }
  }
  omp_set_num_threads(saved_threads);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - step_began_).count();
  const int64_t delay_after = delay.now();
  if (choose)
    BusyHost::process().after_step(
        wall, delay_before < 0 || delay_after < 0 ? -1.0 : (delay_after - delay_before) * 1e-9,
        1);
  if (choose && (micro_batch_only_ || s.micro_batches < 2)) team_choice_.after_step(wall);
  steps_ += 1;
}

}  // namespace planner
