"""Rules for ONNX ops that are short compositions of planner ops (so they train, and run
wherever those run), written as ONNX's own function bodies define them:

    Reciprocal        1 / x
    HardSigmoid       clip(alpha * x + beta, 0, 1)
    HardSwish         x * HardSigmoid(x; alpha 1/6, beta 0.5)
    Softsign          x / (1 + |x|)
    Swish             x * sigmoid(alpha * x)
    Mish              x * tanh(softplus(x))
    Celu              alpha * elu(x / alpha)
    ReduceSumSquare   sum(x * x);  ReduceL1  sum(|x|);  ReduceL2  sqrt(sum(x * x))
    ReduceLogSum      log(sum(x))
    ReduceMax         a MaxPool whose one window spans the reduced axes (reduce_max.py)
    ReduceMin         -ReduceMax(-x)

Scalars (1, beta) become constant state tensors of the input's dtype.
"""

from __future__ import annotations

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.onnx.context import NodeCtx, Value, rule
from planner.importers.onnx.errors import OnnxImportError
from planner.importers.onnx.rules_shape import reduce_attrs, reshape_to
from planner.importers.reduce_max import pool_max


def _scalar(n: NodeCtx, value: float, what: str) -> Const:
    return Const.of(n.imp.fresh(f"{n.label}/{what}"),
                    np.asarray(value, dtype=n.type(0).dtype), origin="constant")


def _hard_sigmoid(n: NodeCtx, x: Value, alpha: float, beta: float, last: bool) -> Value:
    scaled = n.emit1("Scale", [x], {"factor": alpha})
    shifted = n.emit1("Add", [scaled, _scalar(n, beta, "beta")])
    return n.emit1("Clip", [shifted], {"min": 0.0, "max": 1.0}, output=0 if last else None)


@rule("Reciprocal")
def reciprocal(n: NodeCtx) -> None:
    n.emit1("Div", [_scalar(n, 1.0, "one"), n.value(0)], output=0)


@rule("HardSigmoid")
def hard_sigmoid(n: NodeCtx) -> None:
    _hard_sigmoid(n, n.value(0), float(n.attr("alpha", 0.2)), float(n.attr("beta", 0.5)),
                  last=True)


@rule("HardSwish")
def hard_swish(n: NodeCtx) -> None:
    gate = _hard_sigmoid(n, n.value(0), 1.0 / 6.0, 0.5, last=False)
    n.emit1("Mul", [n.value(0), gate], output=0)


@rule("Softsign")
def softsign(n: NodeCtx) -> None:
    denominator = n.emit1("Add", [n.emit1("Abs", [n.value(0)]), _scalar(n, 1.0, "one")])
    n.emit1("Div", [n.value(0), denominator], output=0)


@rule("Swish")
def swish(n: NodeCtx) -> None:
    scaled = n.emit1("Scale", [n.value(0)], {"factor": float(n.attr("alpha", 1.0))})
    n.emit1("Mul", [n.value(0), n.emit1("Sigmoid", [scaled])], output=0)


@rule("Mish")
def mish(n: NodeCtx) -> None:
    gate = n.emit1("Tanh", [n.emit1("Softplus", [n.value(0)])])
    n.emit1("Mul", [n.value(0), gate], output=0)


@rule("Celu")
def celu(n: NodeCtx) -> None:
    alpha = float(n.attr("alpha", 1.0))
    if alpha == 0.0:
        raise OnnxImportError(f"node {n.label!r} (Celu): alpha is 0")
    inner = n.emit1("Elu", [n.emit1("Scale", [n.value(0)], {"factor": 1.0 / alpha})],
                    {"alpha": 1.0})
    n.emit1("Scale", [inner], {"factor": alpha}, output=0)


@rule("ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum")
def reduce_composite(n: NodeCtx) -> None:
    attrs = reduce_attrs(n)
    if attrs is None:
        raise Unsupported(f"{n.op_type} (noop_with_empty_axes)")
    x = n.value(0)
    term = n.emit1("Abs", [x]) if n.op_type == "ReduceL1" else \
        x if n.op_type == "ReduceLogSum" else n.emit1("Mul", [x, x])
    last = n.op_type in ("ReduceSumSquare", "ReduceL1")
    total = n.emit1("ReduceSum", [term], attrs, output=0 if last else None)
    if not last:
        n.emit1("Sqrt" if n.op_type == "ReduceL2" else "Log", [total], output=0)


@rule("ReduceMax", "ReduceMin")
def reduce_max(n: NodeCtx) -> None:
    """Of computed tensors (constant ones fold at import): planner/importers/reduce_max.py."""
    attrs = reduce_attrs(n)
    if attrs is None:
        n.bind(0, n.value(0))
        return
    x, shape = n.value(0), n.shape(0)
    if n.type(0).dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise Unsupported(f"{n.op_type} (of {n.type(0).dtype} tensors)")
    axes = attrs["axes"] or list(range(len(shape)))
    out = [1 if k in axes else d for k, d in enumerate(shape)] if attrs["keepdims"] else \
        [d for k, d in enumerate(shape) if k not in axes]
    if 0 in shape:  # the max of nothing is -inf (ONNX); an empty result is empty
        empty = -np.inf if n.op_type == "ReduceMax" else np.inf
        n.fold(0, np.full(out, empty, dtype=n.type(0).dtype))
        return
    if all(shape[k] == 1 for k in axes):
        reshape_to(n, x, out)
        return
    reshape_to(n, pool_max(n.emit1, x, shape, axes, minimum=n.op_type == "ReduceMin"), out)
