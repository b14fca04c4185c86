// Python bindings of the CPU runtime (nanobind): the Executor of one schedule library.
//
//   ex = Executor("/path/to/libschedule.so")   # what a generated package's Executor() does
//   ex.load_params({"fc1/weight": w, ...});  ex.params()
//   out = ex.step({"x": x, "labels": y})       # {"loss": array(..), ...}
//   ex.stats()                                 # per-op measured seconds, arena bytes
//
// Arrays cross without copies where the layout allows: a C-contiguous feed of the right dtype
// is read in place for the step; other layouts are copied into the feed's arena slot.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>

#include "arrays.h"
#include "executor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace planner {
namespace {

// Checks every feed and requested output before anything runs; binds the feeds (C-contiguous
// ones read in place unless `copy`, the others copied into their arena slots). Returns the
// ids to return after the step and the feeds bound.
std::vector<int> prepare(Executor& ex, nb::dict feeds, const std::vector<std::string>& extra,
                         bool copy, std::vector<int>* bound_ids) {
  const Schedule& s = ex.schedule();
  // Check every feed before running anything.
  std::vector<std::pair<int, Array>> bound;
  for (auto [key, value] : feeds) {
    std::string name = nb::cast<std::string>(key);
    int id = ex.tensor_index(name);
    if (id < 0 || (ex.tensor(id).role != INPUT && ex.tensor(id).role != LABEL))
      throw nb::value_error(("'" + name + "' is not an input of plan '" + s.name + "'").c_str());
    Array a;
    if (!nb::try_cast(value, a))
      throw nb::value_error(("feed '" + name + "' is not an array").c_str());
    bound.emplace_back(id, a);
  }
  for (int i = 0; i < s.num_tensors; ++i) {
    const TensorSpec& t = s.tensors[i];
    if (t.role != INPUT && t.role != LABEL) continue;
    bool found = false;
    for (auto& b : bound) found |= b.first == i;
    if (!found)
      throw nb::value_error((std::string("missing feed '") + t.name + "' (" + dtype_name(t.dtype) +
                             " " + shape_text(ex.shape(i)) + ")").c_str());
  }
  std::vector<int> wanted(s.outputs, s.outputs + s.num_outputs);
  for (const std::string& name : extra) {
    int id = ex.tensor_index(name);
    if (id < 0) throw nb::value_error(("plan '" + std::string(s.name) + "' has no tensor '" +
                                       name + "'").c_str());
    wanted.push_back(id);
  }
  for (auto& [id, a] : bound) {
    if (check(ex.tensor(id), a, "feed") && !copy) {
      ex.bind(id, static_cast<char*>(const_cast<void*>(a.data())));
    } else {
      ex.bind(id, nullptr);
      copy_in(ex.data(id), a, dtype_bytes(ex.tensor(id).dtype));
    }
    bound_ids->push_back(id);
  }
  return wanted;
}

nb::dict results(Executor& ex, const std::vector<int>& wanted) {
  nb::dict out;
  for (int id : wanted)
    out[ex.tensor(id).name] = to_numpy(ex.tensor(id), ex.data(id), true, nb::handle());
  return out;
}

nb::dict run_step(Executor& ex, nb::dict feeds, const std::vector<std::string>& extra) {
  std::vector<int> bound;
  std::vector<int> wanted = prepare(ex, feeds, extra, false, &bound);
  {
    nb::gil_scoped_release release;
    try {
      ex.step();
    } catch (...) {
      nb::gil_scoped_acquire acquire;
      for (int id : bound) ex.bind(id, nullptr);
      throw;
    }
  }
  // Copy the results out first: an output may be a view of a feed read in place.
  nb::dict out = results(ex, wanted);
  for (int id : bound) ex.bind(id, nullptr);  // never keep caller memory past the call
  return out;
}


}  // namespace
}  // namespace planner

NB_MODULE(planner_cpu_rt, m) {
  using planner::Executor;
  m.doc() = "planner CPU runtime: oneDNN + OpenMP kernels driven by a compiled schedule";
  m.def("registered_ops", [] {
    std::vector<std::string> names;
    for (const auto& kv : planner::registry()) names.push_back(kv.first);
    return names;
  }, "The op names this runtime has kernels for (codegen's supported list must agree).");
  nb::class_<Executor>(m, "Executor")
      .def(nb::init<const std::string&, bool, int, double>(), "schedule_path"_a,
           "concurrent"_a = true, "jitter_us"_a = 0, "watchdog_seconds"_a = 600.0,
           "Load a schedule. concurrent: run ops on the plan's lanes (False: one at a time in "
           "plan order); jitter_us: lanes sleep up to that long before each op (tests); a "
           "step with no progress for watchdog_seconds raises, naming the ops not finished.")
      .def_prop_ro("concurrent", &Executor::concurrent)
      .def_prop_ro("lanes", &Executor::lanes)
      .def_prop_ro("plan", [](const Executor& ex) { return std::string(ex.schedule().plan_json); })
      .def_prop_ro("name", [](const Executor& ex) { return std::string(ex.schedule().name); })
      .def_prop_ro("kind", [](const Executor& ex) { return std::string(ex.schedule().kind); })
      .def("load_params",
           [](Executor& ex, nb::dict values, bool partial) {
             if (ex.in_flight())
               throw nb::value_error("a step is in flight (step_async): wait() first");
             std::vector<std::pair<int, planner::Array>> checked;
             std::vector<int> given;
             for (auto [key, value] : values) {
               std::string name = nb::cast<std::string>(key);
               int id = ex.tensor_index(name);
               if (id < 0 || !planner::persistent(ex.tensor(id).role) ||
                   ex.tensor(id).updates >= 0)
                 throw nb::value_error(("'" + name + "' is not a parameter or state tensor of "
                                        "plan '" + ex.schedule().name + "'").c_str());
               planner::Array a;
               if (!nb::try_cast(value, a))
                 throw nb::value_error(("parameter '" + name + "' is not an array").c_str());
               planner::check(ex.tensor(id), a, "parameter");
               checked.emplace_back(id, a);
               given.push_back(id);
             }
             const std::vector<std::string> absent = ex.missing(given);
             if (!partial && !absent.empty())
               throw nb::value_error(("load_params: missing " + planner::name_list(absent) +
                                      "; pass every parameter and state tensor, or "
                                      "partial=True to load some now and the rest later")
                                         .c_str());
             for (auto& [id, a] : checked) {
               planner::copy_in(ex.data(id), a, planner::dtype_bytes(ex.tensor(id).dtype));
               ex.mark_loaded(id);
             }
           },
           "values"_a, "partial"_a = false,
           "Copy parameters (and state) in; every name and shape is checked first. Every "
           "parameter and state tensor is required unless partial=True; optimizer state may be "
           "left out (it starts at zero).")
      .def("params",
           [](nb::handle self, bool copy) {
             Executor& ex = nb::cast<Executor&>(self);
             if (ex.in_flight())
               throw nb::value_error("a step is in flight (step_async): wait() first");
             nb::dict out;
             const planner::Schedule& s = ex.schedule();
             for (int i = 0; i < s.num_tensors; ++i) {
               const planner::TensorSpec& t = s.tensors[i];
               if (planner::persistent(t.role) && t.updates < 0)
                 out[t.name] = planner::to_numpy(t, ex.data(i), copy, self);
             }
             return out;
           },
           "copy"_a = true,
           "Parameters and state by name: copies, or (copy=False) live views of the arena.")
      .def("step",
           [](Executor& ex, nb::dict feeds, std::vector<std::string> outputs) {
             return planner::run_step(ex, feeds, outputs);
           },
           "feeds"_a, "outputs"_a = std::vector<std::string>(),
           "Run one step; returns the graph's outputs (the loss, ...) and `outputs` by name.")
      .def("step_async",
           [](Executor& ex, nb::dict feeds, std::vector<std::string> outputs) {
             if (ex.in_flight())
               throw nb::value_error("a step is already in flight: wait() for it first");
             std::vector<int> bound;
             // Feeds are copied into the arena: the caller may refill its arrays at once.
             ex.pending_outputs = planner::prepare(ex, feeds, outputs, true, &bound);
             ex.start_async();
           },
           "feeds"_a, "outputs"_a = std::vector<std::string>(),
           "Start one step and return at once; the feeds are copied first, so their arrays "
           "may be refilled (the next batch prepared) while it runs. wait() returns its "
           "outputs.")
      .def("wait",
           [](Executor& ex) {
             {
               nb::gil_scoped_release release;
               ex.join_async();
             }
             return planner::results(ex, ex.pending_outputs);
           },
           "Wait for the step in flight; its outputs as step() returns them (its error, "
           "naming the op, if it failed).")
      .def("wait_for_all",
           [](Executor& ex) -> nb::object {
             if (!ex.in_flight()) return nb::none();
             {
               nb::gil_scoped_release release;
               ex.join_async();
             }
             return nb::object(planner::results(ex, ex.pending_outputs));
           },
           "Wait until no step is in flight: the outputs of the one that was, else None.")
      .def("forward",
           [](Executor& ex, nb::dict feeds, std::vector<std::string> outputs) {
             if (std::string(ex.schedule().kind) != "inference")
               throw nb::value_error("forward() runs inference plans; this is a training plan: "
                                     "use step()");
             return planner::run_step(ex, feeds, outputs);
           },
           "feeds"_a, "outputs"_a = std::vector<std::string>())
      .def("stats",
           [](const Executor& ex) {
             nb::list ops;
             const planner::Schedule& s = ex.schedule();
             for (int k = 0; k < s.num_ops; ++k) {
               const planner::OpStats& st = ex.op_stats()[k];
               nb::dict d;
               d["name"] = s.ops[k].name;
               d["op"] = s.ops[k].op;
               d["threads"] = s.ops[k].threads;
               d["lane"] = s.ops[k].lane;
               d["scratch_bytes"] = ex.scratch_needed(k);
               d["scratch_planned"] = ex.scratch_planned(k);
               d["calls"] = st.calls;
               d["seconds"] = st.calls ? st.seconds / st.calls : 0.0;
               ops.append(d);
             }
             nb::dict out;
             out["ops"] = ops;
             out["steps"] = ex.steps();
             int64_t tensor_bytes = 0, scratch = 0;
             for (int i = 0; i < s.num_tensors; ++i)
               tensor_bytes = std::max(tensor_bytes, s.tensors[i].offset + s.tensors[i].nbytes);
             for (int k = 0; k < s.num_ops; ++k)
               scratch += static_cast<int64_t>(ex.scratch_needed(k));
             out["arena_bytes"] = ex.arena_bytes();
             out["tensor_bytes"] = tensor_bytes;
             out["scratch_bytes"] = scratch;
             out["unplanned_scratch_bytes"] = ex.unplanned_scratch_bytes();
             return out;
           },
           "Per-op mean measured seconds, call counts, lanes and scratch bytes (what the kernel "
           "needs, and whether the plan's area held it); arena, tensor and scratch bytes.")
      .def("reset_stats", &Executor::reset_stats);
}
