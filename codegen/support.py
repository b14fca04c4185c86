"""What the CPU executor runs: the ops it has kernels for and the dtypes it moves.

The kernel library (templates/cpu/runtime/kernels) registers the same names; `check` reports
the first node or tensor outside them, before anything is rendered or compiled.

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
    **dict.fromkeys(["MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad"], "pool"),
    **dict.fromkeys(["BatchNorm", "BatchNormGrad", "LRN", "LRNGrad"], "norm"),
    **dict.fromkeys(["Relu", "LeakyRelu", "Tanh", "Sigmoid", "Neg", "Scale", "ReluGrad",
                     "LeakyReluGrad", "TanhGrad", "SigmoidGrad", "Softmax", "SoftmaxGrad"],
                    "eltwise"),
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

# Element types the executor moves: float32 math, int64 ids and labels.
CPU_DTYPES = frozenset({"float32", "int64"})


def check(graph: Graph) -> None:
    """Raise UnsupportedError naming the first node or tensor the CPU executor cannot run."""
    for n in graph.nodes:
        if n.op not in CPU_OPS:
            raise UnsupportedError(f"node {n.name!r}: op {n.op} has no CPU kernel; supported "
                                   f"ops: {', '.join(sorted(CPU_OPS))}")
    for t in graph.tensors:
        if t.dtype not in CPU_DTYPES:
            raise UnsupportedError(f"tensor {t.name!r}: dtype {t.dtype} is not supported by the "
                                   f"CPU executor (it runs {', '.join(sorted(CPU_DTYPES))})")
    if not graph.nodes:
        raise UnsupportedError(f"graph {graph.name!r} has no ops to run")
