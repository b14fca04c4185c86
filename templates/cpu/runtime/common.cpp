// Shared pieces of the runtime: attribute parsing, shapes, oneDNN descriptors, DnnlKernel.
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

#include "dnnl_kernel.h"

namespace planner {

int64_t numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<int64_t>());
}

int dtype_bytes(int dtype) {
  switch (dtype) {
    case F32: case I32: return 4;
    case F64: case I64: return 8;
    case F16: return 2;
    case BOOL: return 1;
  }
  throw std::runtime_error("unknown dtype code " + std::to_string(dtype));
}

std::string shape_text(const Shape& s) {
  std::ostringstream o;
  o << "[";
  for (size_t k = 0; k < s.size(); ++k) o << (k ? ", " : "") << s[k];
  o << "]";
  return o.str();
}

// ---- Attrs ----------------------------------------------------------------------------------

Attrs::Attrs(const char* text) {
  std::string all(text ? text : "");
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find(';', pos);
    if (end == std::string::npos) end = all.size();
    std::string item = all.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos) throw std::runtime_error("malformed attribute '" + item + "'");
    values_[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
}

const std::string& Attrs::raw(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw std::runtime_error("missing attribute '" + key + "'");
  return it->second;
}

int64_t Attrs::i(const std::string& key) const {
  const std::string& v = raw(key);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) throw std::runtime_error("attribute '" + key + "' is not an int: " + v);
  return x;
}

uint64_t Attrs::u(const std::string& key) const {
  const std::string& v = raw(key);
  char* end = nullptr;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end) throw std::runtime_error("attribute '" + key + "' is not a uint: " + v);
  return x;
}

double Attrs::f(const std::string& key) const {
  const std::string& v = raw(key);
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) throw std::runtime_error("attribute '" + key + "' is not a float: " + v);
  return x;
}

std::string Attrs::s(const std::string& key) const { return raw(key); }

std::vector<int64_t> Attrs::ints(const std::string& key) const {
  const std::string& v = raw(key);
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < v.size()) {
    size_t end = v.find(',', pos);
    if (end == std::string::npos) end = v.size();
    std::string item = v.substr(pos, end - pos);
    char* stop = nullptr;
    out.push_back(std::strtoll(item.c_str(), &stop, 10));
    if (item.empty() || *stop)
      throw std::runtime_error("attribute '" + key + "' is not a list of ints: " + v);
    pos = end + 1;
  }
  return out;
}

// ---- oneDNN helpers -------------------------------------------------------------------------

memory::data_type dnnl_type(int dtype) {
  switch (dtype) {
    case F32: return dt::f32;
    case F16: return dt::f16;
    case I32: return dt::s32;
  }
  throw std::runtime_error("oneDNN kernels take float32 tensors, got dtype code " +
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
