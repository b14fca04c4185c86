"""The tf32 policy's numbers shared by the tests without a GPU (tests/codegen/test_tf32_plan.py:
numpy's emulation of TF32) and on one (tests/cuda/test_cuda_tf32.py): the error bound of a TF32
GEMM, the threshold that tells TF32 from float32, the GEMM's shape, and the tf32 flag of a
rendered schedule.

The bound. TF32 keeps 10 of float32's 23 significand bits. A library that rounds its operands
to TF32 errs by at most u = 2^-11 of each; tensor cores fed raw float32 ignore the 13 low bits,
a truncation of at most 2u = 2^-10. Take the latter for both operands: a product of rounded
operands is off by at most (1 + 2^-10)^2 - 1 <= 2^-9 + 2^-20 of |a||b|. The K products are
summed in float32 (tensor cores accumulate in float32; allow each add 2^-23, a truncating
adder's error, not 2^-24), so each element y = sum_k a_k b_k is held to

    |got - exact| <= (2^-9 + 2^-20 + K 2^-23) * sum_k |a_k| |b_k|.

The threshold. An M x K x NN = 64 x 128 x 96 GEMM under CUBLAS_COMPUTE_32F_FAST_TF32 runs on
TF32 tensor cores, and its errors then sit near 2^-11 / sqrt(K) of sum|a||b| (about 4e-5 here;
the rounding errors of the K products have random signs), against float32's near
2^-24 / sqrt(K) (5e-9): the largest ratio is above 2^-18 with tf32 and below it without.
"""

from __future__ import annotations

import re

TF32_PRODUCT = 2.0 ** -9 + 2.0 ** -20   # two operands truncated to TF32, per |a||b|
ADD = 2.0 ** -23                         # one float32 add of the accumulation
RAN_TF32 = 2.0 ** -18                    # the GEMM's largest error ratio: TF32 above, float32 below
M, K, NN = 64, 128, 96                   # the GEMM's (rows, contraction, columns)


def schedule_tf32(files: dict[str, str]) -> int:
    """The tf32 field of the rendered Schedule (the one before the schedule variants)."""
    return int(re.search(r"kSchedule = \{.*,\s*(\d),\s*\d+, kVariantNames", files["schedule.cpp"],
                         re.S).group(1))
