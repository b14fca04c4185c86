// The dtypes a Cast converts between with a plain loop on either backend (comparisons' masks,
// integer ids, PyTorch's .to()): float32, int64, int32 and bool; with kStorage (the CPU's) the
// storage integers int16, int8 and uint8 and float64 too.
#pragma once
#include <cstdint>

#include "schedule.h"

namespace planner {

// Calls f(T{}) with T the C type of `dtype` and returns true, or returns false for a dtype
// that is not one of them.
template <bool kStorage = false, class F>
bool with_plain_dtype(int dtype, F&& f) {
  switch (dtype) {
    case F32: f(float{}); return true;
    case I64: f(int64_t{}); return true;
    case I32: f(int32_t{}); return true;
    case BOOL: f(bool{}); return true;
  }
  if constexpr (kStorage) {
    switch (dtype) {
      case I16: f(int16_t{}); return true;
      case I8: f(int8_t{}); return true;
      case U8: f(uint8_t{}); return true;
      case F64: f(double{}); return true;
    }
  }
  return false;
}

}  // namespace planner
