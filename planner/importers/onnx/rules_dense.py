"""Rules for matrix products: Gemm and MatMul.

Gemm's Y = alpha * op(A) @ op(B) + beta * C becomes a MatMul with the transpose flags, a Scale
when alpha != 1, and the bias: a BiasAdd when C is a vector of Y's width (a fully connected
layer's bias), an Add (numpy broadcasting) for any other shape, scaled first when beta != 1 and
left out when beta is 0 or C is absent. MatMul's rank-1 operands (numpy's promotion to a row or
column) become rank 2 by a Reshape, which another Reshape removes from the result.
"""

from __future__ import annotations

from planner.importers.onnx.context import NodeCtx, Value, rule


@rule("Gemm")
def gemm(n: NodeCtx) -> None:
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    attrs = {"transpose_a": bool(n.attr("transA", 0)), "transpose_b": bool(n.attr("transB", 0))}
    bias = n.value(2) if n.has_input(2) and beta != 0 else None
    scaled = alpha != 1.0
    y = n.emit1("MatMul", [n.value(0), n.value(1)], attrs,
                output=0 if bias is None and not scaled else None)
    if scaled:
        y = n.emit1("Scale", [y], {"factor": alpha}, output=0 if bias is None else None)
    if bias is None:
        return
    if beta != 1.0:
        bias = n.emit1("Scale", [bias], {"factor": beta})
    width = n.type_of(y).shape[-1]
    if n.type_of(bias).shape == (width,):
        n.emit1("BiasAdd", [y, bias], {"axis": 1}, output=0)
    else:
        n.emit1("Add", [y, bias], output=0)


@rule("MatMul")
def matmul(n: NodeCtx) -> None:
    a, b = n.value(0), n.value(1)
    a_rank, b_rank = len(n.shape(0)), len(n.shape(1))
    if a_rank >= 2 and b_rank >= 2:
        n.emit1("MatMul", [a, b], output=0)
        return
    if a_rank == 1:
        a = _reshape(n, a, [1, n.shape(0)[0]])
    if b_rank == 1:
        b = _reshape(n, b, [n.shape(1)[0], 1])
    y = n.emit1("MatMul", [a, b])
    shape = list(n.type_of(y).shape)
    # Drop the axes the promotion added: the row of a (second to last) and the column of b.
    if b_rank == 1:
        shape.pop(-1)
    if a_rank == 1:
        shape.pop(-1 if b_rank == 1 else -2)
    n.emit1("Reshape", [y], {"shape": shape}, output=0)


def _reshape(n: NodeCtx, v: Value, shape: list[int]) -> Value:
    return n.emit1("Reshape", [v], {"shape": shape})
