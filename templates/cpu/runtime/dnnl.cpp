// oneDNN helpers of the CPU runtime: descriptors, user scratchpads, DnnlKernel.
#include <algorithm>
#include <cstring>

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

memory::desc held_md(const TensorRef& t) {
  if (!t.block) return plain_md(t.shape, t.dtype);
  return memory::desc(memory::dims(t.shape.begin(), t.shape.end()), dnnl_type(t.dtype),
                      t.block == 16 ? tag::aBcd16b : tag::aBcd8b);
}

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
                       std::vector<Arg> args, bool zero_scratchpad) {
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
    if (zero_scratchpad) s.zeroed_bytes = sp.get_size();
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
    char* p = arg.slot != nullptr ? *arg.slot
              : arg.tensor >= 0 ? r.ptr[arg.tensor]
              : arg.temp >= 0   ? r.scratch + arg.temp
                                : r.scratch + temps_;  // the scratchpad follows the temporaries
    s.mems[a].set_data_handle(p);
  }
  if (s.zeroed_bytes) std::memset(r.scratch + temps_, 0, s.zeroed_bytes);
  dnnl_status_t st = dnnl_primitive_execute(s.prim.get(), r.stream,
                                            static_cast<int>(s.c_args.size()), s.c_args.data());
  if (st != dnnl_success)
    throw std::runtime_error("oneDNN primitive failed with status " + std::to_string(st));
}

void DnnlKernel::run_all(const Run& r) {
  for (size_t k = 0; k < steps_.size(); ++k) run_one(k, r);
}

// ---- Widened ---------------------------------------------------------------------------------

namespace {

bool is_low(int dtype) { return dtype == BF16 || dtype == F16; }
bool has_low(const Node& n) {
  for (const auto* ts : {&n.in, &n.out})
    for (const TensorRef& t : *ts)
      if (is_low(t.dtype)) return true;
  return false;
}

class Widened : public DnnlKernel {
 public:
  Widened(const Node& n, Factory make) {
    Node wide{n.spec, n.in, n.out, n.attrs, n.engine, n.threads};
    int top = 0;
    for (const TensorRef& t : n.in) top = std::max(top, t.id);
    for (const TensorRef& t : n.out) top = std::max(top, t.id);
    ptrs_.assign(static_cast<size_t>(top) + 1, nullptr);
    auto convert = [&](const TensorRef& t, bool in) {
      int64_t at = temp(static_cast<size_t>(t.size()) * sizeof(float));
      auto low = plain_md(t.shape, t.dtype), f32 = plain_md(t.shape, F32);
      auto pd = in ? dnnl::reorder::primitive_desc(n.engine, low, n.engine, f32, user_scratchpad())
                   : dnnl::reorder::primitive_desc(n.engine, f32, n.engine, low, user_scratchpad());
      std::vector<Arg> args = in ? std::vector<Arg>{{DNNL_ARG_FROM, t.id}, {DNNL_ARG_TO, -1, at}}
                                 : std::vector<Arg>{{DNNL_ARG_FROM, -1, at}, {DNNL_ARG_TO, t.id}};
      (in ? widen_ : narrow_).push_back(add(dnnl::reorder(pd), pd, args));
      wide_.push_back({t.id, at});
    };
    for (TensorRef& t : wide.in)
      if (is_low(t.dtype)) convert(t, true), t.dtype = F32;
    for (TensorRef& t : wide.out)
      if (is_low(t.dtype)) convert(t, false), t.dtype = F32;
    for (const TensorRef& t : wide.in) ids_.push_back(t.id);
    for (const TensorRef& t : wide.out) ids_.push_back(t.id);
    inner_ = make(wide);
  }
  size_t scratch_bytes() const override {
    return DnnlKernel::scratch_bytes() + inner_->scratch_bytes();
  }
  std::string impl() const override {
    std::string inner = inner_->impl();
    return DnnlKernel::impl() + (inner.empty() ? "" : " + " + inner);
  }
  void run(const Run& r) override {
    for (size_t k : widen_) run_one(k, r);
    for (int id : ids_) ptrs_[id] = r.ptr[id];
    for (const auto& [id, at] : wide_) ptrs_[id] = r.scratch + at;
    // DnnlKernel's own scratch (temporaries, then the reorders' scratchpad) comes first.
    Run wide{ptrs_.data(), r.scratch + DnnlKernel::scratch_bytes(), r.stream, r.threads,
             r.collective};
    inner_->run(wide);
    for (size_t k : narrow_) run_one(k, r);
  }

 private:
  KernelPtr inner_;
  std::vector<size_t> widen_, narrow_;
  std::vector<std::pair<int, int64_t>> wide_;  // tensor id -> its float32 temporary
  std::vector<int> ids_;
  std::vector<char*> ptrs_;
};

}  // namespace

KernelPtr widened(const Node& n, Factory make) {
  if (has_low(n)) return std::make_unique<Widened>(n, make);
  return make(n);
}

KernelPtr native_or_widened(const Node& n, Factory make) {
  try {
    return make(n);
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented || !has_low(n)) throw;
    return std::make_unique<Widened>(n, make);
  }
}

}  // namespace planner
