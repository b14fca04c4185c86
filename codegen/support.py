"""What the CPU executor runs: the ops it has kernels for and the dtypes it moves.

The kernel library (templates/cpu/runtime/kernels) registers the same names (the built runtime
lists them: `kernel_ops()`, compared with CPU_OPS in tests/codegen/test_op_kernels.py); `check`
reports every op type and dtype outside them at once, before anything is rendered or compiled.

Example:
    >>> from planner.zoo import build
    >>> check(build("mlp", batch=2, hidden=[4], in_features=3, classes=2))
    >>> "Conv2D" in CPU_OPS
    True
"""

from __future__ import annotations

from codegen.errors import UnsupportedError
from planner.graph.ir import Graph

# op type -> kernel family (the .cpp under templates/cpu/runtime/kernels/)
CPU_OPS: dict[str, str] = {
    **dict.fromkeys(["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                     "ConvTranspose2D"], "conv"),
    "MatMul": "matmul",
    **dict.fromkeys(["AvgPool", "AvgPoolGrad"], "pool"),
    **dict.fromkeys(["MaxPool", "MaxPoolGrad"], "max_pool"),
    **dict.fromkeys(["BatchNorm", "BatchNormGrad", "LRN", "LRNGrad"], "norm"),
    **dict.fromkeys(["LeakyRelu", "Tanh", "Sigmoid", "Neg", "Scale", "TanhGrad", "SigmoidGrad",
                     "SoftmaxGrad", "Log", "Sqrt", "Abs", "Softplus", "Elu", "Gelu", "GeluGrad"],
                    "eltwise"),
    **dict.fromkeys(["Relu", "ReluGrad", "LeakyReluGrad", "Exp", "EluGrad", "Sign", "Selu",
                     "SeluGrad", "Clip", "ClipGrad", "Erf", "CausalMask"], "math"),
    **dict.fromkeys(["Softmax", "LogSoftmax"], "softmax"),
    **dict.fromkeys(["Pow", "Max", "Min", "MaxGrad", "MinGrad", "Where", "PRelu", "PReluGrad"],
                    "broadcast"),
    **dict.fromkeys(["Pad", "PadGrad"], "pad"),
    **dict.fromkeys(["LayerNorm", "LayerNormGrad"], "layer_norm"),
    **dict.fromkeys(["Add", "Sub", "Mul", "Div", "BiasAdd", "AddN"], "binary"),
    **dict.fromkeys(["ReduceSum", "ReduceMean", "BiasAddGrad", "GlobalAvgPool"], "reduce"),
    **dict.fromkeys(["Reshape", "Flatten", "Transpose", "Expand", "Slice", "SliceGrad", "Split",
                     "Concat"], "shape"),
    **dict.fromkeys(["Embedding", "EmbeddingGrad"], "embedding"),
    **dict.fromkeys(["SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad", "SigmoidBCE",
                     "SigmoidBCEGrad", "MSE", "MSEGrad"], "loss"),
    **dict.fromkeys(["SGD", "ApplyMomentum", "ApplyAdam", "Increment", "Fill", "Zeros"], "optim"),
    **dict.fromkeys(["Dropout", "DropoutGrad"], "dropout"),
}

# Element types the executor moves: float32 math, int64 ids and labels, bool conditions (Where).
CPU_DTYPES = frozenset({"float32", "int64", "bool"})


def check(graph: Graph) -> None:
    """Raise UnsupportedError naming every op type (with its first node and count) and every
    dtype (with its first tensor) the CPU executor cannot run, so a user sees them all at once.

    >>> from planner.graph import GraphBuilder
    >>> b = GraphBuilder("g")
    >>> y = b.op("Tanh", [b.op("Gelu", [b.input("x", (2,))])])
    >>> check(b.build(outputs=[y]))
    """
    missing: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op not in CPU_OPS:
            missing.setdefault(n.op, []).append(n.name)
    problems = [f"op {op} has no CPU kernel (node {names[0]!r}"
                + (f" and {len(names) - 1} more)" if len(names) > 1 else ")")
                for op, names in sorted(missing.items())]
    dtypes: dict[str, str] = {}
    for t in graph.tensors:
        if t.dtype not in CPU_DTYPES:
            dtypes.setdefault(t.dtype, t.name)
    problems += [f"dtype {d} is not supported by the CPU executor (tensor {name!r}; it runs "
                 f"{', '.join(sorted(CPU_DTYPES))})" for d, name in sorted(dtypes.items())]
    if problems:
        raise UnsupportedError("; ".join(problems) + f"; supported ops: "
                               f"{', '.join(sorted(CPU_OPS))}")
    if not graph.nodes:
        raise UnsupportedError(f"graph {graph.name!r} has no ops to run")
