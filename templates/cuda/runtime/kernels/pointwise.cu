// Element-wise, broadcast, dropout and optimizer kernels: the TVM-generated kernels of
// generated/tvm_pointwise.cuh (python -m codegen.tvm_kernels; the formulas are the ops'
// `pointwise` in planner/ops), chosen at load by op, dtypes, form and rank, and launched on the
// op's stream with cudaLaunchKernel: threads per block = the plan's `block` attr (default 256,
// the nearest generated variant), blocks = ceil(n / block). Broadcasting inputs: the output's
// shape is collapsed (size-1 dims dropped, dims merged where every input is contiguous or
// broadcast across both) and each input passes its per-dim strides (0 where it broadcasts).
// The step of Dropout and Adam is read by the kernel from device memory (capturable in a CUDA
// graph); nothing here synchronizes or allocates while running.
//
// Mixed precision: Relu, ReluGrad, Add (so BiasAdd) and AddN also have bfloat16 and float16
// kernels (generated/tvm_pointwise_low.cuh), float32 arithmetic inside, each output rounded
// once; where no input broadcasts and the count is even, a step whose addresses are 4-byte
// aligned runs their paired form (nv_bfloat162 / half2 loads and stores).
//
// Not generated: BiasAdd (Add's kernel with the bias's strides), AddN over more than 4 inputs
// (chained over the output), Zeros (cudaMemsetAsync), PReluGrad's dslope (reduce.cu's sum of
// the per-element contributions, kept in scratch).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "../kernel.h"
#include "generated/tvm_pointwise_low.cuh"
#include "pointwise.h"
#include "random.h"  // rng_rank_seed: Dropout's stream of the rank

namespace planner {

namespace {

char code_of(int dtype) {
  switch (dtype) {
    case F32: return 'f';
    case F64: return 'd';
    case I64: return 'l';
    case I32: return 'i';
    case BOOL: return 'b';
    case BF16: return 'E';
    case F16: return 'e';
  }
  return '?';
}

// Every generated kernel: the float32 / integer ones, then the low float types'.
template <class F> void each_kernel(F f) {
  for (const TvmKernel& k : kTvmKernels) f(k);
  for (const TvmKernel& k : kTvmLowKernels) f(k);
}

bool aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// Does the entry's structural form ("approximate=tanh") match the node's attrs? An absent attr
// reads as its default, "none".
bool form_matches(const char* form, const Attrs& attrs) {
  for (const std::string& kv : split(form, ',')) {
    size_t eq = kv.find('=');
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if ((attrs.has(key) ? attrs.s(key) : std::string("none")) != value) return false;
  }
  return true;
}

}  // namespace

Geometry Geometry::flat(int64_t n) {
  Geometry g;
  g.n = n;
  return g;
}

Geometry Geometry::broadcast(const Shape& out, const std::vector<Shape>& ins) {
  Geometry g;
  g.n = numel(out);
  const size_t rank = out.size();
  // per input: padded strides, 0 where it broadcasts
  std::vector<Shape> strides;
  for (const Shape& s : ins) {
    if (s.size() > rank) throw std::runtime_error("an input has more dims than the output");
    Shape padded(rank - s.size(), 1);
    padded.insert(padded.end(), s.begin(), s.end());
    Shape st(rank, 0);
    int64_t m = 1;
    for (int k = static_cast<int>(rank) - 1; k >= 0; --k) {
      if (padded[k] != 1 && padded[k] != out[k])
        throw std::runtime_error("an input does not broadcast to the output");
      st[k] = padded[k] == 1 ? 0 : m;
      m *= padded[k];
    }
    strides.push_back(st);
  }
  // drop size-1 dims, then merge a dim into the next (inner) one where every input allows
  for (size_t k = 0; k < rank; ++k) {
    if (out[k] == 1) continue;
    bool merge = !g.dims.empty();
    for (size_t i = 0; merge && i < ins.size(); ++i) {
      const int64_t outer = g.strides[i].back(), inner = strides[i][k];
      merge = outer == inner * out[k];  // contiguous across both, or 0 and 0
    }
    if (merge) {
      g.dims.back() *= out[k];
      for (size_t i = 0; i < ins.size(); ++i) g.strides[i].back() = strides[i][k];
    } else {
      g.dims.push_back(out[k]);
      g.strides.resize(ins.size());
      for (size_t i = 0; i < ins.size(); ++i) g.strides[i].push_back(strides[i][k]);
    }
  }
  g.strides.resize(ins.size());
  if (g.dims.empty()) {  // one element (or none)
    g.dims.push_back(g.n);
    for (auto& st : g.strides) st.push_back(0);
    for (size_t i = 0; i < ins.size(); ++i) g.strides[i][0] = numel(ins[i]) > 1 ? 1 : 0;
  }
  return g;
}

// A folded activation (an Add's Relu, an AddN's ReluGrad: CPU steps' folds, planner/step/
// fold_sum_relu.py) is no part of a generated kernel's formula: refused, not run without it.
static void refuse_folded_activation(const Node& n, const char* op) {
  if (n.attrs.has("activation") && n.attrs.s("activation") != "none")
    throw std::runtime_error(std::string(op) + ": the CUDA runtime runs no folded activation "
                             "in a generated kernel (a CPU step's fold)");
}

GeneratedLaunch::GeneratedLaunch(const Node& n, const char* op, const std::vector<TensorRef>& in,
                                 const std::vector<TensorRef>& out, const Geometry& geometry,
                                 bool broadcast) {
  refuse_folded_activation(n, op);
  std::string sig;
  for (const TensorRef& t : in) sig += code_of(t.dtype);
  sig += '_';
  for (const TensorRef& t : out) sig += code_of(t.dtype);
  const bool low = sig.find_first_of("Ee") != std::string::npos;
  const int want_rank = broadcast ? static_cast<int>(geometry.dims.size()) : 0;
  const int want_block = block_threads(n);
  // the kernel of this op, dtypes and form with `vec` elements per thread, rank `want_rank`
  // (the smallest rank that covers it, for a broadcast), the block nearest the plan's
  auto find = [&](int vec, bool bcast, int rank) {
    const TvmKernel* best = nullptr;
    each_kernel([&](const TvmKernel& k) {
      if (std::strcmp(k.op, op) != 0 || sig != k.sig || k.vec != vec ||
          !form_matches(k.form, n.attrs))
        return;
      if (bcast ? k.rank < rank : k.rank != 0) return;
      if (!best || k.rank < best->rank ||
          (k.rank == best->rank &&
           std::abs(k.block - want_block) < std::abs(best->block - want_block)))
        best = &k;
    });
    return best;
  };
  const TvmKernel* best = find(1, broadcast, want_rank);
  if (!best)
    throw std::runtime_error(std::string(op) + ": no generated CUDA kernel for dtypes " + sig +
                             (broadcast ? " at rank " + std::to_string(want_rank) : ""));
  if (best->rank > 1 && geometry.n >= (int64_t{1} << 31))
    throw std::runtime_error(std::string(op) + ": a broadcast of 2^31 elements or more");
  one_ = bind(n, op, *best, in, out, geometry, geometry.n);
  // Pairs: low types, an even count, every input read at the output's own index.
  bool contiguous = !broadcast;
  if (broadcast && geometry.dims.size() == 1) {
    contiguous = true;
    for (const Shape& st : geometry.strides) contiguous &= st.size() == 1 && st[0] == 1;
  }
  if (low && contiguous && geometry.n > 0 && geometry.n % 2 == 0) {
    if (const TvmKernel* two = find(2, false, 0))
      two_ = bind(n, op, *two, in, out, Geometry::flat(geometry.n), geometry.n / 2);
  }
}

GeneratedLaunch::Bound GeneratedLaunch::bind(const Node& n, const char* op, const TvmKernel& k,
                                             const std::vector<TensorRef>& in,
                                             const std::vector<TensorRef>& out,
                                             const Geometry& geometry, int64_t threads) {
  Bound b;
  b.fn = k.fn;
  b.block = k.block;
  b.threads = threads;
  const int rank = k.rank;
  // the geometry padded with leading dims of 1 to the kernel's rank
  Shape dims = geometry.dims;
  std::vector<Shape> strides = geometry.strides;
  if (rank > 0) {
    while (static_cast<int>(dims.size()) < rank) {
      dims.insert(dims.begin(), 1);
      for (auto& st : strides) st.insert(st.begin(), 0);
    }
  }
  const std::vector<std::string> params = split(k.params, '|');
  const std::vector<std::string> extents = split(k.extents, '|');
  const std::vector<std::string> args = split(k.args, ',');
  b.slots.resize(args.size());
  for (size_t a = 0; a < args.size(); ++a) {
    const std::string name = args[a].substr(0, args[a].find(':'));
    const char type = args[a].back();
    Slot& s = b.slots[a];
    auto set_int = [&](int64_t v) {
      if (type == 'i') s.i = static_cast<int32_t>(v);
      else s.l = v;
    };
    if (type == 'p') {
      const bool is_in = name.compare(0, 2, "in") == 0;
      const size_t j = std::stoul(name.substr(is_in ? 2 : 3));
      b.pointers.push_back({a, is_in ? in.at(j).id : out.at(j).id});
    } else if (name == "n") {
      set_int(threads);
    } else if (name[0] == 'd') {
      set_int(dims.at(std::stoul(name.substr(1))));
    } else if (name[0] == 's') {
      const size_t us = name.find('_');
      set_int(strides.at(std::stoul(name.substr(1, us - 1))).at(std::stoul(name.substr(us + 1))));
    } else if (name[0] == 'e') {
      const std::vector<std::string> e = split(extents.at(std::stoul(name.substr(1))), ' ');
      const Shape& shape = in.at(0).shape;
      s.l = shape.at(shape.size() + std::stol(e[1]));
    } else if (name[0] == 'p') {
      const std::vector<std::string> p = split(params.at(std::stoul(name.substr(1))), ' ');
      const std::string& key = p[0];
      if (type == 'u') {
        s.u = n.attrs.has(key) ? n.attrs.u(key) : std::strtoull(p[2].c_str(), nullptr, 10);
        if (key == "seed") b.seed_slot = a, b.seed = s.u;
      } else {
        const double v = n.attrs.has(key) ? n.attrs.f(key) : std::strtod(p[2].c_str(), nullptr);
        if (type == 'f') s.f = static_cast<float>(v);
        else s.d = v;
      }
    } else {
      throw std::runtime_error(std::string(op) + ": generated kernel argument " + name);
    }
  }
  return b;
}

void GeneratedLaunch::launch(Bound& b, const Run& r) {
  for (const auto& [slot, id] : b.pointers) b.slots[slot].p = id < 0 ? r.scratch : r.ptr[id];
  if (b.seed_slot != static_cast<size_t>(-1))
    b.slots[b.seed_slot].u =
        rng_rank_seed(b.seed, r.collective ? static_cast<uint64_t>(r.collective->rank) : 0);
  b.argv.clear();
  for (Slot& s : b.slots) b.argv.push_back(&s);
  const int64_t blocks = (b.threads + b.block - 1) / b.block;
  PLANNER_CUDA(cudaLaunchKernel(b.fn, dim3(static_cast<unsigned>(blocks)), dim3(b.block),
                                b.argv.data(), 0, r.stream));
}

void GeneratedLaunch::run(const Run& r) {
  if (one_.threads == 0) return;
  if (two_.fn) {
    bool ok = true;
    for (const auto& [slot, id] : two_.pointers)
      ok &= aligned4(id < 0 ? r.scratch : r.ptr[id]);
    if (ok) return launch(two_, r);
  }
  launch(one_, r);
}

namespace {

// One generated kernel over the op's own inputs and outputs.
class Pointwise : public Kernel {
 public:
  Pointwise(const Node& n, const char* op, bool broadcast)
      : launch_(n, op, n.in, n.out,
                broadcast ? Geometry::broadcast(n.out[0].shape, shapes(n.in))
                          : Geometry::flat(n.out[0].size()),
                broadcast) {}
  void run(const Run& r) override { launch_.run(r); }
  static std::vector<Shape> shapes(const std::vector<TensorRef>& ts) {
    std::vector<Shape> out;
    for (const TensorRef& t : ts) out.push_back(t.shape);
    return out;
  }

 private:
  GeneratedLaunch launch_;
};

template <const char* Op> KernelPtr flat(const Node& n) {
  return std::make_unique<Pointwise>(n, Op, false);
}
template <const char* Op> KernelPtr broadcast(const Node& n) {
  return std::make_unique<Pointwise>(n, Op, true);
}

// y = x + b along `axis`: Add's kernel, b seen as [1, .., C, .., 1].
KernelPtr bias_add(const Node& n) {
  const Shape& x = n.in[0].shape;
  const int axis = norm_axis(n.attrs.i("axis"), x.size());
  Shape b(x.size(), 1);
  b[axis] = x[axis];
  class BiasAdd : public Kernel {
   public:
    BiasAdd(const Node& n, const Shape& b)
        : launch_(n, "Add", n.in, n.out, Geometry::broadcast(n.out[0].shape, {n.in[0].shape, b}),
                  true) {}
    void run(const Run& r) override { launch_.run(r); }

   private:
    GeneratedLaunch launch_;
  };
  return std::make_unique<BiasAdd>(n, b);
}

// AddN: up to 4 inputs in one kernel, then y = y + the next up to 3 (inputs in order, as the
// reference sums them). One input: a copy.
class AddN : public Kernel {
 public:
  explicit AddN(const Node& n) {
    refuse_folded_activation(n, "AddN");
    const TensorRef& y = n.out[0];
    if (n.in.size() == 1) {
      copy_ = std::make_unique<Copy>(n.in[0].id, y.id, y.size() * dtype_bytes(y.dtype));
      return;
    }
    const Geometry g = Geometry::flat(y.size());
    size_t k = std::min<size_t>(4, n.in.size());
    parts_.emplace_back(n, "AddN", std::vector<TensorRef>(n.in.begin(), n.in.begin() + k),
                        n.out, g, false);
    while (k < n.in.size()) {
      const size_t take = std::min<size_t>(3, n.in.size() - k);
      std::vector<TensorRef> ins{y};
      ins.insert(ins.end(), n.in.begin() + k, n.in.begin() + k + take);
      parts_.emplace_back(n, "AddN", ins, n.out, g, false);
      k += take;
    }
  }
  void run(const Run& r) override {
    if (copy_) return copy_->run(r);
    for (GeneratedLaunch& p : parts_) p.run(r);
  }

 private:
  std::unique_ptr<Copy> copy_;
  std::vector<GeneratedLaunch> parts_;
};

KernelPtr add_n(const Node& n) { return std::make_unique<AddN>(n); }

class Zeros : public Kernel {
 public:
  explicit Zeros(const Node& n) : y_(n.out[0].id), bytes_(n.out[0].size() * dtype_bytes(n.out[0].dtype)) {}
  void run(const Run& r) override {
    if (bytes_ > 0) PLANNER_CUDA(cudaMemsetAsync(r.ptr[y_], 0, bytes_, r.stream));
  }

 private:
  int y_;
  int64_t bytes_;
};

KernelPtr zeros(const Node& n) { return std::make_unique<Zeros>(n); }

// PReluGrad [dy, x, slope] -> [dx, dslope]: the generated kernel writes dx and each element's
// contribution dy * x (where x < 0) into scratch, which SumTo (reduce.cu) takes down to slope's
// shape.
class PReluGrad : public Kernel {
 public:
  explicit PReluGrad(const Node& n)
      : bytes_(sizeof(float) * n.in[1].size()), ds_(n.out[1].id),
        launch_(n, "PReluGrad", n.in, {n.out[0], TensorRef{-1, n.in[1].shape, F32}},
                Geometry::broadcast(n.out[0].shape, Pointwise::shapes(n.in)), true),
        sum_(n.in[1].shape, n.in[2].shape, 1.0, block_threads(n)) {}
  size_t scratch_bytes() const override { return bytes_; }
  void run(const Run& r) override {
    launch_.run(r);
    sum_.run(reinterpret_cast<const float*>(r.scratch), r.at<float>(ds_), r.stream);
  }

 private:
  size_t bytes_;
  int ds_;
  GeneratedLaunch launch_;
  SumTo sum_;
};

KernelPtr prelu_grad(const Node& n) { return std::make_unique<PReluGrad>(n); }

#define PLANNER_OP(name) constexpr char k##name[] = #name;
PLANNER_OP(Abs) PLANNER_OP(Exp) PLANNER_OP(Log) PLANNER_OP(Sqrt) PLANNER_OP(Sign)
PLANNER_OP(Softplus) PLANNER_OP(Elu) PLANNER_OP(EluGrad) PLANNER_OP(Selu) PLANNER_OP(SeluGrad)
PLANNER_OP(Clip) PLANNER_OP(ClipGrad) PLANNER_OP(Erf) PLANNER_OP(Gelu) PLANNER_OP(GeluGrad)
PLANNER_OP(Relu) PLANNER_OP(ReluGrad) PLANNER_OP(LeakyRelu) PLANNER_OP(LeakyReluGrad)
PLANNER_OP(Tanh) PLANNER_OP(TanhGrad) PLANNER_OP(Sigmoid) PLANNER_OP(SigmoidGrad) PLANNER_OP(Neg)
PLANNER_OP(Scale) PLANNER_OP(Add) PLANNER_OP(Sub) PLANNER_OP(Mul) PLANNER_OP(Div) PLANNER_OP(Pow)
PLANNER_OP(Max) PLANNER_OP(Min) PLANNER_OP(MaxGrad) PLANNER_OP(MinGrad) PLANNER_OP(Where)
PLANNER_OP(PRelu) PLANNER_OP(Dropout) PLANNER_OP(DropoutGrad) PLANNER_OP(SGD)
PLANNER_OP(ApplyMomentum) PLANNER_OP(ApplyAdam) PLANNER_OP(Increment) PLANNER_OP(Fill)
PLANNER_OP(CausalMask)
#undef PLANNER_OP

}  // namespace

PLANNER_REGISTER_KERNELS(pointwise) {
  r["Abs"] = flat<kAbs>;
  r["Exp"] = flat<kExp>;
  r["Log"] = flat<kLog>;
  r["Sqrt"] = flat<kSqrt>;
  r["Sign"] = flat<kSign>;
  r["Softplus"] = flat<kSoftplus>;
  r["Elu"] = flat<kElu>;
  r["EluGrad"] = flat<kEluGrad>;
  r["Selu"] = flat<kSelu>;
  r["SeluGrad"] = flat<kSeluGrad>;
  r["Clip"] = flat<kClip>;
  r["ClipGrad"] = flat<kClipGrad>;
  r["Erf"] = flat<kErf>;
  r["Gelu"] = flat<kGelu>;
  r["GeluGrad"] = flat<kGeluGrad>;
  r["Relu"] = flat<kRelu>;
  r["ReluGrad"] = flat<kReluGrad>;
  r["LeakyRelu"] = flat<kLeakyRelu>;
  r["LeakyReluGrad"] = flat<kLeakyReluGrad>;
  r["Tanh"] = flat<kTanh>;
  r["TanhGrad"] = flat<kTanhGrad>;
  r["Sigmoid"] = flat<kSigmoid>;
  r["SigmoidGrad"] = flat<kSigmoidGrad>;
  r["Neg"] = flat<kNeg>;
  r["Scale"] = flat<kScale>;
  r["Add"] = broadcast<kAdd>;
  r["Sub"] = broadcast<kSub>;
  r["Mul"] = broadcast<kMul>;
  r["Div"] = broadcast<kDiv>;
  r["Pow"] = broadcast<kPow>;
  r["Max"] = broadcast<kMax>;
  r["Min"] = broadcast<kMin>;
  r["MaxGrad"] = broadcast<kMaxGrad>;
  r["MinGrad"] = broadcast<kMinGrad>;
  r["Where"] = broadcast<kWhere>;
  r["PRelu"] = broadcast<kPRelu>;
  r["PReluGrad"] = prelu_grad;
  r["BiasAdd"] = bias_add;
  r["AddN"] = add_n;
  r["Dropout"] = flat<kDropout>;
  r["DropoutGrad"] = flat<kDropoutGrad>;
  r["SGD"] = flat<kSGD>;
  r["ApplyMomentum"] = flat<kApplyMomentum>;
  r["ApplyAdam"] = flat<kApplyAdam>;
  r["Increment"] = flat<kIncrement>;
  r["Fill"] = flat<kFill>;
  r["Zeros"] = zeros;
  r["CausalMask"] = flat<kCausalMask>;
}

}  // namespace planner
