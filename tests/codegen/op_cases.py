"""The op-kernel cases: per op, input shapes and kinds and attrs (CASES), each case clean and
with each float input poisoned with NaN, +inf and -inf (VARIANTS), run as the nodes of one
inference graph on a backend's executor (run_variants) and checked against the op's reference
(check_variant). tests/codegen/test_op_kernels.py runs them on the CPU executor,
tests/cuda/test_cuda_kernels.py on the CUDA one."""

from __future__ import annotations

import numpy as np

from planner.graph import GraphBuilder, check_graph
from planner.ops import get_op
from tests.codegen.helpers import build_module
from tests.codegen.integer_cases import INTEGER_CASES
from tests.codegen.integer_cases import derive as derive_integer_inputs
from tests.codegen.pointwise_cases import derive as derive_table_inputs
from tests.codegen.pointwise_cases import table_cases

# Input kinds: N normal, P positive (variances, counts), U in (0, 1), ("ids", bound), B bool.
N, P, U, B = "normal", "positive", "unit", "bool"
W = "wide"  # uniform in (-12, 12): Gelu's tails, where 1 + erf(x / sqrt 2) underflows
S, G = "sym", "gt1"  # uniform in (-0.9, 0.9) (asin, atanh) and in (1.1, 3) (acosh)


def ids(bound):
    return ("ids", bound)


def const(value):
    """A float32 input of one value: the loss-scaling state and flags, which only their own
    kernels write (a scale, an integral clean-step count, an inf/NaN flag of 0 or 1)."""
    return ("const", value)


X4 = (2, 3, 4, 5)
POOL = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
CONV = {"strides": [2, 1], "pads": [1, 0, 1, 1], "groups": 1}
LN = {"axis": -1, "epsilon": 1e-5}

# op -> list of (input (shape, kind) pairs, attrs)
CASES: dict[str, list[tuple]] = {
    "Abs": [([((3, 8), N)], {})],
    "Exp": [([((3, 8), N)], {})],
    "Log": [([((3, 8), N)], {})],      # negative inputs: NaN in both
    "Sqrt": [([((3, 8), N)], {})],
    "Sign": [([((3, 8), N)], {})],
    "Softplus": [([((3, 8), N)], {})],
    "Elu": [([((3, 8), N)], {"alpha": 0.7})],
    "EluGrad": [([((3, 8), N), ((3, 8), N)], {"alpha": 0.7})],
    "Selu": [([((3, 8), N)], {})],
    "SeluGrad": [([((3, 8), N), ((3, 8), N)], {})],
    "Clip": [([((3, 8), N)], {"min": -0.5, "max": 0.6}), ([((3, 8), N)], {"max": 0.1})],
    "ClipGrad": [([((3, 8), N), ((3, 8), N)], {"min": -0.5, "max": 0.6}),
                 ([((3, 8), N), ((3, 8), N)], {"min": 0.0})],
    "Erf": [([((3, 8), N)], {})],
    # (3, 8): one vector and a ragged end; (9, 113) over (-12, 12): the tails (test_gelu_bound).
    # Not the tanh form's gradient there: its slope is below 3e-17 for x < -7, where an
    # infinite dy gives inf or NaN by whether a kernel's sigmoid saturates where the reference's
    # float64 tanh does (the CPU kernel's does; the generated CUDA kernel's at 2u < -88).
    "Gelu": [([((3, 8), N)], {}), ([((3, 8), N)], {"approximate": "tanh"}),
             ([((9, 113), W)], {}), ([((9, 113), W)], {"approximate": "tanh"})],
    "GeluGrad": [([((3, 8), N), ((3, 8), N)], {}),
                 ([((3, 8), N), ((3, 8), N)], {"approximate": "tanh"}),
                 ([((9, 113), N), ((9, 113), W)], {}),
                 ([((9, 113), N), ((9, 113), N)], {"approximate": "tanh"})],
    "Relu": [([((3, 8), N)], {})],
    "ReluGrad": [([((3, 8), N), ((3, 8), N)], {})],
    "LeakyRelu": [([((3, 8), N)], {"alpha": 0.2})],
    "LeakyReluGrad": [([((3, 8), N), ((3, 8), N)], {"alpha": 0.2})],
    "Tanh": [([((3, 8), N)], {})],
    "TanhGrad": [([((3, 8), N), ((3, 8), N)], {})],
    "Sigmoid": [([((3, 8), N)], {})],
    "SigmoidGrad": [([((3, 8), N), ((3, 8), N)], {})],
    "Neg": [([((3, 8), N)], {})],
    "Scale": [([((3, 8), N)], {"factor": -1.5})],
    # float32 -> float32 (a copy), int64 and bool -> float32 here; the low types in
    # tests/codegen/mixed_cases.py
    "Cast": [([((3, 8), N)], {"to": "float32"}),
             # PyTorch's promotion of an int or bool tensor meeting a float one
             ([((3, 8), ids(1 << 40))], {"to": "float32"}), ([((2, 5), B)], {"to": "float32"}),
             # torch's .to() between float32, int64, int32 and bool (float truncates)
             ([((3, 8), N)], {"to": "int64"}), ([((3, 8), N)], {"to": "int32"}),
             ([((3, 8), N)], {"to": "bool"}), ([((3, 8), ids(3))], {"to": "bool"}),
             ([((3, 8), ids(1 << 40))], {"to": "int32"}), ([((2, 5), B)], {"to": "int64"}),
             ([((3, 8), ("ids32", 7))], {"to": "float32"}),
             ([((3, 8), ("ids32", 7))], {"to": "int64"})],
    "Softmax": [([((3, 8), N)], {}), ([((2, 5, 3), N)], {"axis": 1})],
    "SoftmaxGrad": [([((3, 8), N), ((3, 8), U)], {})],
    # (2, 2, 5, 4): more keys than queries (row 4 reads all 4); (3, 8): no mask
    "ScaledSoftmax": [([((2, 2, 5, 4), N)], {"scale": 0.35, "causal": True}),
                      ([((3, 8), N)], {"scale": -2.0})],
    "ScaledSoftmaxGrad": [([((2, 5, 4), N), ((2, 5, 4), U)], {"scale": 0.35, "causal": True}),
                          ([((3, 8), N), ((3, 8), U)], {"scale": 1.5})],
    "LogSoftmax": [([((3, 8), N)], {}), ([((2, 5, 3), N)], {"axis": 1})],
    "Add": [([((3, 8), N), ((8,), N)], {}), ([((3, 1), N), ((3, 8), N)], {}),
            # a residual sum's folded Relu (planner/step/fold_sum_relu.py; CPU only)
            ([((5, 131), N), ((5, 131), N)], {"activation": "relu"}),
            # an attention mask over the query axis (oneDNN's reference loop: the CPU's rows),
            # at a size that splits the rows across a team; both operands broadcast
            ([((8, 4, 33, 64), N), ((8, 4, 1, 64), N)], {}),
            ([((3, 1, 5), N), ((1, 4, 1), N)], {})],
    "Sub": [([((3, 8), N), ((3, 1), N)], {}),
            ([((2, 1, 5), N), ((2, 4, 5), N)], {}), ([((2, 3, 4, 5), N), ((3, 1, 5), N)], {})],
    # (a per-sample factor, constant over each sample's trailing axes: the run loop)
    "Mul": [([((2, 3, 8), N), ((3, 1), N)], {}), ([((4, 2, 3, 5), N), ((4, 1, 1, 1), N)], {}),
            ([((4, 1, 1), N), ((4, 3, 5), N)], {})],
    "Div": [([((3, 8), N), ((3, 8), N)], {}), ([((4, 6, 5), N), ((4, 6, 1), P)], {}),
            ([((2, 3, 4, 5), N), ((1, 3, 1, 5), P)], {})],
    "AddN": [([((3, 8), N), ((3, 8), N), ((3, 8), N)], {}),
             ([((5, 131), N), ((5, 131), N)], {}),
             ([((2, 9), N)] * 4, {}), ([((2, 9), N)] * 5, {}),  # 4 in the loop, 5 oneDNN's
             # a folded ReluGrad, the Relu's output r last (CPU only): one term, four in the
             # vector loops, six through the running sum
             ([((5, 131), N)] * 2, {"activation": "relu"}),
             ([((2, 9), N)] * 5, {"activation": "relu"}),
             ([((2, 9), N)] * 7, {"activation": "relu"})],
    "BiasAdd": [([(X4, N), ((3,), N)], {})],
    # channels last: (75, 131) rows over blocks of 32 rows and strips of 128 columns, ragged
    "BiasAddGrad": [([(X4, N)], {}), ([((2, 3, 8), N)], {"axis": -1}),
                    ([((3, 25, 131), N)], {"axis": -1})],
    "Pow": [([((3, 8), P), ((8,), N)], {}), ([((3, 8), N), ((1,), N)], {})],
    # [dy, a, b, y]: a > 0 (the log of the base), b broadcast
    "PowGradA": [([((3, 8), N), ((3, 8), P), ((8,), N), ((3, 8), P)], {})],
    "PowGradB": [([((3, 8), N), ((3, 8), P), ((8,), N), ((3, 8), P)], {})],
    "Max": [([((3, 8), N), ((3, 1), N)], {})],
    "Min": [([((3, 8), N), ((8,), N)], {})],
    "MaxGrad": [([((3, 8), N), ((3, 8), N), ((3, 1), N)], {})],
    "MinGrad": [([((3, 8), N), ((8,), N), ((3, 8), N)], {})],
    "Where": [([((3, 8), B), ((3, 8), N), ((8,), N)], {}),
              ([((3, 1), ids(2)), ((3, 8), N), ((3, 8), N)], {}),
              ([((8,), N), ((3, 8), N), ((1,), N)], {})],
    "PRelu": [([(X4, N), ((3, 1, 1), N)], {})],
    "PReluGrad": [([(X4, N), (X4, N), ((3, 1, 1), N)], {})],
    "Pad": [([((3, 4), N)], {"pads": [1, 0, 2, 3], "value": 0.5}),
            ([((3, 4), N)], {"pads": [2, 1, 1, 3], "mode": "reflect"}),
            ([((2, 3, 4), N)], {"pads": [0, 1, 2, 1, 0, 3], "mode": "edge"})],
    "PadGrad": [([((6, 7), N)], {"pads": [1, 0, 2, 3], "input_shape": [3, 4]}),
                ([((6, 8), N)], {"pads": [2, 1, 1, 3], "mode": "reflect",
                                 "input_shape": [3, 4]}),
                ([((3, 7), N)], {"pads": [0, 2, 0, 1], "mode": "edge", "input_shape": [3, 4]})],
    "LayerNorm": [([((2, 3, 8), N), ((8,), N), ((8,), N)], LN),
                  ([((2, 3, 4), N), ((3, 4), N)], {"axis": 1, "epsilon": 1e-3})],
    "LayerNormGrad": [([((2, 3, 8), N), ((2, 3, 8), N), ((8,), N), ((2, 3, 1), N),
                        ((2, 3, 1), P)], LN)],
    "CausalMask": [([((2, 4, 4), N)], {}), ([((3, 5), N)], {"value": -2.0})],
    "MatMul": [([((3, 4), N), ((4, 5), N)], {}),
               ([((2, 3, 4, 5), N), ((3, 6, 5), N)], {"transpose_b": True}),
               ([((2, 4, 3), N), ((2, 4, 5), N)], {"transpose_a": True}),
               # a batch times a matrix: one GEMM over the batch's rows
               ([((2, 3, 4), N), ((5, 4), N)], {"transpose_b": True}),
               ([((2, 2, 3, 4), N), ((4, 5), N)], {}),
               # folded Transposes: attention's scores over split heads, its context merged
               # back, batch and matrix axes mixed, broadcast batch axes under permutations
               ([((2, 5, 3, 4), N), ((2, 5, 3, 4), N)],
                {"transpose_b": True, "perm_a": [0, 2, 1, 3], "perm_b": [0, 2, 1, 3]}),
               ([((2, 3, 5, 5), N), ((2, 5, 3, 4), N)],
                {"perm_b": [0, 2, 1, 3], "perm_y": [0, 2, 1, 3]}),
               ([((3, 4, 2, 5), N), ((2, 6, 3, 5), N)],
                {"transpose_a": True, "perm_a": [2, 0, 3, 1], "transpose_b": True,
                 "perm_b": [0, 2, 1, 3], "perm_y": [2, 0, 1, 3]}),
               ([((3, 1, 2, 4), N), ((5, 3, 4, 6), N)],
                {"transpose_a": True, "perm_a": [1, 0, 3, 2], "perm_y": [1, 0, 2, 3]}),
               # a bias folded in (planner/frontend/passes/fold_bias.py): plain, and over a batch's
               # rows
               ([((3, 4), N), ((4, 5), N), ((5,), N)], {}),
               ([((2, 3, 4), N), ((5, 4), N), ((5,), N)], {"transpose_b": True}),
               ([((2, 3, 5, 5), N), ((2, 5, 3, 4), N), ((4,), N)],
                {"perm_b": [0, 2, 1, 3], "perm_y": [0, 2, 1, 3]}),
               # a folded Relu (fold_bias.py): alone, a linear layer's over a batch's rows, and
               # under a permuted product
               ([((3, 4), N), ((4, 5), N)], {"activation": "relu"}),
               ([((2, 3, 4), N), ((5, 4), N), ((5,), N)],
                {"transpose_b": True, "activation": "relu"}),
               ([((2, 3, 5, 5), N), ((2, 5, 3, 4), N), ((4,), N)],
                {"perm_b": [0, 2, 1, 3], "perm_y": [0, 2, 1, 3], "activation": "relu"})],
    # H = 4 and H = 19 (a vector loop's ragged end); acts of the gradient in (0, 1)
    "LSTMCell": [([((3, 16), N), ((3, 4), N)], {}),
                 ([((2, 76), N), ((2, 19), N), ((2, 76), N)], {"order": "iofg"})],
    "LSTMCellGrad": [([((3, 4), N), ((3, 4), N), ((3, 16), U), ((3, 4), N), ((3, 4), N)], {}),
                     ([((2, 19), N), ((2, 19), N), ((2, 76), U), ((2, 19), N), ((2, 19), N),
                       ((2, 19), N)], {"order": "iofg"})],
    # a run of axes leaving >= 8 trailing elements runs a plain loop: leading axes (a broadcast
    # bias's gradient), one block and two blocks of columns (256 each) with a ragged end, axis 1
    # of size 1 inside the run; middle axes with an outer axis
    "ReduceSum": [([((2, 3, 4), N)], {"axes": [1]}),
                  ([((5, 3, 9), N)], {"axes": [0, 1]}),
                  ([((3, 1, 2, 300), N)], {"axes": [0, 2], "keepdims": True}),
                  ([((2, 5, 3, 10), N)], {"axes": [1, 2]})],
    "ReduceMean": [([((2, 3, 4), N)], {"axes": [0, 2], "keepdims": True}),
                   ([((3, 7, 9), N)], {"axes": [1]})],
    "GlobalAvgPool": [([(X4, N)], {})],
    # pools of 1 to 3 spatial axes (pool_nd.cpp): adaptive sizes that do not divide, dilation,
    # ceil_mode, padding left out of or counted in the divisor
    "MaxPoolND": [([((2, 3, 7), N)], {"output_size": [3]}),
                  ([((1, 2, 7, 9), N)], {"kernel": [3, 2], "strides": [2, 1], "pads": [1, 0],
                                         "dilations": [1, 2], "ceil_mode": True}),
                  ([((1, 2, 5, 4, 6), N)], {"output_size": [2, 3, 4]})],
    "AvgPoolND": [([((1, 2, 7, 5, 6), N)], {"kernel": [3, 3, 3], "strides": [2], "pads": [1]}),
                  ([((2, 3, 7, 5), N)], {"output_size": [3, 4]}),
                  ([((2, 3, 8), N)], {"kernel": [3], "strides": [2], "pads": [1],
                                      "ceil_mode": True, "count_include_pad": False})],
    "AvgPoolNDGrad": [([((1, 2, 4, 3, 3), N)], {"kernel": [3, 3, 3], "strides": [2], "pads": [1],
                                                "input_shape": [1, 2, 7, 5, 6]}),
                      ([((2, 3, 3, 4), N)], {"output_size": [3, 4], "input_shape": [2, 3, 7, 5]})],
    "PoolScatter": [([((2, 3, 4), N), ((2, 3, 4), ids(9))], {"spatial": [9],
                                                             "accumulate": True}),
                    ([((1, 2, 2, 2), N), ((1, 2, 2, 2), ids(12))], {"spatial": [3, 4]})],
    "PoolGather": [([((2, 3, 9), N), ((2, 3, 4), ids(9))], {}),
                   ([((1, 2, 2, 3, 2), N), ((1, 2, 2, 2, 1), ids(12))], {})],
    # the reduction family (reductions.cpp): strided groups, every axis, a 0-d result
    "ReduceMax": [([((2, 3, 4), N)], {"axes": [0, 2]}), ([((3, 5), N)], {})],
    "ReduceMin": [([((2, 3, 4), N)], {"axes": [-1], "keepdims": True})],
    "ReduceProd": [([((3, 6), N)], {"axes": [1]}), ([((4, 3), N)], {"axes": [0]})],
    "ReduceNanSum": [([((3, 5), N)], {"axes": [1]})],
    "ReduceNanMean": [([((2, 3, 4), N)], {"axes": [1, 2]})],
    "ReduceLogSumExp": [([((3, 7), W)], {"axes": [1]}), ([((2, 3, 4), N)], {"axes": [0, 2]})],
    "ReduceNorm": [([((3, 5), N)], {"axes": [1]}), ([((2, 3, 4), N)], {"axes": [0, 2], "p": 0.5}),
                   ([((3, 5), N)], {"p": 3.0}), ([((3, 5), N)], {"axes": [0], "p": 0.0}),
                   ([((3, 5), N)], {"axes": [1], "p": 1.0, "keepdims": True})],
    "ReduceAny": [([((3, 4), B)], {"axes": [1]}), ([((3, 4), ids(2))], {}),
                  ([((3, 4), N)], {"axes": [0]})],
    "ReduceAll": [([((3, 4), B)], {"axes": [0]}), ([((3, 4), ids(2))], {"axes": [1]}),
                  ([((3, 4), N)], {})],
    # y is the forward op's of x (_derived)
    "ReduceGrad": [([((3,), N), ((3, 6), N), ((3,), N)], {"of": "ReduceProd", "axes": [1]}),
                   ([((3, 1), N), ((3, 6), N), ((3, 1), P)],
                    {"of": "ReduceNorm", "axes": [1], "keepdims": True, "p": 3.0}),
                   ([((4,), N), ((2, 4, 3), N), ((4,), N)], {"of": "ReduceLogSumExp",
                                                             "axes": [0, 2]}),
                   ([((2,), N), ((2, 5), N), ((2,), N)], {"of": "ReduceNanMean", "axes": [1]}),
                   ([((5,), N), ((2, 5), N), ((5,), N)], {"of": "ReduceMin", "axes": [0]})],
    # small maps run channels-last, rows of 16 or more outputs run row by row (max_pool.cpp)
    "MaxPool": [([(X4, N)], POOL), ([((1, 2, 5, 5), N)], {"kernel": [2, 2], "strides": [2, 2],
                                                          "ceil_mode": True}),
                ([((1, 2, 9, 34), N)], {**POOL, "ceil_mode": True}),
                ([((1, 2, 5, 20), N)], {"kernel": [3, 3], "pads": [1, 1, 1, 1]})],
    "MaxPoolGrad": [([((2, 3, 2, 3), N), (X4, N)], POOL),
                    ([((1, 2, 5, 18), N), ((1, 2, 9, 34), N)], {**POOL, "ceil_mode": True}),
                    ([((1, 2, 5, 20), N), ((1, 2, 5, 20), N)],
                     {"kernel": [3, 3], "pads": [1, 1, 1, 1]})],
    "AvgPool": [([(X4, N)], POOL)],
    "AvgPoolGrad": [([((2, 3, 2, 3), N)], {**POOL, "input_shape": list(X4)})],
    # with a folded bias and Relu (planner/frontend/passes/fold_conv_bias.py): each, both, and
    # grouped
    "Conv2D": [([(X4, N), ((4, 3, 3, 2), N)], CONV),
               ([(X4, N), ((4, 3, 3, 2), N), ((4,), N)], CONV),
               ([(X4, N), ((4, 3, 3, 2), N)], {**CONV, "activation": "relu"}),
               ([(X4, N), ((4, 3, 3, 2), N), ((4,), N)], {**CONV, "activation": "relu"}),
               ([((2, 4, 5, 5), N), ((6, 2, 3, 3), N), ((6,), N)],
                {"pads": [1, 1, 1, 1], "groups": 2, "activation": "relu"})],
    "Conv2DBackpropInput": [([((2, 4, 2, 5), N), ((4, 3, 3, 2), N)],
                             {**CONV, "input_shape": list(X4)})],
    "Conv2DBackpropFilter": [([(X4, N), ((2, 4, 2, 5), N)],
                              {**CONV, "filter_shape": [4, 3, 3, 2]}),
                             # depthwise on 2x2 maps: the runtime's direct kernel where oneDNN
                             # falls back to GEMMs (kernels/filter_grads.cpp)
                             ([((2, 48, 2, 2), N), ((2, 48, 2, 2), N)],
                              {"pads": [1, 1, 1, 1], "groups": 48,
                               "filter_shape": [48, 1, 3, 3]})],
    # output padding; groups with dilation; dcgan's 4x4 stride-2 upsampling on channel counts
    # for which oneDNN chooses blocked layouts (reordered in and out)
    "ConvTranspose2D": [([((1, 4, 3, 3), N), ((4, 3, 3, 3), N)],
                         {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
                        ([((2, 3, 4, 4), N), ((3, 2, 3, 3), N)],
                         {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
                        ([((1, 4, 4, 3), N), ((4, 1, 3, 2), N)],
                         {"groups": 2, "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
                        ([((2, 16, 4, 4), N), ((16, 8, 4, 4), N)],
                         {"strides": [2, 2], "pads": [1, 1, 1, 1]})],
    # The runtime's loops: X4's runs of 20 (lanes and remainders), (4, 3, 2, 3)'s of 6
    # (remainders only); (6, 3), one element per run, oneDNN's.
    "BatchNorm": [([(X4, N), ((3,), N), ((3,), N), ((3,), N), ((3,), P)], {}),
                  ([((4, 3, 2, 3), N), ((3,), N), ((3,), N), ((3,), N), ((3,), P)], {}),
                  ([((6, 3), N), ((3,), N), ((3,), N), ((3,), N), ((3,), P)], {}),
                  ([(X4, N), ((3,), N), ((3,), N), ((3,), N), ((3,), P)], {"training": False})],
    "BatchNormGrad": [([(X4, N), (X4, N), ((3,), N), ((3,), N), ((3,), P)], {}),
                      ([((4, 3, 2, 3), N), ((4, 3, 2, 3), N), ((3,), N), ((3,), N), ((3,), P)],
                       {}),
                      # A folded ReluGrad: the mask from x again, the sixth input the bias.
                      ([(X4, N), (X4, N), ((3,), N), ((3,), N), ((3,), P), ((3,), N)],
                       {"activation": "relu"})],
    # Even sizes: ONNX's window reaches one channel further after c than before.
    "LRN": [([((1, 5, 2, 2), N)], {"size": 3, "alpha": 0.5, "bias": 2.0}),
            ([((2, 6, 3), N)], {"size": 4, "alpha": 0.5, "beta": 0.6, "bias": 2.0}),
            ([((1, 3, 2, 2), N)], {"size": 2, "alpha": 0.8, "bias": 1.0})],
    "LRNGrad": [([((1, 5, 2, 2), N), ((1, 5, 2, 2), N), ((1, 5, 2, 2), N)],
                 {"size": 3, "alpha": 0.5, "bias": 2.0}),
                ([((2, 6, 3), N), ((2, 6, 3), N), ((2, 6, 3), N)],
                 {"size": 4, "alpha": 0.5, "beta": 0.6, "bias": 2.0})],
    "Reshape": [([((2, 6), N)], {"shape": [3, -1]})],
    "StopGradient": [([((2, 6), N)], {})],
    "Flatten": [([(X4, N)], {})],
    # the last axis kept (attention's heads): whole rows copied
    "Transpose": [([((2, 3, 4), N)], {"perm": [2, 0, 1]}),
                  ([((2, 3, 4, 5), N)], {"perm": [0, 2, 1, 3]}),
                  # the last two axes swapped tile by tile: partial tiles, a batch axis
                  ([((37, 70), N)], {"perm": [1, 0]}),
                  ([((2, 33, 5), N)], {"perm": [0, 2, 1]})],
    "Expand": [([((3, 1), N)], {"shape": [2, 3, 4]})],
    "Slice": [([((4, 5), N)], {"starts": [1, 0], "ends": [3, 10], "axes": [0, 1],
                               "steps": [1, 2]}),
              ([((4, 5), N)], {"starts": [1, 1], "ends": [3, 4], "axes": [0, 1]}),
              # torch.flip: backwards over both axes; every 2nd backwards
              ([((4, 5), N)], {"starts": [-1, -1], "ends": [-5, -6], "axes": [0, 1],
                               "steps": [-1, -1]}),
              ([((4, 5), N)], {"starts": [4], "ends": [-6], "axes": [1], "steps": [-2]})],
    "SliceGrad": [([((2, 3), N)], {"starts": [1, 0], "ends": [3, 10], "axes": [0, 1],
                                   "steps": [1, 2], "input_shape": [4, 5]}),
                  ([((2, 3), N)], {"starts": [1, 1], "ends": [3, 4], "axes": [0, 1],
                                   "input_shape": [4, 5]}),
                  ([((4, 3), N)], {"starts": [-1, 4], "ends": [-5, -6], "axes": [0, 1],
                                   "steps": [-1, -2], "input_shape": [4, 5]})],
    "Split": [([((2, 5), N)], {"axis": 1, "sizes": [2, 3]})],
    "Concat": [([((2, 3), N), ((2, 1), N)], {"axis": 1}),
               ([((2, 3, 2), ids(9)), ((2, 1, 2), ids(9))], {"axis": 1})],  # int64
    "Embedding": [([((6, 4), N), ((2, 3), ids(6))], {})],
    "EmbeddingGrad": [([((2, 3), ids(6)), ((2, 3, 4), N)], {"num_embeddings": 6})],
    "SoftmaxCrossEntropy": [([((4, 5), N), ((4,), ids(5))], {}),
                            ([((2, 5, 3, 4), N), ((2, 3, 4), ids(5))],
                             {"ignore_index": 2, "label_smoothing": 0.1}),
                            ([((3, 4, 5), N), ((3, 4), ids(5))], {"axis": 2}),
                            ([((6, 37), N), ((6,), ids(37))], {})],
    "SoftmaxCrossEntropyGrad": [([((), N), ((4, 5), N), ((4,), ids(5))], {}),
                                ([((), N), ((6, 37), N), ((6,), ids(37))], {}),
                                ([((), N), ((2, 5, 3, 4), N), ((2, 3, 4), ids(5))],
                                 {"ignore_index": 2, "label_smoothing": 0.1}),
                                ([((), N), ((3, 4, 5), N), ((3, 4), ids(5))], {"axis": 2})],
    "NLLLoss": [([((4, 5), N), ((4,), ids(5))], {}),
                ([((4, 5), N), ((4,), ids(5)), ((5,), P)],
                 {"reduction": "none", "ignore_index": 1, "label_smoothing": 0.2}),
                ([((2, 5, 3, 4), N), ((2, 3, 4), ids(5)), ((5,), P)],
                 {"reduction": "mean", "ignore_index": 2, "label_smoothing": 0.1}),
                ([((3, 4, 5), N), ((3, 4), ids(5))], {"axis": 2, "reduction": "sum"})],
    "NLLLossGrad": [([((), N), ((4, 5), N), ((4,), ids(5))], {}),
                    ([((4,), N), ((4, 5), N), ((4,), ids(5)), ((5,), P)],
                     {"reduction": "none", "ignore_index": 1, "label_smoothing": 0.2}),
                    ([((), N), ((2, 5, 3, 4), N), ((2, 3, 4), ids(5)), ((5,), P)],
                     {"reduction": "mean", "ignore_index": 2, "label_smoothing": 0.1}),
                    ([((), N), ((3, 4, 5), N), ((3, 4), ids(5))],
                     {"axis": 2, "reduction": "sum"})],
    # The random ops draw from (seed, step): the executor's draws are the reference's.
    "RandomUniform": [([], {"shape": [3, 5], "seed": 3, "low": -2.0, "high": 5.0}),
                      ([((), ids(50))], {"shape": [40], "seed": 9})],
    "RandomNormal": [([((), ids(50))], {"shape": [6, 7], "seed": 4, "mean": 1.0, "std": 3.0})],
    "Bernoulli": [([((4, 5), U), ((), ids(50))], {"seed": 2}),
                  ([], {"shape": [8, 1], "seed": 1, "p": 0.3})],
    "RandomInt": [([((), ids(50))], {"shape": [30], "seed": 5, "low": -3, "high": 10})],
    "RandomPerm": [([((), ids(50))], {"n": 17, "seed": 6})],
    # sample points inside the image (S: |u| < 0.9) and far past its edge (W); border and
    # reflection padding against torch itself: tests/ops/test_grid_sample.py
    "GridSample": [([((2, 3, 5, 6), N), ((2, 4, 4, 2), S)],
                    {"mode": "bilinear", "padding_mode": "zeros", "align_corners": False}),
                   ([((2, 3, 5, 6), N), ((2, 4, 4, 2), W)],
                    {"mode": "nearest", "padding_mode": "zeros", "align_corners": True})],
    "GridSampleGrad": [([((2, 3, 4, 4), N), ((2, 3, 5, 6), N), ((2, 4, 4, 2), S)],
                        {"mode": "bilinear", "padding_mode": "zeros", "align_corners": False})],
    "GroupNorm": [([((2, 6, 3, 4), N), ((6,), N), ((6,), N)], {"groups": 3}),
                  ([((2, 4, 5), N), ((4,), N), ((4,), N)], {"groups": 4, "epsilon": 1e-3})],
    "GroupNormGrad": [([((2, 6, 3, 4), N), ((2, 6, 3, 4), N), ((6,), N), ((2, 3), N),
                        ((2, 3), P)], {"groups": 3}),
                      ([((2, 4, 5), N), ((2, 4, 5), N), ((4,), N), ((2, 4), N), ((2, 4), P)],
                       {"groups": 4})],
    "DepthToSpace": [([((2, 8, 3, 5), N)], {"blocksize": 2}),
                     ([((1, 18, 2, 3), N)], {"blocksize": 3, "mode": "CRD"})],
    "SpaceToDepth": [([((2, 2, 6, 4), N)], {"blocksize": 2}),
                     ([((1, 2, 6, 9), N)], {"blocksize": 3, "mode": "CRD"})],
    # ties: few distinct values (_derived)
    "CumMax": [([((3, 8), N)], {"axis": 1}), ([((4, 5, 3), N)], {"axis": 1, "minimum": True}),
               ([((3, 9), N)], {"axis": -1})],
    "CumSum": [([((3, 8), N)], {"axis": 1}),
               ([((2, 5, 3), N)], {"axis": 1, "exclusive": True, "reverse": True}),
               ([((4, 3), N)], {"axis": 0, "reverse": True})],
    "CumProd": [([((3, 8), N)], {"axis": 1}),
                ([((2, 3, 4), N)], {"axis": 0, "exclusive": True, "reverse": True})],
    # a complex tensor's planes: one axis of a prime length, two axes inverse and scaled
    "FFT": [([((3, 7, 2), N)], {"axes": [1]}),
            ([((4, 5, 6, 2), N)], {"axes": [0, 2], "inverse": True, "scale": 0.25})],
    "CumProdGrad": [([((3, 8), N), ((3, 8), N)], {"axis": 1}),
                    ([((2, 3, 4), N), ((2, 3, 4), N)], {"axis": 1, "exclusive": True}),
                    ([((4, 5), N), ((4, 5), N)], {"axis": 0, "reverse": True})],
    "TopK": [([((3, 8), N)], {"k": 3}),
             ([((2, 6, 3), N)], {"k": 2, "axis": 1, "largest": False}),
             ([((2, 5), N)], {"k": 5}),
             # most of each line (a whole sort, not a heap), along a strided axis
             ([((2, 7, 3), N)], {"k": 5, "axis": 1})],
    # indices: distinct positions per line (_derived), as TopK gives
    "TopKGrad": [([((3, 3), N), ((3, 3), ids(8))], {"axis": -1, "size": 8}),
                 ([((2, 2, 3), N), ((2, 2, 3), ids(6))], {"axis": 1, "size": 6})],
    # offsets (_derived): rising from 0, with an empty bag
    "EmbeddingBag": [([((7, 4), N), ((9,), ids(7)), ((4,), ids(1))], {}),
                     ([((7, 4), N), ((9,), ids(7)), ((4,), ids(1)), ((9,), N)], {}),
                     ([((7, 4), N), ((9,), ids(7)), ((4,), ids(1))],
                      {"mode": "mean", "padding_idx": 2}),
                     ([((7, 4), N), ((9,), ids(7)), ((4,), ids(1))],
                      {"mode": "max", "include_last_offset": True}),
                     ([((300, 64), N), ((900,), ids(300)), ((40,), ids(1))], {"mode": "mean"})],
    "EmbeddingBagWeightGrad": [([((7, 4), N), ((9,), ids(7)), ((4,), ids(1)), ((4, 4), N)], {}),
                               ([((7, 4), N), ((9,), ids(7)), ((3,), ids(1)), ((2, 4), N)],
                                {"padding_idx": 2, "include_last_offset": True})],
    "EmbeddingBagGrad": [([((9,), ids(7)), ((4,), ids(1)), ((4, 3), N)],
                          {"num_embeddings": 7}),
                         ([((9,), ids(7)), ((4,), ids(1)), ((4, 3), N), ((9,), N)],
                          {"num_embeddings": 7}),
                         ([((9,), ids(7)), ((4,), ids(1)), ((4, 3), N)],
                          {"num_embeddings": 7, "mode": "mean", "padding_idx": 2}),
                         ([((9,), ids(7)), ((4,), ids(1)), ((3, 3), N), ((3, 3), ids(7))],
                          {"num_embeddings": 7, "mode": "max", "include_last_offset": True}),
                         ([((900,), ids(300)), ((40,), ids(1)), ((40, 64), N)],
                          {"num_embeddings": 300, "mode": "mean"})],
    # rows (index_select, index_put) and elements (gather, scatter), an index smaller than x,
    # repeated places (few ids), wrapped negative ids (_derived), past the kernels' grain
    "IndexGather": [([((4, 5), N), ((3,), ids(4))], {"axis": 0}),
                    ([((2, 5, 3), N), ((2, 4), ids(5))], {"axis": 1, "wrap": True}),
                    ([((3, 4, 2), N), ((3, 6, 2), ids(4))], {"axis": 1, "mode": "elements"}),
                    ([((3, 4, 5), N), ((2, 4, 3), ids(5))], {"axis": 2, "mode": "elements"}),
                    ([((64, 700), N), ((300,), ids(64))], {"axis": 0}),
                    # elements past the grain: a GNN's gather of messages, and an index
                    # narrower than x after the axis (each line's own x offset)
                    ([((512, 64), N), ((4096, 64), ids(512))], {"axis": 0, "mode": "elements"}),
                    ([((40, 30, 20), N), ((40, 60, 15), ids(30))],
                     {"axis": 1, "mode": "elements"})],
    "IndexScatter": [([((6, 3), N), ((5,), ids(6)), ((5, 3), N)], {"axis": 0}),
                     ([((6, 3), N), ((8,), ids(6)), ((8, 3), N)], {"axis": 0, "reduce": "sum"}),
                     ([((3, 7), N), ((9,), ids(7)), ((3, 9), N)],
                      {"axis": 1, "reduce": "mean", "include_self": False}),
                     ([((3, 4, 2), N), ((3, 5, 2), ids(4)), ((3, 5, 2), N)],
                      {"axis": 1, "mode": "elements", "reduce": "amax", "include_self": False}),
                     ([((3, 4, 2), N), ((2, 6, 2), ids(4)), ((2, 6, 2), N)],
                      {"axis": 1, "mode": "elements", "reduce": "amin"}),
                     ([((3, 4, 2), N), ((3, 5, 2), ids(4)), ((3, 5, 2), U)],
                      {"axis": 1, "mode": "elements", "reduce": "prod"}),
                     ([((3, 4, 2), N), ((3, 5, 2), ids(4)), ((3, 5, 2), N)],
                      {"axis": 1, "mode": "elements", "reduce": "mean"}),
                     ([((4, 5), N), ((3,), ids(5))], {"axis": 1, "value": 2.5, "wrap": True}),
                     ([((64, 700), N), ((300,), ids(64)), ((300, 700), N)],
                      {"axis": 0, "reduce": "sum"}),
                     ([((256, 200), N), ((256, 180), ids(200)), ((256, 180), N)],
                      {"axis": 1, "mode": "elements", "reduce": "mean"}),
                     ([((512, 64), N), ((4096, 64), ids(512)), ((4096, 64), N)],
                      {"axis": 0, "mode": "elements", "reduce": "sum"}),
                     ([((40, 30, 20), N), ((40, 60, 15), ids(30)), ((40, 60, 15), N)],
                      {"axis": 1, "mode": "elements", "reduce": "amax", "include_self": False}),
                     ([((40, 30, 20), N), ((40, 60, 15), ids(30)), ((40, 60, 15), N)],
                      {"axis": 1, "mode": "elements"})],
    # [x, index, src, out, dy]: out the amax / amin IndexScatter's (_derived), ties by rounding
    "IndexScatterGrad": [([((6, 3), N), ((8,), ids(6)), ((8, 3), N), ((6, 3), N), ((6, 3), N)],
                          {"axis": 0}),
                         ([((3, 4, 2), N), ((3, 5, 2), ids(4)), ((3, 5, 2), N), ((3, 4, 2), N),
                           ((3, 4, 2), N)],
                          {"axis": 1, "mode": "elements", "include_self": False}),
                         ([((64, 700), N), ((300,), ids(64)), ((300, 700), N), ((64, 700), N),
                           ((64, 700), N)], {"axis": 0, "include_self": False}),
                         ([((5, 3), N), ((8,), ids(5)), ((8, 3), N), ((5, 3), N), ((5, 3), N)],
                          {"axis": 0, "reduce": "prod"}),
                         ([((3, 4, 2), N), ((3, 5, 2), ids(4)), ((3, 5, 2), N), ((3, 4, 2), N),
                           ((3, 4, 2), N)], {"axis": 1, "mode": "elements", "reduce": "prod",
                                             "include_self": False})],
    "Resize": [([((2, 3, 4, 5), N)], {"sizes": [8, 10], "mode": "linear"}),
               ([((2, 3, 4, 5), N)], {"sizes": [7, 3], "coordinate_mode": "asymmetric",
                                      "nearest_mode": "floor"}),
               ([((2, 3, 4, 5), N)], {"sizes": [6, 9], "mode": "linear",
                                      "coordinate_mode": "align_corners"}),
               # down: nearest as F.interpolate's, and linear with W unresized (x[o] * 1 +
               # x[o] * 0: an infinity there is NaN, as PyTorch's)
               ([((1, 2, 6, 9), N)], {"sizes": [4, 5], "coordinate_mode": "asymmetric",
                                      "nearest_mode": "floor"}),
               ([((1, 2, 6, 5), N)], {"sizes": [4, 5], "mode": "linear"})],
    "ResizeGrad": [([((2, 3, 8, 10), N)], {"sizes": [8, 10], "mode": "linear",
                                           "input_sizes": [4, 5]}),
                   ([((2, 3, 7, 3), N)], {"sizes": [7, 3], "input_sizes": [4, 5]}),
                   ([((2, 3, 6, 9), N)], {"sizes": [6, 9], "mode": "linear",
                                          "coordinate_mode": "align_corners",
                                          "input_sizes": [4, 5]}),
                   ([((1, 2, 4, 5), N)], {"sizes": [4, 5], "coordinate_mode": "asymmetric",
                                          "nearest_mode": "floor", "input_sizes": [6, 9]}),
                   ([((1, 2, 4, 5), N)], {"sizes": [4, 5], "mode": "linear",
                                          "coordinate_mode": "align_corners",
                                          "input_sizes": [6, 5]})],
    "SigmoidBCE": [([((4, 5), N), ((4, 5), U)], {})],
    "SigmoidBCEGrad": [([((), N), ((4, 5), N), ((4, 5), U)], {})],
    "MSE": [([((4, 5), N), ((4, 5), N)], {})],
    "MSEGrad": [([((), N), ((4, 5), N), ((4, 5), N)], {})],
    # the last two inputs: the learning rate and weight decay
    "SGD": [([((3, 4), N), ((3, 4), N), ((), const(0.1)), ((), const(0.01))], {})],
    "ApplyMomentum": [([((3, 4), N), ((3, 4), N), ((3, 4), N), ((), const(0.1)),
                        ((), const(0.0))], {}),
                      # dampening: the first step (t = 1) takes the gradient, later ones damp it
                      *[([((3, 4), N), ((3, 4), N), ((3, 4), N), ((), const(t)),
                          ((), const(0.1)), ((), const(0.01))],
                         {"momentum": 0.8, "dampening": 0.3}) for t in (1.0, 3.0)],
                      # momentum_input: the momentum a scalar input (a cycled one), with
                      # nesterov, and after dampening's step count
                      ([((3, 4), N), ((3, 4), N), ((3, 4), N), ((), const(0.7)),
                        ((), const(0.1)), ((), const(0.01))],
                       {"nesterov": True, "momentum_input": True}),
                      ([((3, 4), N), ((3, 4), N), ((3, 4), N), ((), const(3.0)),
                        ((), const(0.85)), ((), const(0.1)), ((), const(0.01))],
                       {"dampening": 0.3, "momentum_input": True})],
    "ApplyAdam": [([((3, 4), N), ((3, 4), N), ((3, 4), N), ((3, 4), U), ((), P),
                    ((), const(0.1)), ((), const(0.01))], {}),
                  ([((3, 4), N), ((3, 4), N), ((3, 4), N), ((3, 4), U), ((), P),
                    ((), const(0.1)), ((), const(0.01))], {"decoupled": True}),
                  # amsgrad: v_max (some above v', some below) beside m and v
                  ([((3, 4), N), ((3, 4), N), ((3, 4), N), ((3, 4), U), ((3, 4), U), ((), P),
                    ((), const(0.1)), ((), const(0.01))], {"amsgrad": True}),
                  # momentum_input: beta1 a scalar input after the step count (bias
                  # correction by this step's beta1), with amsgrad too
                  ([((3, 4), N), ((3, 4), N), ((3, 4), N), ((3, 4), U), ((), P),
                    ((), const(0.85)), ((), const(0.1)), ((), const(0.01))],
                   {"decoupled": True, "momentum_input": True}),
                  ([((3, 4), N), ((3, 4), N), ((3, 4), N), ((3, 4), U), ((3, 4), U), ((), P),
                    ((), const(0.6)), ((), const(0.1)), ((), const(0.01))],
                   {"amsgrad": True, "momentum_input": True})],
    "Increment": [([((), N)], {})],
    # each kind of recorded learning-rate schedule, in and past its warm-up or first phase
    "ScheduledLR": [([((), P), ((), ("count", t))], attrs) for t, attrs in (
        (2, {"kind": "warmup-cosine", "warmup": 3, "total": 10, "start_factor": 0.1}),
        (7, {"kind": "warmup-cosine", "warmup": 3, "total": 10, "min_factor": 0.05}),
        (4, {"kind": "cosine", "total": 10}), (9, {"kind": "warmup", "warmup": 4}),
        (5, {"kind": "step", "step_size": 2, "gamma": 0.5}), (3, {"kind": "constant"}),
        (3, {"kind": "one-cycle", "total": 20}), (15, {"kind": "one-cycle", "total": 20}))],
    # an optimizer step's first micro-batch (the sum restarts), and a later one
    "AccumulateGrad": [([((3, 4), N), ((3, 4), N), ((), ("count", 8))], {"micro_batches": 4}),
                       ([((3, 4), N), ((3, 4), N), ((), ("count", 5))], {"micro_batches": 4})],
    # clipped (17 normals: a norm near 4) and not
    "ClipGradNorm": [([((3, 4), N), ((5,), N)], {"max_norm": 1.0}),
                     ([((3, 4), N), ((5,), N)], {"max_norm": 100.0})],
    "UnscaleGrads": [([((3, 4), N), ((5,), N), ((), const(1024.0))], {})],
    "UpdateLossScale": [([((), const(65536.0)), ((), const(1.0)), ((), const(0.0))],
                         {"growth_interval": 2}),      # grows
                        ([((), const(65536.0)), ((), const(0.0)), ((), const(0.0))],
                         {"growth_interval": 2}),      # counts
                        ([((), const(65536.0)), ((), const(1.0)), ((), const(1.0))],
                         {"growth_interval": 2})],     # backs off
    "SkipOnOverflow": [([((), const(1.0)), ((3, 4), N), ((3, 4), N)], {}),
                       ([((), const(0.0)), ((3, 4), N), ((3, 4), N)], {})],
    "MatrixInverse": [([((3, 4, 4), N)], {}), ([((5, 5), N)], {"info": True})],
    "MatrixSolve": [([((2, 4, 4), N), ((2, 4, 3), N)], {"info": True}),
                    ([((3, 3), N), ((3, 2), N)], {"transpose": True})],
    "MatrixSlogdet": [([((3, 4, 4), N)], {})],
    "MatrixSvd": [([((2, 5, 3), N)], {}), ([((3, 4), N)], {}), ([((4, 4), N)], {})],
    "MatrixQr": [([((2, 5, 3), N)], {}), ([((4, 4), N)], {})],
    "MatrixGeqrf": [([((2, 5, 3), N)], {}), ([((3, 4), N)], {})],
    # Padé degree 13 with squarings (norms near 6 and 20); 3, 5, 7 and 9 (scaled: _derived)
    "MatrixExp": [([((3, 6, 6), N)], {}), ([((12, 12), N)], {}), ([((4, 3, 3), N)], {})],
    # symmetric, the upper triangle never read; with a zero diagonal (2 x 2 pivots) and a zero
    # matrix (info 1) (_derived)
    "MatrixLdlFactor": [([((3, 5, 5), N)], {}), ([((3, 4, 4), N)], {"info": True})],
    "MatrixLdlSolve": [([((3, 4, 4), N), ((3, 4), ids(4)), ((3, 4, 2), N)], {})],
    # made positive definite, but for the second matrix with info (_derived)
    "Cholesky": [([((2, 5, 5), N)], {}), ([((2, 4, 4), N)], {"info": True})],
    # made symmetric (_derived); the second reads only the upper triangle
    "MatrixEigh": [([((3, 4, 4), N)], {}), ([((5, 5), N)], {"upper": True})],
    # general matrices: complex pairs and real eigenvalues; float64 (tests/ops/test_linalg_eig.py)
    "MatrixEig": [([((3, 4, 4), N)], {}), ([((5, 5), N)], {})],
    "MatrixLuFactor": [([((3, 4, 4), N)], {}), ([((5, 5), N)], {"info": True}),
                       ([((2, 3, 5), N)], {}), ([((5, 3), N)], {"info": True})],
    "LuPermutation": [([((2, 4), ids(4))], {}), ([((2, 3), ids(3))], {"rows": 5})],
    "Fill": [([], {"shape": [2, 3], "value": 1.5})],
    "Zeros": [([], {"shape": [2, 3]})],
    "Dropout": [([((4, 8), N)], {"rate": 0.3, "seed": 5}),
                ([((4, 8), N), ((), ids(7))], {"rate": 0.5}),
                # past the kernel's one-thread grain, a rate whose threshold is no power of 2
                ([((256, 160), N), ((), ids(3))], {"rate": 1 / 3, "seed": 11})],
    "DropoutGrad": [([((4, 8), N)], {"rate": 0.3, "seed": 5})],
}

POISON = (np.nan, np.inf, -np.inf)

# Inputs not poisoned, and why:
CASES.update(table_cases())  # the pointwise table's rows (tests/codegen/pointwise_cases.py)
# Single-element inputs beside inputs of y's size (relu6's bounds): the kernel's blocked loop with
# filled scalars (pointwise_family.h), under and over the one-thread grain.
CASES["HardTanh"] += [([((3, 5, 7), N), ((), "sym"), ((), "gt1")], {}),
                      ([((2, 8, 48, 48), N), ((), "sym"), ((1,), "gt1")], {})]
CASES["HardTanhGradA"] += [([((2, 8, 48, 48), N), ((2, 8, 48, 48), N), ((), "sym"),
                             ((), "gt1")], {})]
CASES.update(INTEGER_CASES)  # planner/ops/integer.py's (tests/codegen/integer_cases.py)

# ops whose result is defined by the float format itself (the next float32 after a): held to the
# float32 reference bit for bit, not to the float64 one
FORMAT_EXACT = {"NextAfter"}

UNPOISONED = {
    # The reference multiplies the zero padding by every weight (dy), so a NaN or inf there
    # reaches border outputs that a convolution skipping the padding (oneDNN, PyTorch) never
    # computes from it.
    "Conv2D": {1},
    "Conv2DBackpropFilter": {1},
    # The kernel hands oneDNN the variance 1 / invstd^2 - eps, which has no value for an
    # infinite invstd (a saved statistic, never a user's input).
    "BatchNormGrad": {4},
    # Loss-scaling state and flags: values only their own kernels write. (A poisoned gradient
    # is UnscaleGrads' point: its flag must come out 1.)
    "UnscaleGrads": {2},
    "UpdateLossScale": {0, 1, 2},
    "SkipOnOverflow": {0},
    # A NaN or infinity in a matrix spreads through its whole factorization in an order of its
    # own: LAPACK's blocked one (the reference's numpy.linalg) is not the kernels' row by row.
    "MatrixInverse": {0},
    "MatrixSolve": {0, 1},
    "MatrixSlogdet": {0},
    "MatrixSvd": {0},
    "MatrixQr": {0},
    "MatrixGeqrf": {0},
    "MatrixExp": {0},
    "MatrixLdlFactor": {0},
    "MatrixLdlSolve": {0, 1, 2},
    "Cholesky": {0},
    "MatrixEigh": {0},
    "MatrixLuFactor": {0},
}


def _derived(op, attrs, xs):
    """Inputs that must be consistent with the others: LRNGrad's y is LRN(x), which its kernel
    recomputes from x; TopKGrad's indices are distinct positions in [0, size) per line, as TopK
    gives; ReduceGrad's y is its forward op's y of x (ties of a max, zeros of a product); a
    wrapping index op's ids take their negative spelling at every other element;
    EmbeddingBag's offsets rise from 0, with an empty bag; IndexScatterGrad's out is the
    IndexScatter it differentiates (of x and src rounded: ties); Cholesky's A is x x^T + n I
    (positive definite; with info, a matrix that is not); MatrixEigh's A is x + x^T;
    MatrixExp's small matrices are scaled to the norms of each Padé degree; LDL's
    matrices are symmetric (_ldl_inputs);
    LuPermutation's pivots are 1-based int32."""
    if op == "ReduceGrad":
        opdef = get_op(attrs["of"])
        forward = {k: v for k, v in attrs.items() if k in opdef.attrs}
        with np.errstate(all="ignore"):
            xs[2] = opdef.reference([xs[1]], opdef.normalize_attrs(forward))[0]
    if op == "TopKGrad":
        axis = attrs["axis"] % xs[1].ndim
        lines = np.moveaxis(xs[1], axis, -1).shape
        shuffled = np.random.default_rng(1).random(lines[:-1] + (attrs["size"],))
        order = np.argsort(shuffled, axis=-1)[..., :lines[-1]]
        xs[1] = np.ascontiguousarray(np.moveaxis(order, -1, axis))
    if op in ("EmbeddingBag", "EmbeddingBagGrad", "EmbeddingBagWeightGrad"):
        k = 1 if op == "EmbeddingBagGrad" else 2
        count = len(xs[k - 1])
        offsets = np.sort(np.random.default_rng(2).integers(0, count + 1, len(xs[k])))
        offsets[0] = 0
        offsets[len(offsets) // 2] = offsets[len(offsets) // 2 - 1]  # an empty bag
        if attrs.get("include_last_offset"):
            offsets[-1] = count
        xs[k] = offsets
    if op == "Cholesky":
        xs[0] = xs[0] @ np.swapaxes(xs[0], -1, -2) + xs[0].shape[-1] * np.eye(xs[0].shape[-1],
                                                                              dtype=np.float32)
        if attrs.get("info"):
            xs[0][1, 2:, 2:] *= -1  # fails at pivot 3
    if op == "LuPermutation":
        xs[0] = (xs[0] + 1).astype(np.int32)  # LAPACK's 1-based pivots
    if op in ("MatrixLdlFactor", "MatrixLdlSolve"):
        xs[:2] = _ldl_inputs(op, attrs, xs[0])
    if op == "MatrixExp" and xs[0].shape == (4, 3, 3):  # 1-norms for Padé degrees 3 to 9
        norms = np.abs(xs[0]).sum(-1).max(-1)  # the kernel reads A^T's 1-norm
        xs[0] *= (np.array([0.01, 0.2, 0.8, 1.8]) / norms)[:, None, None].astype(np.float32)
    if op == "MatrixEigh":
        xs[0] = xs[0] + np.swapaxes(xs[0], -1, -2)
        if attrs.get("upper"):
            xs[0] = np.triu(xs[0]) + np.tril(np.full_like(xs[0], 7.0), -1)  # never read
    if op == "CumMax" and xs[0].shape == (3, 9):
        xs[0] = np.round(xs[0])  # equal values
    if op == "IndexScatterGrad":
        xs[0], xs[2] = np.round(xs[0]), np.round(xs[2])
        scatter = get_op("IndexScatter")
        reduce = attrs.get("reduce") or ("amin" if xs[0].shape == (3, 4, 2) else "amax")
        xs[3] = scatter.reference(xs[:3], scatter.normalize_attrs({**attrs, "reduce": reduce}))[0]
    if op in ("IndexGather", "IndexScatter") and attrs.get("wrap"):
        # every other id counted from the end
        odd = (np.arange(xs[1].size) % 2).reshape(xs[1].shape) == 1
        xs[1] = np.where(odd & (xs[1] >= 0), xs[1] - xs[0].shape[attrs["axis"]], xs[1])
    if op == "LRNGrad":
        opdef = get_op("LRN")
        with np.errstate(all="ignore"):
            xs[2] = opdef.reference([xs[1]], opdef.normalize_attrs(attrs))[0]
    return derive_integer_inputs(op, derive_table_inputs(op, xs))


def _ldl_inputs(op, attrs, x):
    """A symmetric matrix batch (x + x^T), the second with a zero diagonal (Bunch-Kaufman's
    2 x 2 pivots), the third (with info) zero (a singular D); 7 above the diagonal, which
    LAPACK never reads. MatrixLdlSolve: its LD and pivots, from the reference's factors."""
    a = x + np.swapaxes(x, -1, -2)
    a[1] -= np.diag(np.diag(a[1]))
    if attrs.get("info"):
        a[2] = 0.0
    a = np.tril(a) + np.triu(np.full_like(a, 7.0), 1)
    if op == "MatrixLdlFactor":
        return [a]
    ld, piv = get_op("MatrixLdlFactor").reference([a.astype(np.float64)], {})
    return [ld.astype(np.float32), piv]


def _value(shape, kind, rng):
    if kind == N:
        return rng.standard_normal(shape).astype(np.float32)
    if kind == P:
        return rng.uniform(0.5, 2.0, shape).astype(np.float32)
    if kind == U:
        return rng.uniform(0.05, 0.95, shape).astype(np.float32)
    if kind == W:
        return rng.uniform(-12.0, 12.0, shape).astype(np.float32)
    if kind == S:
        return rng.uniform(-0.9, 0.9, shape).astype(np.float32)
    if kind == G:
        return rng.uniform(1.1, 3.0, shape).astype(np.float32)
    if kind == B:
        return rng.integers(0, 2, shape).astype(bool)
    if kind[0] == "const":
        return np.full(shape, kind[1], np.float32)
    if kind[0] == "sint":
        return rng.integers(-kind[1], kind[1], shape).astype(np.int64)
    if kind[0] == "ids32":
        return rng.integers(-kind[1], kind[1], shape).astype(np.int32)
    if kind[0] == "count":
        return np.full(shape, kind[1], np.int64)
    return rng.integers(0, kind[1], shape).astype(np.int64)


def _poisoned(x, rng):
    """x with NaN, +inf and -inf at random positions (as many as fit)."""
    x = x.copy()
    spots = rng.permutation(x.size)[:len(POISON)]
    for spot, v in zip(spots, POISON, strict=False):
        x.reshape(-1)[spot] = v
    return x


def _variants():
    """(label, op, attrs, inputs): each case clean, then with each float input poisoned."""
    rng = np.random.default_rng(0)
    out = []
    for op, cases in sorted(CASES.items()):
        for k, (specs, attrs) in enumerate(cases):
            xs = _derived(op, attrs, [_value(s, kind, rng) for s, kind in specs])
            out.append((f"{op}.{k}", op, attrs, xs))
            for j, x in enumerate(xs):
                if x.dtype == np.float32 and x.size and j not in UNPOISONED.get(op, ()):
                    bad = list(xs)
                    bad[j] = _poisoned(x, rng)
                    out.append((f"{op}.{k}.nan{j}", op, attrs, _derived(op, attrs, bad)))
    return out


VARIANTS = _variants()


def nodes_graph(name: str, variants) -> tuple:
    """(graph, feeds, outputs by label): each (label, op, attrs, inputs) one node of one
    inference graph, its inputs fed under the label."""
    b = GraphBuilder(name)
    outs: dict[str, list[str]] = {}
    feeds = {}
    for label, op, attrs, xs in variants:
        names = []
        for j, x in enumerate(xs):
            names.append(b.input(f"{label}/x{j}", x.shape, str(x.dtype)))
            feeds[names[-1]] = x
        with b.scope(label):
            outs[label] = b.op_n(op, names, attrs)
    return check_graph(b.build(outputs=[o for v in outs.values() for o in v])), feeds, outs


def run_variants(folder, backend: str, variants) -> dict[str, list]:
    """The outputs of `variants` (those `backend` has kernels for: each test module says which)
    from one executor of `backend`."""
    graph, feeds, outs = nodes_graph("op_kernels", variants)
    module = build_module(graph, folder, backend)
    got = module.Executor().forward(feeds)
    return {label: [got[o] for o in names] for label, names in outs.items()}


def _f64(x):
    return x.astype(np.float64) if x.dtype == np.float32 else x


def check_variant(op, attrs, xs, outputs, tol: float, inf_or_nan: bool = False,
                  any_nonfinite: bool = False) -> None:
    """One variant's outputs against the op's reference: NaN and infinities exactly where the
    float32 reference has them, finite values within `tol` of the float64 reference (or 10x
    numpy's own float32 error where that is larger: sums that cancel). `inf_or_nan`: where the
    reference is infinite, NaN passes too (a kernel that folds an infinite operand into a
    multiply-add meets inf - inf where the reference's order does not). `any_nonfinite`: where
    the reference is NaN or infinite, any of NaN, +inf and -inf passes (an FFT's butterflies
    meet an infinity in another order than the reference's, so which of them comes out of a
    poisoned line is the algorithm's), and only there."""
    opdef = get_op(op)
    full = opdef.normalize_attrs(attrs)
    with np.errstate(all="ignore"):
        single = opdef.reference(list(xs), full)
        exact = opdef.reference([_f64(x) for x in xs], full)
    for k, (got, near, want) in enumerate(zip(outputs, single, exact, strict=True)):
        got, near = np.asarray(got), np.asarray(near)
        assert got.shape == near.shape and got.dtype == near.dtype, f"output {k}"
        if any_nonfinite and got.dtype.kind == "f":
            assert np.array_equal(np.isfinite(got), np.isfinite(near)), f"output {k}: finite"
            got = np.where(np.isfinite(near), got, near)
        if got.dtype.kind != "f" or op in FORMAT_EXACT:
            assert np.array_equal(got, near, equal_nan=got.dtype.kind == "f"), f"output {k}"
            continue
        # NaN and infinities exactly where the float32 reference has them
        inf = np.isinf(near)
        nan_ok = np.isnan(near) | (inf & inf_or_nan)
        assert np.isnan(got[np.isnan(near)]).all() and not np.isnan(got[~nan_ok]).any(), \
            f"output {k}: NaN at {np.argwhere(np.isnan(got) != np.isnan(near))[:4].tolist()}"
        same = inf & ~np.isnan(got)
        assert np.array_equal(got[same], near[same]), f"output {k}: infinities differ"
        finite = np.isfinite(near) & np.isfinite(want)
        if not finite.any():
            continue
        want = np.asarray(want, np.float64)[finite]
        scale = max(float(np.abs(want).max()), 1e-30)
        err = float(np.abs(got[finite] - want).max()) / scale
        floor = 10 * float(np.abs(near[finite] - want).max()) / scale
        assert err <= max(floor, tol), f"output {k}: rel. error {err:.2e}"
