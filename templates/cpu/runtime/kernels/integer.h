// The CPU runtime's integer kernels (kernels/integer.cpp), which the float kernels of the same
// ops hand integer nodes to: element-wise arithmetic with PyTorch's integer semantics, the
// reductions and the running sum. Integers wrap as two's complement, as PyTorch's CPU kernels
// do (computed in the unsigned type, so no overflow is undefined here); a zero divisor is
// refused at run time, where PyTorch raises ZeroDivisionError.
#pragma once
#include "../kernel.h"

namespace planner {

// The integer types of the integer kernels: int64, int32 and the storage types int16, int8 and
// uint8.
inline bool is_integer(int dtype) {
  return dtype == I64 || dtype == I32 || dtype == I16 || dtype == I8 || dtype == U8;
}

enum class IntOp {
  Add, Sub, Mul, Max, Min, And, Or, Xor, ShiftLeft, ShiftRight, DivFloor, DivTrunc, Remainder,
  Neg, Abs, Not,  // one operand
  Sum, Prod, ReduceMax, ReduceMin,  // over the node's axes
};

KernelPtr int_elementwise(const Node& n, IntOp op);
KernelPtr int_reduction(const Node& n, IntOp op);
// CumSum (exclusive, reverse) of an integer x.
KernelPtr int_running_sum(const Node& n);

}  // namespace planner
