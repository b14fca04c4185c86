// Python bindings of the CUDA runtime (nanobind): the Executor of one schedule library, with
// the API every backend's executor shares (templates/common/bindings.h).
//
//   ex = Executor("/path/to/libschedule.so", streams=True, cuda_graph=False)
//   ex.load_params({"fc1/weight": w, ...});  ex.params()      # numpy in, numpy copies out
//   out = ex.step({"x": x, "labels": y})                      # feeds: numpy or CUDA arrays
//   ex.params(copy=False)["fc1/weight"]                       # DLPack view of the arena
//
// Feeds may be host arrays (copied in) or CUDA arrays of any DLPack producer (torch, cupy:
// copied device-to-device into their arena slots on the step's stream, so a captured CUDA
// graph keeps its addresses). params(copy=False) hands out zero-copy device views.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>

#include <cstdint>
#include <cstring>
#include <memory>

// executor.h first: the shared bindings use its name_list.
#include "executor.h"
#include "bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace planner {
namespace {

using DeviceArray = nb::ndarray<nb::ro, nb::device::cuda>;

// A contiguous host copy of `a` when it is strided; `a`'s own bytes otherwise.
const void* host_bytes(const TensorSpec& t, const Array& a, bool contiguous,
                       std::vector<char>* staging) {
  if (contiguous) return a.data();
  staging->resize(static_cast<size_t>(t.nbytes));
  copy_in(staging->data(), a, dtype_bytes(t.dtype));
  return staging->data();
}

struct Io {
  // `copy` (step_async): the caller may refill its arrays once the call returns, so a device
  // feed's copy is waited for, not only queued.
  static void feed(CudaExecutor& ex, int id, nb::handle value, bool copy) {
    const TensorSpec& t = ex.tensor(id);
    DeviceArray d;
    if (nb::try_cast(value, d)) {
      if (!check(t, d, "feed"))
        throw nb::value_error((std::string("feed '") + t.name + "' is a strided CUDA array; "
                               "pass a contiguous one").c_str());
      ex.write_device(id, d.data(), t.nbytes, copy);
      return;
    }
    Array a;
    if (!nb::try_cast(value, a))
      throw not_an_array(value, std::string("feed '") + t.name + "'", "a host or CUDA array");
    std::vector<char> staging;
    const void* bytes = host_bytes(t, a, check(t, a, "feed"), &staging);
    // The copy waits for the step before (a step ends with no host wait): not with the GIL.
    nb::gil_scoped_release release;
    ex.write(id, bytes, t.nbytes);
  }
  static void unbind(CudaExecutor&, int) {}  // feeds are always copied into the arena
  static void load(CudaExecutor& ex, int id, const Array& a) {
    const TensorSpec& t = ex.tensor(id);
    std::vector<char> staging;
    ex.write(id, host_bytes(t, a, check(t, a, "parameter"), &staging), t.nbytes);
  }
  static nb::object fetch(CudaExecutor& ex, int id, bool copy, nb::handle owner) {
    const TensorSpec& t = ex.tensor(id);
    std::vector<size_t> shape(t.shape, t.shape + t.rank);
    if (!copy) {
      // The executor's device, not the calling thread's current one: they may differ.
      return nb::ndarray<>(ex.device_data(id), shape.size(), shape.data(), owner, nullptr,
                           dl_dtype(t.dtype), nb::device::cuda::value, ex.device()).cast();
    }
    char* buf = new char[std::max<int64_t>(t.nbytes, 1)];
    try {
      nb::gil_scoped_release release;  // the read waits for the step: other threads run on
      ex.read(id, buf, t.nbytes);
    } catch (...) {
      delete[] buf;
      throw;
    }
    nb::capsule own(buf, [](void* p) noexcept { delete[] static_cast<char*>(p); });
    // a numpy view of the copy (bfloat16 as ml_dtypes.bfloat16: numpy has no DLPack bfloat16)
    return to_numpy(t, buf, false, own);
  }
  // Feeds are copied into the arena, so only a tensor the plan keeps elsewhere (the host
  // store of an offloaded one) lies outside it.
  static bool in_arena(const CudaExecutor& ex, int id) {
    const char* p = ex.device_data(id);
    const int64_t bytes = ex.tensor(id).nbytes;
    return p != nullptr && bytes > 0 && ex.arena_base() <= p &&
           p + bytes <= ex.arena_base() + ex.arena_bytes();
  }
  static void op_stats(const CudaExecutor& ex, int k, nb::dict& d) {
    std::string detail = ex.detail(k);
    if (!detail.empty()) d["algorithm"] = detail;
  }
  static void stats(const CudaExecutor& ex, nb::dict& d) {
    double seconds;
    {
      nb::gil_scoped_release release;  // waits for the step
      seconds = ex.last_step_seconds();
    }
    d["step_seconds"] = seconds;
    d["cuda_graph"] = ex.cuda_graph();
    // Where the device arena starts (with arena_bytes: whether a view handed to a collective
    // lies in it, as on the CPU).
    d["arena_address"] = reinterpret_cast<uintptr_t>(ex.arena_base());
    d["host_store_bytes"] = ex.host_store_bytes();
    d["held_bytes"] = ex.arena_bytes() + ex.host_store_bytes() + ex.unplanned_scratch_bytes();
  }
};

// evaluate(feeds): a training plan's evaluation from the same build (evaluation.h), as the
// CPU runtime's: host feeds checked as step()'s and copied to the device, the outputs copied
// back; the step's parameters, state and counts are read, never written.
nb::dict evaluate(CudaExecutor& ex, nb::dict feeds) {
  auto lock = hold(ex);
  refuse_in_flight(ex);
  if (!ex.has_evaluation())
    throw nb::value_error(("evaluate(): plan '" + std::string(ex.schedule().name) + "' carries "
                           "no evaluation schedule (an inference plan, or one planned with "
                           "--no-evaluation): use forward(), or re-plan it").c_str());
  ex.check_loaded();
  CudaEvaluation* ev;
  {
    nb::gil_scoped_release release;  // waits for the step before
    ev = &ex.evaluation();
  }
  const Schedule& s = ev->schedule();
  std::vector<std::pair<int, Array>> given =
      evaluation_feeds(*ev, feeds, ex.schedule().name, "a host array");
  std::vector<std::vector<char>> staged(given.size());
  std::vector<const void*> bytes;
  for (size_t g = 0; g < given.size(); ++g) {
    const TensorSpec& t = ev->tensor(given[g].first);
    bytes.push_back(host_bytes(t, given[g].second, check(t, given[g].second, "feed"),
                               &staged[g]));
  }
  std::vector<std::vector<char>> results(s.num_outputs);
  {
    nb::gil_scoped_release release;
    for (size_t g = 0; g < given.size(); ++g)
      ev->write(given[g].first, bytes[g], ev->tensor(given[g].first).nbytes);
    ev->run();
    for (int o = 0; o < s.num_outputs; ++o) {
      const TensorSpec& t = ev->tensor(s.outputs[o]);
      results[o].resize(static_cast<size_t>(std::max<int64_t>(t.nbytes, 1)));
      ev->read(s.outputs[o], results[o].data(), t.nbytes);
    }
  }
  nb::dict out;
  for (int o = 0; o < s.num_outputs; ++o) {
    const TensorSpec& t = ev->tensor(s.outputs[o]);
    out[t.name] = to_numpy(t, results[o].data(), true, nb::handle());
  }
  return out;
}

}  // namespace
}  // namespace planner

NB_MODULE(planner_cuda_rt, m) {
  using planner::CudaExecutor;
  m.doc() = "planner CUDA runtime: cuDNN, cuBLAS and generated kernels on the plan's streams";
  m.def("registered_ops", [] { return planner::registered_names(planner::registry()); },
        "The op names this runtime has kernels for (codegen's supported list must agree).");
  m.def("device_memory", [](int device) {
    planner::check_cuda(cudaSetDevice(device), "cudaSetDevice");
    size_t free_bytes = 0, total = 0;
    planner::check_cuda(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
    return std::make_pair(free_bytes, total);
  }, "device"_a = 0, "(free, total) bytes of the device's memory (cudaMemGetInfo).");
  m.def("device_info", [](int device) {
    cudaDeviceProp p;
    planner::check_cuda(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    nb::dict d;
    d["name"] = std::string(p.name);
    d["sms"] = p.multiProcessorCount;
    d["memory_bytes"] = static_cast<int64_t>(p.totalGlobalMem);
    d["capability"] = std::to_string(p.major) + std::to_string(p.minor);
    d["l2_bytes"] = p.l2CacheSize;
    return d;
  }, "device"_a = 0, "The device's name, SM count, memory, compute capability and L2 size.");
  // Weakly referenceable: planner.runtime.distributed finishes a joined executor's step at exit.
  nb::class_<CudaExecutor> cls(m, "Executor", nb::is_weak_referenceable());
  cls.def(nb::init<const std::string&, bool, bool, bool, int>(), "schedule_path"_a,
          "streams"_a = true, "cuda_graph"_a = false, "op_timing"_a = false, "device"_a = 0,
          "Load a schedule onto a GPU. streams: run ops on the plan's streams (False: one "
          "stream, plan order); cuda_graph: run the first step eagerly, capture the second and "
          "replay it after; "
          "op_timing: time every op with events (stats()).");
  planner::define_executor<CudaExecutor, planner::Io>(cls);
  cls.def("evaluate", &planner::evaluate, "feeds"_a,
          "Run the training plan's evaluation (the forward graph in inference mode) on the "
          "parameters as trained, on the device; host feeds; returns its outputs and loss by "
          "name. Changes no parameter, state or step count.");
  cls.def_prop_ro("has_evaluation", &CudaExecutor::has_evaluation,
                  "Whether the plan carries an evaluation schedule (evaluate() runs it).");
  planner::define_collective(cls, nb::device::cuda::value,
                             [](const CudaExecutor& ex) { return ex.device(); });
  cls.def("find", [](CudaExecutor& ex, const std::string& op, int64_t workspace_bytes) {
    const planner::Schedule& s = ex.schedule();
    int k = 0;
    while (k < s.num_ops && op != s.ops[k].name) ++k;
    if (k == s.num_ops) throw nb::key_error(("no op '" + op + "' in the plan").c_str());
    nb::list out;
    for (const planner::Measured& m : ex.find(k, workspace_bytes)) {
      nb::dict d;
      d["algorithm"] = m.family;
      d["library_name"] = m.name;
      d["seconds"] = m.seconds;
      d["workspace_bytes"] = static_cast<int64_t>(m.workspace_bytes);
      out.append(d);
    }
    return out;
  }, "op"_a, "workspace_bytes"_a,
     "Profiling, between steps: every way op `op` runs with at most `workspace_bytes` of "
     "workspace, timed by its library (a convolution's cuDNN algorithms, by the plan's "
     "family names); [] for an op that offers no choice.");
}
