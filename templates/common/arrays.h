// Host arrays crossing the Python boundary, every backend alike (nanobind): dtype names,
// shape and dtype checks that name the tensor, copies in and out. A backend's bindings add
// what is its own (device arrays, streams).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernel_dtypes.h"  // dtype_name
#include "runtime.h"

namespace planner {

namespace nb = nanobind;

using Array = nb::ndarray<nb::ro, nb::device::cpu>;

inline nb::dlpack::dtype dl_dtype(int d) {
  switch (d) {
    case F32: return nb::dtype<float>();
    case F64: return nb::dtype<double>();
    case I64: return nb::dtype<int64_t>();
    case I32: return nb::dtype<int32_t>();
    case BOOL: return nb::dtype<bool>();
    case I16: return nb::dtype<int16_t>();
    case I8: return nb::dtype<int8_t>();
    case U8: return nb::dtype<uint8_t>();
    case F16: return nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case BF16: return nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
  throw std::runtime_error("unknown dtype");
}

template <class A>
inline std::string array_text(const A& a) {
  std::string s = "[";
  for (size_t k = 0; k < a.ndim(); ++k) s += (k ? ", " : "") + std::to_string(a.shape(k));
  return s + "]";
}

// Checks `a` (a host or device ndarray) against tensor `t`; returns true when it is
// C-contiguous (readable in place).
template <class A>
inline bool check(const TensorSpec& t, const A& a, const char* what) {
  Shape want(t.shape, t.shape + t.rank);
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
inline void copy_in(char* dst, const Array& a, int esize) {
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

// A numpy array of tensor `t` at host address `data`: a copy, or a view kept alive by `owner`.
// numpy takes no bfloat16 over DLPack: those bytes go out as uint16 and come back as a view
// of dtype ml_dtypes.bfloat16 (the same bits).
inline nb::object to_numpy(const TensorSpec& t, char* data, bool copy, nb::handle owner) {
  std::vector<size_t> shape(t.shape, t.shape + t.rank);
  nb::dlpack::dtype dt = t.dtype == BF16 ? nb::dtype<uint16_t>() : dl_dtype(t.dtype);
  nb::object out;
  if (!copy) {
    out = nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, dt).cast();
  } else {
    char* buf = new char[std::max<int64_t>(t.nbytes, 1)];
    std::memcpy(buf, data, t.nbytes);
    nb::capsule own(buf, [](void* p) noexcept { delete[] static_cast<char*>(p); });
    out = nb::ndarray<nb::numpy>(buf, shape.size(), shape.data(), own, nullptr, dt).cast();
  }
  if (t.dtype == BF16) out = out.attr("view")(nb::module_::import_("ml_dtypes").attr("bfloat16"));
  return out;
}

inline bool persistent(int role) { return role == PARAM || role == STATE || role == OPT_STATE; }

}  // namespace planner
