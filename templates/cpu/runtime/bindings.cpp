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

#include <cstring>

#include "executor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace planner {
namespace {

using Array = nb::ndarray<nb::ro, nb::device::cpu>;

const char* dtype_name(int d) {
  switch (d) {
    case F32: return "float32";
    case F64: return "float64";
    case F16: return "float16";
    case I64: return "int64";
    case I32: return "int32";
    case BOOL: return "bool";
  }
  return "?";
}

nb::dlpack::dtype dl_dtype(int d) {
  switch (d) {
    case F32: return nb::dtype<float>();
    case F64: return nb::dtype<double>();
    case I64: return nb::dtype<int64_t>();
    case I32: return nb::dtype<int32_t>();
    case BOOL: return nb::dtype<bool>();
    case F16: return nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
  }
  throw std::runtime_error("unknown dtype");
}

std::string array_text(const Array& a) {
  std::string s = "[";
  for (size_t k = 0; k < a.ndim(); ++k) s += (k ? ", " : "") + std::to_string(a.shape(k));
  return s + "]";
}

// Checks `a` against tensor `id`; returns true when it is C-contiguous (readable in place).
bool check(const Executor& ex, int id, const Array& a, const char* what) {
  const TensorSpec& t = ex.tensor(id);
  Shape want = ex.shape(id);
  bool same = a.ndim() == want.size();
  for (size_t k = 0; same && k < want.size(); ++k) same = a.shape(k) == static_cast<size_t>(want[k]);
  if (!same)
    throw nb::value_error((std::string(what) + " '" + t.name + "' has shape " + array_text(a) +
                           ", expected " + shape_text(want)).c_str());
  if (a.dtype() != dl_dtype(t.dtype))
    throw nb::value_error((std::string(what) + " '" + t.name + "' must be " +
                           dtype_name(t.dtype) + " " + shape_text(want) +
                           "; got another dtype").c_str());
  int64_t expect = 1;
  for (int k = static_cast<int>(a.ndim()) - 1; k >= 0; --k) {
    if (a.shape(k) != 1 && a.stride(k) != expect) return false;
    expect *= static_cast<int64_t>(a.shape(k));
  }
  return true;
}

// Copies any-strided `a` into contiguous `dst` (element size from the tensor's dtype).
void copy_in(char* dst, const Array& a, int esize) {
  size_t n = a.size();
  const char* base = static_cast<const char*>(a.data());
  std::vector<size_t> idx(a.ndim(), 0);
  for (size_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (size_t k = 0; k < a.ndim(); ++k) off += static_cast<int64_t>(idx[k]) * a.stride(k);
    std::memcpy(dst + e * esize, base + off * esize, esize);
    for (int k = static_cast<int>(a.ndim()) - 1; k >= 0; --k) {
      if (++idx[k] < a.shape(k)) break;
      idx[k] = 0;
    }
  }
}

nb::object to_numpy(const Executor& ex, int id, bool copy, nb::handle owner) {
  const TensorSpec& t = ex.tensor(id);
  std::vector<size_t> shape(t.shape, t.shape + t.rank);
  char* data = ex.data(id);
  if (!copy)
    return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr,
                                  dl_dtype(t.dtype)).cast();
  char* buf = new char[std::max<int64_t>(t.nbytes, 1)];
  std::memcpy(buf, data, t.nbytes);
  nb::capsule own(buf, [](void* p) noexcept { delete[] static_cast<char*>(p); });
  return nb::ndarray<nb::numpy>(buf, shape.size(), shape.data(), own, nullptr,
                                dl_dtype(t.dtype)).cast();
}

bool persistent(int role) { return role == PARAM || role == STATE || role == OPT_STATE; }

nb::dict run_step(Executor& ex, nb::dict feeds, const std::vector<std::string>& extra) {
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
    if (check(ex, id, a, "feed")) {
      ex.bind(id, static_cast<char*>(const_cast<void*>(a.data())));
    } else {
      ex.bind(id, nullptr);
      copy_in(ex.data(id), a, dtype_bytes(ex.tensor(id).dtype));
    }
  }
  {
    nb::gil_scoped_release release;
    try {
      ex.step();
    } catch (...) {
      nb::gil_scoped_acquire acquire;
      for (auto& b : bound) ex.bind(b.first, nullptr);
      throw;
    }
  }
  // Copy the results out first: an output may be a view of a feed read in place.
  nb::dict out;
  for (int id : wanted) out[ex.tensor(id).name] = to_numpy(ex, id, true, nb::handle());
  for (auto& b : bound) ex.bind(b.first, nullptr);  // never keep caller memory past the call
  return out;
}

}  // namespace
}  // namespace planner

NB_MODULE(planner_cpu_rt, m) {
  using planner::Executor;
  m.doc() = "planner CPU runtime: oneDNN + OpenMP kernels driven by a compiled schedule";
  nb::class_<Executor>(m, "Executor")
      .def(nb::init<const std::string&>(), "schedule_path"_a)
      .def_prop_ro("plan", [](const Executor& ex) { return std::string(ex.schedule().plan_json); })
      .def_prop_ro("name", [](const Executor& ex) { return std::string(ex.schedule().name); })
      .def_prop_ro("kind", [](const Executor& ex) { return std::string(ex.schedule().kind); })
      .def("load_params",
           [](Executor& ex, nb::dict values, bool partial) {
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
               planner::check(ex, id, a, "parameter");
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
             nb::dict out;
             const planner::Schedule& s = ex.schedule();
             for (int i = 0; i < s.num_tensors; ++i) {
               const planner::TensorSpec& t = s.tensors[i];
               if (planner::persistent(t.role) && t.updates < 0)
                 out[t.name] = planner::to_numpy(ex, i, copy, self);
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
               d["calls"] = st.calls;
               d["seconds"] = st.calls ? st.seconds / st.calls : 0.0;
               ops.append(d);
             }
             nb::dict out;
             out["ops"] = ops;
             out["steps"] = ex.steps();
             out["arena_bytes"] = ex.arena_bytes();
             out["scratch_bytes"] = ex.scratch_bytes();
             out["tensor_bytes"] = ex.arena_bytes() - ex.scratch_bytes();
             return out;
           },
           "Per-op mean measured seconds and call counts, arena and scratch bytes.")
      .def("reset_stats", &Executor::reset_stats);
  m.def("kernel_ops",
        []() {
          std::vector<std::string> names;
          for (const auto& kv : planner::registry()) names.push_back(kv.first);
          return names;
        },
        "The op types this runtime has kernels for (sorted).");
}
