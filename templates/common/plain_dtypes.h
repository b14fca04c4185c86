// The dtypes a Cast converts between with a plain loop on either backend (comparisons' masks,
// integer ids, PyTorch's .to()): float32, int64, int32 and bool.
#pragma once
#include <cstdint>

#include "schedule.h"

namespace planner {

// Calls f(T{}) with T the C type of `dtype` and returns true, or returns false for a dtype
// that is not one of them.
template <class F>
bool with_plain_dtype(int dtype, F&& f) {
  switch (dtype) {
    case F32: f(float{}); return true;
    case I64: f(int64_t{}); return true;
    case I32: f(int32_t{}); return true;
    case BOOL: f(bool{}); return true;
  }
  return false;
}

}  // namespace planner
