// The dtypes a kernel takes, declared where it registers (common/registry.h):
//
//   r["ReduceSum"] = {reduce_sum, "float32|int64|int32"};
//
// The text lists the node's admitted dtype sets, '|' between sets, ',' within one: a node runs
// when the set of its tensors' dtypes (bfloat16 and float16 counted as float32: mixed
// precision's own rule, codegen.backends.MIXED_OPS) is one of them; "*" admits any. codegen
// reads the same text (codegen/backends.py), so the plan-time check and the executor's load
// admit the same nodes; a kernel registered without one takes float32 tensors, with int64
// indices (require_f32), which codegen assumes and the kernel itself checks.
#pragma once
#include <set>
#include <stdexcept>
#include <string>

#include "schedule.h"

namespace planner {

inline const char* dtype_name(int d) {
  switch (d) {
    case F32: return "float32";
    case F64: return "float64";
    case F16: return "float16";
    case BF16: return "bfloat16";
    case I64: return "int64";
    case I32: return "int32";
    case BOOL: return "bool";
    case I16: return "int16";
    case I8: return "int8";
    case U8: return "uint8";
  }
  return "?";
}

// The node's dtype set as the declarations spell it: names in the order of the DType codes,
// ',' between them.
template <class N>
std::string dtype_set_text(const N& n) {
  std::set<int> codes;
  for (const auto* side : {&n.in, &n.out})
    for (const auto& t : *side) codes.insert(t.dtype == BF16 || t.dtype == F16 ? F32 : t.dtype);
  std::set<std::string> names;
  for (int c : codes) names.insert(dtype_name(c));
  std::string text;
  for (const std::string& s : names) text += (text.empty() ? "" : ",") + s;
  return text;
}

// Whether `declared` admits the node; each of its sets compared as a sorted set of names.
inline bool dtype_set_admitted(const char* declared, const std::string& have) {
  std::string all(declared);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find('|', start);
    if (end == std::string::npos) end = all.size();
    std::string one = all.substr(start, end - start);
    if (one == "*") return true;
    std::set<std::string> names;
    size_t s = 0;
    while (s <= one.size()) {
      size_t e = one.find(',', s);
      if (e == std::string::npos) e = one.size();
      names.insert(one.substr(s, e - s));
      s = e + 1;
    }
    std::string sorted;
    for (const std::string& x : names) sorted += (sorted.empty() ? "" : ",") + x;
    if (sorted == have) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace planner
