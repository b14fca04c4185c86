// Whether a grid-stride loop may count in 32-bit signed integers (cheaper division in the
// kernels that turn a flat index into coordinates). Plain C++: tested without a GPU.
#pragma once
#include <cstdint>

namespace planner {

// A grid-stride loop over n elements launched as blocks x threads: its index runs past n by
// up to one grid's threads before the loop ends, and must not wrap on the way. (n < 2^31
// alone lets it wrap for n from about 2^31 - 2^28, where 2^20 blocks of 256 threads stride.)
inline bool index32(int64_t n, int64_t blocks, int64_t threads) {
  return n >= 0 && blocks >= 0 && threads >= 0 && n + blocks * threads <= INT32_MAX;
}

}  // namespace planner
