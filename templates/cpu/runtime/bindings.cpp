// Python bindings of the CPU runtime (nanobind): the Executor of one schedule library.
//
//   ex = Executor("/path/to/libschedule.so")   # what a generated package's Executor() does
//   ex.load_params({"fc1/weight": w, ...});  ex.params()
//   out = ex.step({"x": x, "labels": y})       # {"loss": array(..), ...}
//   ex.stats()                                 # per-op measured seconds (and the last
//                                              # step's start and end), arena bytes
//
// Arrays cross without copies where the layout allows: a C-contiguous feed of the right dtype
// is read in place for the step; other layouts are copied into the feed's arena slot.
// executor.h first: the shared bindings use its name_list.
#include "executor.h"
#include "bindings.h"

#include <nanobind/stl/optional.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace planner {
namespace {

// Host arrays: a C-contiguous feed of the right dtype is read in place for the step; other
// layouts are copied into the feed's arena slot.
struct Io {
  static void feed(Executor& ex, int id, nb::handle value, bool copy) {
    Array a;
    if (!nb::try_cast(value, a))
      throw not_an_array(value, std::string("feed '") + ex.tensor(id).name + "'");
    // A view of the executor's own memory (ex.params(copy=False)[...]) would be read after
    // an op wrote over it: copied in before the step instead.
    if (check(ex.tensor(id), a, "feed") && !copy &&
        !ex.holds(a.data(), ex.tensor(id).nbytes)) {
      ex.bind(id, static_cast<char*>(const_cast<void*>(a.data())));
    } else {
      ex.bind(id, nullptr);
      copy_in(ex.data(id), a, dtype_bytes(ex.tensor(id).dtype));
    }
  }
  static void unbind(Executor& ex, int id) { ex.bind(id, nullptr); }
  // A weight held in its kernels' layout (weight_layouts.h) goes in through a plain copy.
  static void load(Executor& ex, int id, const Array& a) {
    const int esize = dtype_bytes(ex.tensor(id).dtype);
    if (!ex.weight_layouts().held(id)) return copy_in(ex.data(id), a, esize);
    std::vector<char> plain(static_cast<size_t>(ex.tensor(id).nbytes));
    copy_in(plain.data(), a, esize);
    ex.weight_layouts().reorder(id, plain.data(), ex.data(id), false);
  }
  // A weight held in its kernels' layout comes back plain: a copy reordered, or (a live view)
  // its family released to plain first.
  static nb::object fetch(Executor& ex, int id, bool copy, nb::handle owner) {
    const TensorSpec& t = ex.tensor(id);
    WeightLayouts& layouts = ex.weight_layouts();
    if (layouts.held(id) && !copy) layouts.release(id, ex.tensor_ptrs());
    if (layouts.held(id)) {
      std::vector<char> plain(static_cast<size_t>(t.nbytes));
      layouts.reorder(id, ex.data(id), plain.data(), true);
      return to_numpy(t, plain.data(), true, nb::handle());
    }
    if (!t.block) return to_numpy(t, ex.data(id), copy, owner);
    // An image the step keeps channel-blocked (planner/step/blocked.py) comes back as every
    // other, plain NCHW: always a copy (in_arena says no view).
    std::vector<float> plain(static_cast<size_t>(t.nbytes) / sizeof(float));
    const float* held = reinterpret_cast<const float*>(ex.data(id));
    const int64_t C = t.shape[1], B = t.block, HW = t.shape[2] * t.shape[3];
    for (int64_t n = 0; n < t.shape[0]; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < HW; ++p)
          plain[(n * C + c) * HW + p] = held[((n * (C / B) + c / B) * HW + p) * B + c % B];
    return to_numpy(t, reinterpret_cast<char*>(plain.data()), true, nb::handle());
  }
  static bool in_arena(const Executor& ex, int id) {
    return !ex.tensor(id).block && !ex.weight_layouts().held(id) &&
           ex.holds(ex.data(id), ex.tensor(id).nbytes);
  }
  static void op_stats(const Executor& ex, int k, nb::dict& d) {
    d["start"] = ex.last_span(k).first;
    d["end"] = ex.last_span(k).second;
    std::string impl = ex.impl(k);
    if (!impl.empty()) d["impl"] = impl;
  }
  static void stats(const Executor& ex, nb::dict& d) {
    d["pinnings"] = ex.pinnings();
    // Where the arena starts in this process (with arena_bytes: whether a view handed to a
    // collective lies in it, i.e. was not copied out).
    d["arena_address"] = reinterpret_cast<uintptr_t>(ex.arena_base());
    // Every byte the executor holds for tensors: the arena, the host store, scratch blocks of
    // its own where the plan's area was too small, and the MatMul weights it packs once per
    // step (weight_packs.h; kernels allocate nothing else).
    d["host_store_bytes"] = ex.host_store_bytes();
    d["packed_weight_bytes"] = ex.packed_weight_bytes();
    d["held_bytes"] = ex.arena_bytes() + ex.host_store_bytes() + ex.unplanned_scratch_bytes() +
                      ex.packed_weight_bytes();
    // Parameters and optimizer state held in their kernels' layouts now (weight_layouts.h:
    // in their arena slots, no byte more).
    d["kept_layout_bytes"] = ex.weight_layouts().held_bytes();
    // The executors holding that arena and host store (arena_of), this one included: their
    // held_bytes count those bytes once each.
    d["arena_sharers"] = ex.arena_sharers();
    d["schedule"] = schedule_stats(ex.schedule_choice());
    // libgomp's spinning in this process (busy_host.h): throttled while the steps' threads
    // wait for CPUs other processes hold.
    const BusyHost& host = BusyHost::process();
    nb::dict spin;
    spin["throttled"] = host.throttled();
    spin["run_delay_share"] = host.busy_share();
    spin["user_set"] = host.user_set();
    d["spin"] = spin;
  }
  // Which schedule ran (the main one or a variant for fewer free cores), why, and what each
  // measured (choice.h).
  static nb::dict schedule_stats(const ScheduleChoice& c) {
    nb::dict d;
    d["running"] = c.options()[c.current()].name;
    d["reason"] = c.reason();
    d["pinned"] = c.pinned() >= 0;
    d["switches"] = c.switches();
    d["granted_cores"] = c.granted() == (1 << 30) ? -1 : c.granted();
    nb::list all;
    for (const auto& o : c.options()) {
      nb::dict e;
      e["name"] = o.name;
      e["cores"] = o.cores;
      e["predicted_seconds"] = o.predicted;
      e["mean_seconds"] = o.mean;
      e["steps"] = o.runs;
      all.append(e);
    }
    d["schedules"] = all;
    return d;
  }
};

// evaluate(feeds): a training plan's evaluation from the same build (evaluation.h). The
// feeds are checked as step()'s are, then copied into the evaluation's own arena; the step's
// parameters, state, optimizer state and step count are read, never written.
nb::dict evaluate(Executor& ex, nb::dict feeds) {
  auto lock = hold(ex);
  refuse_in_flight(ex);
  if (!ex.has_evaluation())
    throw nb::value_error(("evaluate(): plan '" + std::string(ex.schedule().name) + "' carries "
                           "no evaluation schedule (an inference plan, or one planned with "
                           "--no-evaluation): use forward(), or re-plan it").c_str());
  ex.check_loaded();
  Evaluation& ev = ex.evaluation();
  const Schedule& s = ev.schedule();
  std::vector<std::pair<int, Array>> given =
      evaluation_feeds(ev, feeds, ex.schedule().name, "an array");
  for (auto& [id, a] : given) copy_in(ev.data(id), a, dtype_bytes(ev.tensor(id).dtype));
  {
    nb::gil_scoped_release release;
    ev.check_feeds();
    // The evaluation's kernels read every weight plain (weight_layouts.h): the kept ones
    // reordered to plain for it and back after, whatever it throws.
    WeightLayouts& layouts = ex.weight_layouts();
    layouts.reorder_all(ex.tensor_ptrs(), true);
    try {
      ev.run(ex.collective());
    } catch (...) {
      layouts.reorder_all(ex.tensor_ptrs(), false);
      throw;
    }
    layouts.reorder_all(ex.tensor_ptrs(), false);
  }
  nb::dict out;
  for (int o = 0; o < s.num_outputs; ++o)
    out[ev.tensor(s.outputs[o]).name] = to_numpy(ev.tensor(s.outputs[o]),
                                                 ev.data(s.outputs[o]), true, nb::handle());
  return out;
}

}  // namespace
}  // namespace planner

NB_MODULE(planner_cpu_rt, m) {
  using planner::Executor;
  m.doc() = "planner CPU runtime: oneDNN + OpenMP kernels driven by a compiled schedule";
  m.def("registered_ops", [] { return planner::registered_names(planner::registry()); },
        "The op names this runtime has kernels for (codegen's supported list must agree).");
  // Weakly referenceable: planner.runtime.distributed finishes a joined executor's step at exit.
  nb::class_<Executor> cls(m, "Executor", nb::is_weak_referenceable());
  using Shapes = std::optional<std::vector<std::vector<int64_t>>>;
  using Attrs = std::optional<std::vector<std::string>>;
  cls      .def("__init__",
           [](Executor* self, const std::string& path, bool concurrent, int jitter_us,
              double watchdog_seconds, bool adaptive, Shapes shapes, Attrs attrs,
              Shapes evaluation_shapes, Attrs evaluation_attrs,
              const std::string& weight_layouts, Executor* arena_of) {
             if (shapes.has_value() != attrs.has_value() ||
                 evaluation_shapes.has_value() != evaluation_attrs.has_value())
               throw nb::value_error("give a concrete schedule's shapes and attrs together");
             if (weight_layouts != "kernel" && weight_layouts != "plain")
               throw nb::value_error(("weight_layouts must be 'kernel' or 'plain', got '" +
                                      weight_layouts + "'").c_str());
             // Not while the arena's other executor runs (its layouts are released here).
             std::unique_lock<std::mutex> lock;
             if (arena_of) {
               lock = planner::hold(*arena_of);
               planner::refuse_in_flight(*arena_of);
             }
             planner::Concrete concrete, evaluation;
             if (shapes) concrete = {*shapes, *attrs};
             if (evaluation_shapes) evaluation = {*evaluation_shapes, *evaluation_attrs};
             new (self) Executor(path, concurrent, jitter_us, watchdog_seconds, adaptive,
                                 shapes ? &concrete : nullptr,
                                 evaluation_shapes ? &evaluation : nullptr,
                                 weight_layouts == "kernel", arena_of);
           },
           "schedule_path"_a,
           "concurrent"_a = true, "jitter_us"_a = 0, "watchdog_seconds"_a = 600.0,
           "adaptive"_a = true, "shapes"_a = nb::none(), "attrs"_a = nb::none(),
           "evaluation_shapes"_a = nb::none(), "evaluation_attrs"_a = nb::none(),
           "weight_layouts"_a = "kernel",
           "arena_of"_a.none() = nb::none(),
           "Load a schedule. concurrent: run ops on the plan's lanes (False: one at a time in "
           "plan order); jitter_us: lanes sleep up to that long before each op (tests); a "
           "step with no progress for watchdog_seconds raises, naming the ops not finished; "
           "adaptive: switch to the plan's variants for fewer cores by load (the default; every "
           "variant computes the main schedule's bits, so runs give the same bits whatever "
           "the load; False: the main schedule always). shapes, attrs (and evaluation_shapes, "
           "evaluation_attrs): a range plan's schedule at smaller shapes, per tensor and per op "
           "(planner/pipeline/ranges.py); each tensor fits the bytes the range gives it. "
           "weight_layouts: 'kernel' holds convolution weights, their gradients and optimizer "
           "state in the layout their kernels read, reordered only by params(), load_params "
           "and evaluate() (a view, params(copy=False), releases its weight to plain); "
           "'plain' holds every tensor plain (docs/executor.md). "
           "arena_of: an executor of the same build whose arena and host store this one runs "
           "on (its parameters and state read and updated in place, nothing copied; the two "
           "take turns, one call at a time); both then hold every tensor plain.");
  planner::define_executor<Executor, planner::Io>(cls);
  planner::define_collective(cls, nb::device::cpu::value, [](const Executor&) { return 0; });
  cls.def("evaluate", &planner::evaluate, "feeds"_a,
          "Run the training plan's evaluation (the forward graph in inference mode: BatchNorm "
          "on its running statistics, Dropout the identity) on the parameters as trained; "
          "returns its outputs and loss by name. Changes no parameter, state or step count.");
  cls.def_prop_ro("has_evaluation", &Executor::has_evaluation,
                  "Whether the plan carries an evaluation schedule (evaluate() runs it).");
  cls.def(
      "place",
      [](Executor& ex, std::vector<int> cpu_map, std::vector<int> loose) {
        auto lock = planner::hold(ex);  // not while a step runs
        ex.place(std::move(cpu_map), std::move(loose));
      },
      "cpu_map"_a, "loose"_a,
      "Run the plan's logical CPU c on cpu_map[c] and lanes without CPUs (the comm lane) on "
      "`loose` (a rank sharing its host: planner.target.shares); between steps.");
  cls.def(
      "set_pinning",
      [](Executor& ex, bool on) {
        auto lock = planner::hold(ex);  // not while a step runs
        ex.set_pinning(on);
      },
      "on"_a,
      "Pin each lane's team to the plan's CPUs (True, the default) or leave its threads where "
      "the OS puts them (False: on a machine other busy processes share, a pinned thread "
      "waits for its one CPU); between steps.");
  cls.def(
      "set_concurrent",
      [](Executor& ex, bool on) {
        auto lock = planner::hold(ex);  // not while a step runs
        ex.set_concurrent(on);
      },
      "on"_a,
      "Run the next steps on the plan's lanes (True) or one op at a time in plan order on the "
      "calling thread's OpenMP team (False: the lanes' teams are let go); the same kernels and "
      "bits either way. For an executor built with concurrent=True; between steps.");
  cls.def(
      "set_variant",
      [](Executor& ex, std::optional<std::string> name) {
        auto lock = planner::hold(ex);  // not while a step runs
        ex.set_variant(name.value_or(""));
      },
      "name"_a.none(),
      "Run the named schedule ('main' or a variant from variants()) from the next step on, "
      "on the lanes or one op at a time alike; None: choose by the cores granted and the "
      "step times measured (adaptive=True's rule, the default; every schedule computes the "
      "same bits).");
  cls.def(
      "variants",
      [](const Executor& ex) {
        nb::list out;
        for (const auto& o : ex.schedule_choice().options()) {
          nb::dict e;
          e["name"] = o.name;
          e["cores"] = o.cores;
          e["predicted_seconds"] = o.predicted;
          out.append(e);
        }
        return out;
      },
      "The schedules this executor chooses from: the plan's main one, then its variants for "
      "fewer free cores (most cores first), each with the cores it needs and its predicted step.");
}
