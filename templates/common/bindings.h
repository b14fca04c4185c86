// The Python API every backend's executor shares (nanobind): load_params, params, step,
// step_async / wait / wait_for_all, forward, stats, reset_stats, plan; and set_collective
// (define_collective), the process group of a data-parallel plan. Each backend's
// bindings.cpp defines its module, the constructor, and an `Io` of how arrays cross:
//
//   struct Io {
//     // Check `value` against tensor `id` and make it the feed of the next step (read in
//     // place unless `copy`); raise ValueError naming the tensor.
//     static void feed(Executor&, int id, nb::handle value, bool copy);
//     static void unbind(Executor&, int id);               // after the step: its arena slot
//     static void load(Executor&, int id, const Array& a); // a checked host array in
//     static nb::object fetch(Executor&, int id, bool copy, nb::handle owner);  // one out
//     static bool in_arena(const Executor&, int id);  // its bytes lie in the executor's arena
//     static void op_stats(const Executor&, int k, nb::dict& d);   // backend's per-op fields
//     static void stats(const Executor&, nb::dict& d);             // and overall ones
//   };
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "collective.h"
#include "executor_core.h"

namespace planner {

namespace nb = nanobind;
using namespace nb::literals;

// The executor's lock, waited for with the GIL released (the thread holding the lock may need
// the GIL to finish its call). Refused first where this process cannot run it (check_forked:
// a forked child's copy whose lock a vanished thread held, a CUDA executor after fork).
template <class Ex>
std::unique_lock<std::mutex> hold(const Ex& ex) {
  ex.check_forked();
  std::unique_lock<std::mutex> lock(ex.mutex(), std::defer_lock);
  if (!lock.try_lock()) {
    nb::gil_scoped_release release;
    lock.lock();
  }
  return lock;
}

// A dict key naming a tensor: a str, else TypeError (not a C++ bad_cast).
inline std::string key_name(nb::handle key, const char* what) {
  if (!nb::isinstance<nb::str>(key))
    throw nb::type_error((std::string(what) + " names must be str, got " +
                          nb::repr(key).c_str()).c_str());
  return nb::cast<std::string>(key);
}

// Why `value` given for `what` (feed 'x') is not `kind` (an array): a numpy array in another
// byte order than the host's (dtype '>f4') has no DLPack form, so nanobind refuses it as it
// refuses a list; that one is named with the conversion that makes it readable.
inline nb::builtin_exception not_an_array(nb::handle value, const std::string& what,
                                          const char* kind = "an array") {
  std::string order, dtype;
  if (nb::hasattr(value, "dtype") && nb::hasattr(value.attr("dtype"), "byteorder") &&
      nb::hasattr(value.attr("dtype"), "str") &&
      nb::try_cast(value.attr("dtype").attr("byteorder"), order) && order == ">" &&
      nb::try_cast(value.attr("dtype").attr("str"), dtype)) {
    return nb::value_error((what + " is big-endian (dtype " + dtype + "); convert it to the "
                            "host's byte order first: a.astype(a.dtype.newbyteorder('='))")
                               .c_str());
  }
  return nb::value_error((what + " is not " + kind).c_str());
}

template <class Ex>
void refuse_in_flight(const Ex& ex) {
  if (ex.in_flight()) throw nb::value_error("a step is in flight (step_async): wait() first");
  if (ex.arena_in_flight())
    throw nb::value_error("a step of an executor sharing this one's arena is in flight "
                          "(step_async): wait() for it first");
}

// The values of `feeds` by tensor id, before any is read: each names an input or label of
// `runs` (an executor, or its evaluation: `of` names it, "plan 'p'"), and every input and label
// is given (the missing one named with its dtype and shape_of(id)); ValueError otherwise. The
// values themselves are the caller's to check (each backend takes other arrays).
template <class Runs, class ShapeOf>
std::vector<std::pair<int, nb::handle>> named_feeds(const Runs& runs, nb::dict feeds,
                                                    const std::string& of, ShapeOf shape_of) {
  const Schedule& s = runs.schedule();
  std::vector<std::pair<int, nb::handle>> given;
  for (auto [key, value] : feeds) {
    std::string name = key_name(key, "feed");
    int id = runs.tensor_index(name);
    if (id < 0 || (runs.tensor(id).role != INPUT && runs.tensor(id).role != LABEL))
      throw nb::value_error(("'" + name + "' is not an input of " + of).c_str());
    given.emplace_back(id, value);
  }
  for (int i = 0; i < s.num_tensors; ++i) {
    const TensorSpec& t = s.tensors[i];
    if (t.role != INPUT && t.role != LABEL) continue;
    bool found = false;
    for (auto& g : given) found |= g.first == i;
    if (!found)
      throw nb::value_error((std::string("missing feed '") + t.name + "' (" + dtype_name(t.dtype) +
                             " " + shape_text(shape_of(i)) + ")").c_str());
  }
  return given;
}

// named_feeds of a training plan's evaluation (an evaluation's shapes are its schedule's),
// each value a host array checked against its tensor (`kind`: what the backend takes, for
// the message); ValueError naming the feed otherwise.
template <class Evaluation>
std::vector<std::pair<int, Array>> evaluation_feeds(const Evaluation& ev, nb::dict feeds,
                                                    const std::string& plan_name,
                                                    const char* kind) {
  std::vector<std::pair<int, Array>> given;
  for (auto& [id, value] : named_feeds(ev, feeds, "the evaluation of plan '" + plan_name + "'",
                                       [&](int i) {
                                         const TensorSpec& t = ev.tensor(i);
                                         return Shape(t.shape, t.shape + t.rank);
                                       })) {
    Array a;
    if (!nb::try_cast(value, a))
      throw not_an_array(value, std::string("feed '") + ev.tensor(id).name + "'", kind);
    check(ev.tensor(id), a, "feed");
    given.emplace_back(id, a);
  }
  return given;
}

// Checks every feed name and requested output before anything runs, then binds the feeds
// (Io::feed checks each array). Returns the ids to return after the step.
template <class Ex, class Io>
std::vector<int> prepare(Ex& ex, nb::dict feeds, const std::vector<std::string>& extra,
                         bool copy, std::vector<int>* bound_ids) {
  const Schedule& s = ex.schedule();
  std::vector<std::pair<int, nb::handle>> given = named_feeds(
      ex, feeds, "plan '" + std::string(s.name) + "'", [&](int i) { return ex.shape(i); });
  std::vector<int> wanted(s.outputs, s.outputs + s.num_outputs);
  for (const std::string& name : extra) {
    int id = ex.tensor_index(name);
    if (id < 0) throw nb::value_error(("plan '" + std::string(s.name) + "' has no tensor '" +
                                       name + "'").c_str());
    // The graph's outputs are kept to the step's end; another tensor's bytes may be reused.
    int k = std::find(wanted.begin(), wanted.begin() + s.num_outputs, id) !=
                    wanted.begin() + s.num_outputs ? -1 : ex.overwritten_by(id);
    if (k >= 0)
      throw nb::value_error(("cannot return '" + name + "': op '" + s.ops[k].name + "' (" +
                             s.ops[k].op + ") writes over its bytes later in the step (the " +
                             "plan reuses them); plan with --keep " + name + " to keep it")
                                .c_str());
    wanted.push_back(id);
  }
  try {
    for (auto& [id, value] : given) {
      Io::feed(ex, id, value, copy);
      bound_ids->push_back(id);
    }
  } catch (...) {
    for (int id : *bound_ids) Io::unbind(ex, id);
    throw;
  }
  return wanted;
}

// The step's results by name: copies, except the ids in `views` whose bytes lie in the
// executor's arena, returned as views of it owned by `self` (valid until the executor runs
// again: the plan keeps what it returns to the step's end). A view asked of a result bound
// elsewhere (a feed read in place, unbound after the call) is copied.
template <class Ex, class Io>
nb::dict results(Ex& ex, const std::vector<int>& wanted, const std::vector<int>& views = {},
                 nb::handle self = nb::handle()) {
  nb::dict out;
  for (int id : wanted) {
    const bool view = self.is_valid() &&
                      std::find(views.begin(), views.end(), id) != views.end() &&
                      Io::in_arena(ex, id);
    out[ex.tensor(id).name] = Io::fetch(ex, id, !view, view ? self : nb::handle());
  }
  return out;
}

// The ids of `names`, each one of the step's results (`wanted`); ValueError otherwise.
template <class Ex>
std::vector<int> view_ids(const Ex& ex, const std::vector<std::string>& names,
                          const std::vector<int>& wanted) {
  std::vector<int> ids;
  for (const std::string& name : names) {
    int id = ex.tensor_index(name);
    if (id < 0 || std::find(wanted.begin(), wanted.end(), id) == wanted.end())
      throw nb::value_error(("views: '" + name + "' is not an output of plan '" +
                             std::string(ex.schedule().name) + "' nor named in outputs")
                                .c_str());
    ids.push_back(id);
  }
  return ids;
}

template <class Ex, class Io>
nb::dict run_step(nb::handle self, nb::dict feeds, const std::vector<std::string>& extra,
                  const std::vector<std::string>& view_names) {
  Ex& ex = nb::cast<Ex&>(self);
  auto lock = hold(ex);  // two threads stepping one executor take turns
  refuse_in_flight(ex);
  std::vector<int> bound;
  std::vector<int> wanted = prepare<Ex, Io>(ex, feeds, extra, false, &bound);
  std::vector<int> views;
  try {
    views = view_ids(ex, view_names, wanted);
  } catch (...) {
    for (int id : bound) Io::unbind(ex, id);
    throw;
  }
  {
    nb::gil_scoped_release release;
    try {
      ex.step();
    } catch (...) {
      nb::gil_scoped_acquire acquire;
      for (int id : bound) Io::unbind(ex, id);
      throw;
    }
  }
  // Copy the results out first: an output may be a view of a feed read in place.
  nb::dict out = results<Ex, Io>(ex, wanted, views, self);
  for (int id : bound) Io::unbind(ex, id);  // never keep caller memory past the call
  return out;
}

// Values load_params refuses that the shape and dtype checks let through: state that would
// make every later step wrong without an error. fp16-mixed's loss scale (UnscaleGrads' last
// input: optimizer state, so it may be left out, but zero or left at zero it turns every
// gradient into 0 * inf = NaN) must be loaded, finite and positive; an int64 step counter (an
// Increment's: the random ops' rng/step, the micro-batch count) must lie in [0, 2^62], so no
// run wraps it negative.
constexpr int64_t kMaxStepCount = int64_t{1} << 62;

template <class Ex>
void check_state_values(const Ex& ex, const std::vector<std::pair<int, Array>>& given,
                        bool partial) {
  const Schedule& s = ex.schedule();
  auto value_of = [&](int id) -> const Array* {
    for (const auto& [k, a] : given)
      if (k == id) return &a;
    return nullptr;
  };
  for (int k = 0; k < s.num_ops; ++k) {
    const OpSpec& op = s.ops[k];
    const std::string type = op.op;
    if ((type == "UnscaleGrads" || type == "ShardedUnscaleGrads") && op.num_inputs > 0) {
      const int id = s.args[op.first_input + op.num_inputs - 1];
      const std::string name = s.tensors[id].name;
      if (const Array* a = value_of(id)) {
        const float v = *static_cast<const float*>(a->data());
        if (!(std::isfinite(v) && v > 0.f))
          throw nb::value_error(("load_params: '" + name + "' (the fp16 loss scale) is " +
                                 std::to_string(v) + "; it must be finite and positive "
                                 "(init_params gives 2^16)").c_str());
      } else if (!partial && !ex.is_loaded(id)) {
        throw nb::value_error(("load_params: missing '" + name + "' (the fp16 loss scale; "
                               "at zero every gradient is NaN): pass it (init_params gives "
                               "2^16)").c_str());
      }
    } else if (type == "Increment" && op.num_inputs > 0) {
      const int id = s.args[op.first_input];
      const Array* a = value_of(id);
      if (a == nullptr || s.tensors[id].dtype != I64) continue;
      const int64_t v = *static_cast<const int64_t*>(a->data());
      if (v < 0 || v > kMaxStepCount)
        throw nb::value_error(("load_params: '" + std::string(s.tensors[id].name) + "' (a " +
                               "step count) is " + std::to_string(v) + "; it must lie in [0, "
                               "2^62]").c_str());
    }
  }
}

template <class Ex, class Io>
void define_executor(nb::class_<Ex>& cls) {
  cls.def_prop_ro("concurrent", &Ex::concurrent)
      .def_prop_ro("lanes", &Ex::lanes)
      .def_prop_ro("plan", [](const Ex& ex) { return std::string(ex.schedule().plan_json); })
      .def_prop_ro("name", [](const Ex& ex) { return std::string(ex.schedule().name); })
      .def_prop_ro("kind", [](const Ex& ex) { return std::string(ex.schedule().kind); })
      .def("load_params",
           [](Ex& ex, nb::dict values, bool partial) {
             auto lock = hold(ex);
             refuse_in_flight(ex);
             std::vector<std::pair<int, Array>> checked;
             std::vector<int> given;
             for (auto [key, value] : values) {
               std::string name = key_name(key, "parameter");
               int id = ex.tensor_index(name);
               if (id < 0 || !persistent(ex.tensor(id).role) || ex.tensor(id).updates >= 0)
                 throw nb::value_error(("'" + name + "' is not a parameter or state tensor of "
                                        "plan '" + ex.schedule().name + "'").c_str());
               Array a;
               if (!nb::try_cast(value, a)) throw not_an_array(value, "parameter '" + name + "'");
               check(ex.tensor(id), a, "parameter");
               checked.emplace_back(id, a);
               given.push_back(id);
             }
             const std::vector<std::string> absent = ex.missing(given);
             check_state_values(ex, checked, partial);
             if (!partial && !absent.empty())
               throw nb::value_error(("load_params: missing " + name_list(absent) +
                                      "; pass every parameter and state tensor, or "
                                      "partial=True to load some now and the rest later")
                                         .c_str());
             for (auto& [id, a] : checked) {
               Io::load(ex, id, a);
               ex.mark_loaded(id);
             }
           },
           "values"_a, "partial"_a = false,
           "Copy parameters (and state) in; every name and shape is checked first. Every "
           "parameter and state tensor is required unless partial=True; optimizer state may be "
           "left out (it starts at zero).")
      .def("params",
           [](nb::handle self, bool copy, std::optional<std::vector<std::string>> names) {
             Ex& ex = nb::cast<Ex&>(self);
             auto lock = hold(ex);
             refuse_in_flight(ex);
             nb::dict out;
             const Schedule& s = ex.schedule();
             if (names) {
               for (const std::string& name : *names) {
                 const int id = ex.tensor_index(name);
                 if (id < 0 || !persistent(ex.tensor(id).role) || ex.tensor(id).updates >= 0)
                   throw nb::value_error(("params: '" + name + "' is not a parameter or state "
                                          "tensor of plan '" + s.name + "'").c_str());
                 out[name.c_str()] = Io::fetch(ex, id, copy, self);
               }
               return out;
             }
             for (int i = 0; i < s.num_tensors; ++i) {
               const TensorSpec& t = s.tensors[i];
               if (persistent(t.role) && t.updates < 0) out[t.name] = Io::fetch(ex, i, copy, self);
             }
             return out;
           },
           "copy"_a = true, "names"_a = nb::none(),
           "Parameters and state by name: copies, or (copy=False) live views of the arena; "
           "names: only those (a CPU executor's view of a weight it holds in its kernels' "
           "layout releases that weight to plain, docs/executor.md).")
      .def_prop_ro("param_names",
                   [](const Ex& ex) {
                     std::vector<std::string> out;
                     const Schedule& s = ex.schedule();
                     for (int i = 0; i < s.num_tensors; ++i)
                       if (persistent(s.tensors[i].role) && s.tensors[i].updates < 0)
                         out.push_back(s.tensors[i].name);
                     return out;
                   },
                   "The names params() gives, without their values.")
      // Written once, in Python (planner/runtime/hyperparameters.py), over params and load_params.
      .def("set_hyperparameters",
           [](nb::handle self, nb::dict values, int group) {
             nb::module_::import_("planner.runtime.hyperparameters")
                 .attr("set_hyperparameters")(self, values, group);
           },
           "values"_a, "group"_a = 0,
           "Set a parameter group's learning rate and weight decay ({\"lr\": ..}) for the "
           "next steps: scalars the step reads (planner/runtime/hyperparameters.py).")
      .def("hyperparameters",
           [](nb::handle self) {
             return nb::module_::import_("planner.runtime.hyperparameters").attr("hyperparameters")(self);
           },
           "{group: {\"lr\": .., \"weight_decay\": ..}} as the next step reads them.")
      .def("state_dict",
           [](nb::handle self) {
             return nb::module_::import_("planner.runtime.checkpoint").attr("state_dict")(self);
           },
           "The run's state as PyTorch names it: model, optimizer (state, param_groups) and "
           "planner (step counts, loss scale); copies (planner/runtime/checkpoint.py).")
      .def("load_state_dict",
           [](nb::handle self, nb::dict checkpoint) {
             nb::module_::import_("planner.runtime.checkpoint").attr("load_state_dict")(self, checkpoint);
           },
           "checkpoint"_a, "Load a state_dict(): every tensor checked, then all written.")
      .def("step",
           [](nb::handle self, nb::dict feeds, std::vector<std::string> outputs,
              std::vector<std::string> views) {
             return run_step<Ex, Io>(self, feeds, outputs, views);
           },
           "feeds"_a, "outputs"_a = std::vector<std::string>(),
           "views"_a = std::vector<std::string>(),
           "Run one step; returns the graph's outputs (the loss, ...) and `outputs` by name: "
           "copies, except those named in `views` whose bytes lie in the arena, returned as "
           "live views of it (valid until the executor runs again).")
      .def("step_async",
           [](Ex& ex, nb::dict feeds, std::vector<std::string> outputs) {
             auto lock = hold(ex);
             if (ex.in_flight())
               throw nb::value_error("a step is already in flight: wait() for it first");
             std::vector<int> bound;
             // Feeds are copied into the arena: the caller may refill its arrays at once.
             ex.pending_outputs = prepare<Ex, Io>(ex, feeds, outputs, true, &bound);
             ex.start_async();
           },
           "feeds"_a, "outputs"_a = std::vector<std::string>(),
           "Start one step and return at once; the feeds are copied first, so their arrays "
           "may be refilled (the next batch prepared) while it runs. wait() returns its "
           "outputs.")
      .def("wait",
           [](Ex& ex) {
             auto lock = hold(ex);
             {
               nb::gil_scoped_release release;
               ex.join_async();
             }
             return results<Ex, Io>(ex, ex.pending_outputs);
           },
           "Wait for the step in flight; its outputs as step() returns them (its error, "
           "naming the op, if it failed).")
      .def("wait_for_all",
           [](Ex& ex) -> nb::object {
             auto lock = hold(ex);
             if (!ex.in_flight()) return nb::none();
             {
               nb::gil_scoped_release release;
               ex.join_async();
             }
             return nb::object(results<Ex, Io>(ex, ex.pending_outputs));
           },
           "Wait until no step is in flight: the outputs of the one that was, else None.")
      .def("forward",
           [](nb::handle self, nb::dict feeds, std::vector<std::string> outputs,
              std::vector<std::string> views) {
             if (std::string(nb::cast<Ex&>(self).schedule().kind) != "inference")
               throw nb::value_error("forward() runs inference plans; this is a training plan: "
                                     "use step()");
             return run_step<Ex, Io>(self, feeds, outputs, views);
           },
           "feeds"_a, "outputs"_a = std::vector<std::string>(),
           "views"_a = std::vector<std::string>(),
           "Run an inference plan once; its results as step() returns them.")
      .def("stats",
           [](const Ex& ex) {
             auto lock = hold(ex);
             nb::list ops;
             const Schedule& s = ex.schedule();
             for (int k = 0; k < s.num_ops; ++k) {
               const auto& st = ex.op_stats()[k];
               nb::dict d;
               d["name"] = s.ops[k].name;
               d["op"] = s.ops[k].op;
               d["threads"] = s.ops[k].threads;
               d["lane"] = s.ops[k].lane;
               d["scratch_bytes"] = ex.scratch_needed(k);
               d["scratch_planned"] = ex.scratch_planned(k);
               d["calls"] = st.calls;
               d["seconds"] = st.calls ? st.seconds / st.calls : 0.0;
               Io::op_stats(ex, k, d);
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
             Io::stats(ex, out);
             return out;
           },
           "Per-op mean measured seconds, call counts, lanes and scratch bytes (what the kernel "
           "needs, and whether the plan's area held it); arena, tensor and scratch bytes.")
      .def("reset_stats", &Ex::reset_stats);
}

// The op names a runtime has kernels for (codegen's supported list must agree).
template <class Registry>
std::vector<std::string> registered_names(const Registry& r) {
  std::vector<std::string> names;
  for (const auto& kv : r) names.push_back(kv.first);
  return names;
}

// `set_collective(fn, rank)`, the same on every backend: the executor's collective
// (common/collective.h) becomes a call fn(what, bucket, stream) into Python, made while a
// step runs (on the CPU's comm lane, or where the CUDA step issues the op; the GIL released
// by step), holding the GIL for the call only; a Python error becomes the step's error.
// `bucket` is a float32 torch tensor over the floats in the arena (DLPack, no copy, no owner:
// valid for the call only) on the executor's device: `device_type` (nb::device::cpu or
// ::cuda) and `device_id(ex)`; `stream` the CUDA stream to order the collective on, as an
// integer (0 on the CPU). planner/runtime/distributed.py is its one caller.
inline bool interpreter_exiting() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

template <class Ex, class DeviceId>
void define_collective(nb::class_<Ex>& cls, int32_t device_type, DeviceId device_id) {
  cls.def(
      "set_collective",
      [device_type, device_id](Ex& ex, nb::callable fn, int rank) {
        auto shared = std::make_shared<nb::callable>(std::move(fn));
        const int32_t device = device_id(ex);
        Collective c;
        c.rank = rank;
        c.run = [shared, device_type, device](int what, float* data, int64_t count,
                                              void* stream) {
          // A thread taking the GIL while the interpreter finalizes is ended by pthread_exit,
          // whose unwinding through the step's thread aborts the process ("terminate called
          // without an active exception"): fail the step instead. planner.runtime.distributed waits
          // for a step in flight at exit, so this is only reached by one started later.
          if (interpreter_exiting())
            throw std::runtime_error("the Python interpreter is exiting: the collective did "
                                     "not run (wait() for a step before the script ends)");
          nb::gil_scoped_acquire acquire;
          try {
            size_t shape[1] = {static_cast<size_t>(count)};
            nb::object bucket = nb::ndarray<nb::pytorch, float, nb::ndim<1>>(
                data, 1, shape, nb::handle(), nullptr, nb::dtype<float>(), device_type,
                device).cast(nb::rv_policy::reference);
            (*shared)(what, bucket, reinterpret_cast<uintptr_t>(stream));
          } catch (nb::python_error& e) {
            // Its message without the traceback: the step's error is one line.
            throw std::runtime_error(nb::str(e.value()).c_str());
          }
        };
        auto lock = hold(ex);  // not while a step runs
        ex.set_collective(std::move(c));
      },
      "fn"_a, "rank"_a,
      "fn(what, bucket, stream) runs a collective in place on a float32 torch view of a "
      "bucket in the arena (on the executor's device) over the process group (data-parallel "
      "plans): what 0 a sum all-reduce, 1 a sum reduce-scatter into this rank's shard "
      "(rank x len / ranks), 2 an all-gather of the shards; stream: the CUDA stream (an "
      "integer, 0 on the CPU) it must be enqueued on without waiting for the GPU. It holds "
      "the GIL only for the call. rank: this process's rank in the group.");
}

}  // namespace planner
