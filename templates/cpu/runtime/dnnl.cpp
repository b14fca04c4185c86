// oneDNN helpers of the CPU runtime: descriptors, user scratchpads, DnnlKernel.
#include <algorithm>

#include "dnnl_kernel.h"

namespace planner {

// ---- oneDNN helpers -------------------------------------------------------------------------

memory::data_type dnnl_type(int dtype) {
  switch (dtype) {
    case F32: return dt::f32;
    case F16: return dt::f16;
    case BF16: return dt::bf16;
    case I32: return dt::s32;
  }
  throw std::runtime_error("oneDNN kernels take float32, bfloat16 and float16 tensors, got dtype code " +
                           std::to_string(dtype));
}

memory::desc view_md(const Shape& dims, int dtype) {
  memory::dims d(dims.begin(), dims.end());
  if (d.empty()) d = {1};
  memory::dims strides(d.size(), 1);
  for (int k = static_cast<int>(d.size()) - 2; k >= 0; --k) strides[k] = strides[k + 1] * d[k + 1];
  return memory::desc(d, dnnl_type(dtype), strides);
}

memory::desc plain_md(const Shape& shape, int dtype) { return view_md(shape, dtype); }

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

memory::dims dnnl_dilation(const std::vector<int64_t>& d) {
  memory::dims out;
  for (int64_t x : d) out.push_back(x - 1);
  return out;
}

// ---- DnnlKernel -----------------------------------------------------------------------------

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

int64_t DnnlKernel::temp(size_t bytes) {
  int64_t at = static_cast<int64_t>(temps_);
  temps_ += align64(bytes);
  return at;
}

size_t DnnlKernel::add(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
                       std::vector<Arg> args) {
  Step s{prim, std::move(args), {}, {}};
  impl_ += (impl_.empty() ? "" : " + ") + std::string(pd.impl_info_str());
  dnnl::engine eng = pd.get_engine();
  for (const Arg& a : s.args) {
    memory::desc md = pd.query_md(dnnl::query::exec_arg_md, a.dnnl_arg);
    s.mems.emplace_back(md, eng, static_cast<void*>(nullptr));
  }
  memory::desc sp = pd.scratchpad_desc();
  if (sp.get_size() > 0) {
    scratchpad_ = std::max(scratchpad_, align64(sp.get_size()));
    s.args.push_back(Arg{DNNL_ARG_SCRATCHPAD, -1, -2});
    s.mems.emplace_back(sp, eng, static_cast<void*>(nullptr));
  }
  for (size_t k = 0; k < s.args.size(); ++k)
    s.c_args.push_back(dnnl_exec_arg_t{s.args[k].dnnl_arg, s.mems[k].get()});
  steps_.push_back(std::move(s));
  return steps_.size() - 1;
}

void DnnlKernel::run_one(size_t k, const Run& r) {
  Step& s = steps_[k];
  for (size_t a = 0; a < s.args.size(); ++a) {
    const Arg& arg = s.args[a];
    char* p = arg.tensor >= 0 ? r.ptr[arg.tensor]
              : arg.temp >= 0 ? r.scratch + arg.temp
                              : r.scratch + temps_;  // the scratchpad follows the temporaries
    s.mems[a].set_data_handle(p);
  }
  dnnl_status_t st = dnnl_primitive_execute(s.prim.get(), r.stream,
                                            static_cast<int>(s.c_args.size()), s.c_args.data());
  if (st != dnnl_success)
    throw std::runtime_error("oneDNN primitive failed with status " + std::to_string(st));
}

void DnnlKernel::run_all(const Run& r) {
  for (size_t k = 0; k < steps_.size(); ++k) run_one(k, r);
}

}  // namespace planner
