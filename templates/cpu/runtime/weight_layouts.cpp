#include "weight_layouts.h"

#include <cstring>
#include <string>

#include "executor_core.h"

namespace planner {

namespace {

using md = dnnl::memory::desc;

int64_t kept_elements(const TensorSpec& t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

// Row-major float32 bytes of `dims`.
md kept_plain_md(const dnnl::memory::dims& dims) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (int k = static_cast<int>(dims.size()) - 2; k >= 0; --k)
    strides[k] = strides[k + 1] * dims[k + 1];
  return md(dims, dnnl::memory::data_type::f32, strides);
}

// Every op's operands by tensor: (op, output?, position).
struct KeptTouch {
  int op;
  bool out;
  int pos;
};

bool kept_update_op(const OpSpec& op) {
  for (const char* name : {"SGD", "ApplyMomentum", "ApplyAdam"})
    if (std::strcmp(op.op, name) == 0) return true;
  return false;
}

bool kept_op_is(const OpSpec& op, const char* name) { return std::strcmp(op.op, name) == 0; }

// Not on the columns layouts, whose own kernels read and write plain weights (conv.cpp).
bool kept_on_onednn(const OpSpec& op) {
  Attrs a(op.attrs);
  if (!a.has("layout")) return true;
  const std::string l = a.s("layout");
  return l != "columns" && l != "image_columns";
}

bool kept_one_group(const OpSpec& op) {
  Attrs a(op.attrs);
  return !a.has("groups") || a.i("groups") == 1;
}

bool kept_same_shape(const TensorSpec& a, const TensorSpec& b) {
  if (a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

// What the family rules read of a schedule, built once.
struct KeptUses {
  const Schedule& s;
  std::vector<std::vector<KeptTouch>> touches;
  std::vector<std::vector<int>> aliases;  // per tensor: those sharing its bytes
  std::vector<char> returned;

  explicit KeptUses(const Schedule& sched)
      : s(sched), touches(sched.num_tensors), aliases(sched.num_tensors),
        returned(sched.num_tensors, 0) {
    std::vector<TensorRef> in, out;
    for (int k = 0; k < s.num_ops; ++k) {
      in.clear();  // op_tensors appends
      out.clear();
      op_tensors(s, s.ops[k], &in, &out);
      for (int i = 0; i < static_cast<int>(in.size()); ++i) touches[in[i].id].push_back({k, false, i});
      for (int i = 0; i < static_cast<int>(out.size()); ++i) touches[out[i].id].push_back({k, true, i});
    }
    for (int t = 0; t < s.num_tensors; ++t)
      if (s.tensors[t].alias_of >= 0) aliases[s.tensors[t].alias_of].push_back(t);
    for (int o = 0; o < s.num_outputs; ++o) returned[s.outputs[o]] = 1;
  }
  int arg(int k, bool out, int pos) const {
    const OpSpec& op = s.ops[k];
    return s.args[(out ? op.first_output : op.first_input) + pos];
  }
  // A float32 tensor of `like`'s shape, in the arena, not returned, plain.
  bool fits(int t, const TensorSpec& like) const {
    const TensorSpec& x = s.tensors[t];
    return x.dtype == F32 && x.store == ARENA && x.block == 0 && !returned[t] &&
           kept_same_shape(x, like);
  }
  // Tensor t's only touches are op k's at the operand (out, pos), and its only aliases are
  // op k's outputs over it (an update's), each touched by op k alone.
  bool only(int t, int k, bool out, int pos, std::vector<int>* members) const {
    for (const KeptTouch& u : touches[t])
      if (u.op != k || u.out != out || u.pos != pos) return false;
    for (int a : aliases[t]) {
      if (s.tensors[a].updates != t || returned[a]) return false;
      for (const KeptTouch& u : touches[a])
        if (u.op != k || !u.out) return false;
      members->push_back(a);
    }
    return true;
  }
};

}  // namespace

// The family of parameter p under the rules of the header comment, or none: its members, its
// persistent tensors, and (forward, filter gradient) ops to ask the layouts of.
struct KeptFound {
  std::vector<int> persistent, members;
  int forward = -1, filter_grad = -1;
};

static bool kept_update_family(const KeptUses& u, int p, int update, KeptFound* f);

static bool find_kept_family(const KeptUses& u, int p, KeptFound* f) {
  const Schedule& s = u.s;
  const TensorSpec& t = s.tensors[p];
  if (t.role != PARAM || t.updates >= 0 || t.alias_of >= 0 || t.rank != 4 ||
      !u.fits(p, t) || kept_elements(t) < 2)
    return false;
  int update = -1;
  for (const KeptTouch& r : u.touches[p]) {
    const OpSpec& op = s.ops[r.op];
    const bool conv = kept_op_is(op, "Conv2D") || kept_op_is(op, "Conv2DBackpropInput") ||
                      (kept_op_is(op, "ConvTranspose2D") && kept_one_group(op));
    if (!r.out && r.pos == 1 && conv && kept_on_onednn(op)) {
      if (kept_op_is(op, "Conv2D") && f->forward < 0) f->forward = r.op;
    } else if (!r.out && r.pos == 0 && kept_update_op(op) && update < 0) {
      update = r.op;
    } else {
      return false;
    }
  }
  if (f->forward < 0) return false;
  f->persistent = {p};
  f->members = {p};
  for (int a : u.aliases[p]) {
    if (update < 0 || s.tensors[a].updates != p || u.returned[a]) return false;
    for (const KeptTouch& r : u.touches[a])
      if (r.op != update || !r.out) return false;
    f->members.push_back(a);
  }
  if (update < 0) return true;  // read only: an inference plan's weights
  return kept_update_family(u, p, update, f);
}

// The rest of p's family, where op `update` updates it: its gradient, written by one
// Conv2DBackpropFilter on oneDNN's kernel, and its optimizer state, each read by the update
// alone, and the update's outputs over them.
static bool kept_update_family(const KeptUses& u, int p, int update, KeptFound* f) {
  const Schedule& s = u.s;
  const TensorSpec& t = s.tensors[p];
  const OpSpec& op = s.ops[update];
  const int g = u.arg(update, false, 1);
  const TensorSpec& gs = s.tensors[g];
  if (!u.fits(g, t) || gs.alias_of >= 0 || gs.updates >= 0 || !u.aliases[g].empty() ||
      gs.role == PARAM || gs.role == STATE || gs.role == OPT_STATE)
    return false;
  for (const KeptTouch& r : u.touches[g]) {
    if (r.op == update && !r.out && r.pos == 1) continue;
    const OpSpec& w = s.ops[r.op];
    if (!r.out || r.pos != 0 || !kept_op_is(w, "Conv2DBackpropFilter") || !kept_on_onednn(w) ||
        f->filter_grad >= 0)
      return false;
    f->filter_grad = r.op;
  }
  if (f->filter_grad < 0) return false;
  f->members.push_back(g);
  for (int i = 2; i < op.num_inputs; ++i) {
    const int x = u.arg(update, false, i);
    const TensorSpec& xs = s.tensors[x];
    if (kept_elements(xs) == 1) continue;  // lr, weight decay, the step count: scalars
    if (!u.fits(x, t) || xs.role != OPT_STATE || xs.updates >= 0 || xs.alias_of >= 0 ||
        !u.only(x, update, false, i, &f->members))
      return false;
    f->persistent.push_back(x);
    f->members.push_back(x);
  }
  // Every output of the update is the new value of a member (or a scalar).
  for (int i = 0; i < op.num_outputs; ++i) {
    const int y = u.arg(update, true, i);
    bool member = false;
    for (int m : f->members) member = member || m == y;
    if (!member && kept_elements(s.tensors[y]) > 1) return false;
  }
  return true;
}

WeightLayouts::WeightLayouts(
    const Schedule& s, bool keep, const dnnl::engine& engine,
    const std::function<std::optional<dnnl::memory::desc>(int)>& kernel_weights)
    : family_of_(s.num_tensors, -1), engine_(engine) {
  if (!keep) return;
  const KeptUses uses(s);
  for (int p = 0; p < s.num_tensors; ++p) {
    KeptFound f;
    if (!find_kept_family(uses, p, &f)) continue;
    std::optional<md> kept = kernel_weights(f.forward);
    if (!kept) continue;
    // The weights' plain bytes in the kernel's dims (a grouped convolution's 5-D view).
    const md plain = kept_plain_md(kept->get_dims());
    if (*kept == plain || kept->get_size() != plain.get_size()) continue;  // nothing / padding
    if (f.filter_grad >= 0 && !kernel_weights(f.filter_grad)) continue;
    Family fam{plain, *kept, f.persistent, f.members};
    for (int m : f.members) family_of_[m] = static_cast<int>(families_.size());
    families_.push_back(std::move(fam));
  }
}

const dnnl::memory::desc* WeightLayouts::kept(int id) const {
  const int f = id >= 0 && id < static_cast<int>(family_of_.size()) ? family_of_[id] : -1;
  return f < 0 ? nullptr : &families_[f].kept;
}

bool WeightLayouts::held(int id) const {
  const int f = id >= 0 && id < static_cast<int>(family_of_.size()) ? family_of_[id] : -1;
  return f >= 0 && families_[f].held;
}

void WeightLayouts::reorder(int id, const char* from, char* to, bool to_plain) const {
  const Family& f = families_.at(family_of_.at(id));
  const md& src = to_plain ? f.kept : f.plain;
  const md& dst = to_plain ? f.plain : f.kept;
  dnnl::memory a(src, engine_, const_cast<char*>(from)), b(dst, engine_, to);
  dnnl::stream stream(engine_);
  dnnl::reorder(a, b).execute(stream, a, b);
  stream.wait();
}

// Family f's persistent tensors reordered in place, to plain or back.
static void reorder_kept_in_place(const WeightLayouts& w, const std::vector<int>& ids,
                             char* const* ptr, size_t bytes, bool to_plain) {
  std::vector<char> copy(bytes);
  for (int id : ids) {
    std::memcpy(copy.data(), ptr[id], bytes);
    w.reorder(id, copy.data(), ptr[id], to_plain);
  }
}

void WeightLayouts::release(int id, char* const* ptr) {
  if (!held(id)) return;
  Family& f = families_[family_of_[id]];
  reorder_kept_in_place(*this, f.persistent, ptr, f.plain.get_size(), true);
  f.held = false;
}

void WeightLayouts::reorder_all(char* const* ptr, bool plain) {
  for (const Family& f : families_)
    if (f.held) reorder_kept_in_place(*this, f.persistent, ptr, f.plain.get_size(), plain);
}

int64_t WeightLayouts::held_bytes() const {
  int64_t total = 0;
  for (const Family& f : families_)
    if (f.held) total += static_cast<int64_t>(f.plain.get_size() * f.persistent.size());
  return total;
}

}  // namespace planner
