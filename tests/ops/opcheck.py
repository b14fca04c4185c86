"""Test helpers shared by the op-family tests: run one op's gradient rule and compare it with
central finite differences (float64) and with torch autograd.

A gradient rule is exercised on a one-node graph: autodiff's `gradients` (a vector-Jacobian
product with a fed incoming gradient dy per output) adds the nodes the rule emits through
GraphBuilder, so they pass the same shape rules; the result is validated and run by the reference
interpreter. The scalar checked is f(inputs) = sum_k <output_k(inputs), dy_k>, whose gradient is
exactly what the rule computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from planner.frontend.autodiff import gradients
from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import run
from planner.ops import TensorType, get_op


class RuleBuilder:
    """The GradBuilder protocol over a GraphBuilder, wanting gradients for `wanted` only: for
    calling a gradient helper (such as sum_to_shape) directly."""

    def __init__(self, builder: GraphBuilder, wanted: set[str]) -> None:
        self.builder = builder
        self.wanted = wanted

    def emit(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None
             ) -> list[str]:
        return self.builder.op_n(op, inputs, attrs)

    def needs(self, tensor: str) -> bool:
        return tensor in self.wanted

    def type(self, tensor: str) -> TensorType:
        return self.builder.type(tensor)


def rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected|| (absolute when expected is all zeros)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = np.linalg.norm(expected)
    return float(np.linalg.norm(actual - expected) / (scale if scale > 0 else 1.0))


def reference(op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None
              ) -> list[np.ndarray]:
    """The op's numpy reference with attrs normalised (defaults filled) as a graph would hold."""
    opdef = get_op(op)
    return opdef.reference(list(inputs), opdef.normalize_attrs(dict(attrs or {})))


def checked_reference(op: str, inputs: Sequence[np.ndarray], **attrs: Any) -> list[np.ndarray]:
    """The op's reference, after checking that its shape rule gives the shapes and dtypes the
    reference produced (a planner that trusts the shape rule allocates by it)."""
    opdef = get_op(op)
    full = opdef.normalize_attrs(attrs)
    types = opdef.infer([TensorType(x.shape, str(x.dtype)) for x in inputs], full)
    outputs = opdef.reference(list(inputs), full)
    assert [(y.shape, str(y.dtype)) for y in outputs] == [(t.shape, t.dtype) for t in types]
    return outputs


def apply_rule(op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None,
               wrt: Sequence[int] | None = None, seed: int = 0, of: Sequence[int] | None = None
               ) -> tuple[list[np.ndarray | None], list[np.ndarray], list[str]]:
    """Differentiate a one-node graph of `op` (planner.frontend.autodiff.gradients, which calls the
    op's gradient rule); return (gradient per input or None, the dy fed per output, the ops the
    rule emitted).

    wrt: indices of the inputs whose gradient is wanted (default: every float input the op does
    not mark as non-differentiable); of: indices of the outputs differentiated (default: all).
    """
    b = GraphBuilder(f"{op.lower()}_grad")
    names = [b.input(f"x{k}", x.shape, str(x.dtype)) for k, x in enumerate(inputs)]
    outs = b.op_n(op, names, attrs)
    if of is not None:
        outs = [outs[k] for k in of]
    if wrt is None:
        wrt = [k for k, x in enumerate(inputs)
               if x.dtype.kind == "f" and k not in get_op(op).nondiff_inputs]
    graph, grads = gradients(b.build(outputs=outs), wrt=[names[k] for k in wrt], of=outs)
    check_graph(graph)
    rng = np.random.default_rng(seed)
    dys = [np.asarray(rng.standard_normal(b.type(o).shape), dtype=b.type(o).dtype) for o in outs]
    feeds = {**dict(zip(names, inputs, strict=True)),
             **{f"grad/{o}": dy for o, dy in zip(outs, dys, strict=True)}}
    values = run(graph, feeds, {})
    emitted = [n.op for n in graph.nodes[1:]]
    return [values[grads[n]] if grads.get(n) else None for n in names], dys, emitted


def numeric_gradient(op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None,
                     dys: Sequence[np.ndarray], k: int, eps: float = 1e-6,
                     of: Sequence[int] | None = None) -> np.ndarray:
    """Central differences of sum_k <output_k, dy_k> with respect to input k (outputs `of`)."""
    xs = [np.array(x, copy=True) for x in inputs]

    def f() -> float:
        outs = reference(op, xs, attrs)
        outs = outs if of is None else [outs[j] for j in of]
        return sum(float(np.sum(o * dy)) for o, dy in zip(outs, dys, strict=True))

    grad = np.zeros_like(xs[k], dtype=np.float64)
    for idx in np.ndindex(xs[k].shape):
        keep = xs[k][idx]
        xs[k][idx] = keep + eps
        up = f()
        xs[k][idx] = keep - eps
        down = f()
        xs[k][idx] = keep
        grad[idx] = (up - down) / (2 * eps)
    return grad


def check_gradient(op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None,
                   wrt: Sequence[int] | None = None, tol: float = 1e-4, seed: int = 0,
                   of: Sequence[int] | None = None
                   ) -> tuple[list[np.ndarray | None], list[np.ndarray]]:
    """Assert the rule's gradients match finite differences for every wanted input (float64
    inputs); return (gradients, dys) for further comparisons."""
    grads, dys, _ = apply_rule(op, inputs, attrs, wrt, seed, of)
    wanted = wrt if wrt is not None else [k for k, g in enumerate(grads) if g is not None]
    assert wanted, f"{op}: the rule gave no gradient at all"
    for k in wanted:
        assert grads[k] is not None, f"{op}: no gradient for input {k}"
        # A float32 gradient of a float64 input would pass the tolerance and hide the cast.
        assert grads[k].dtype == inputs[k].dtype, f"{op}: input {k} gradient is {grads[k].dtype}"
        expected = numeric_gradient(op, inputs, attrs, dys, k, of=of)
        err = rel_error(grads[k], expected)
        assert err < tol, f"{op}: input {k} gradient rel. error {err:.2e}"
    return grads, dys


def torch_gradients(fn: Callable[..., Any], inputs: Sequence[np.ndarray],
                    dys: Sequence[np.ndarray], wrt: Sequence[int]) -> list[np.ndarray]:
    """Gradients of sum_k <fn(inputs)_k, dy_k> by torch autograd, for the inputs in `wrt`."""
    import torch

    ts = [torch.tensor(x, requires_grad=k in wrt) for k, x in enumerate(inputs)]
    outs = fn(*ts)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    total = sum((o * torch.tensor(dy)).sum() for o, dy in zip(outs, dys, strict=True))
    total.backward()
    return [ts[k].grad.numpy() for k in wrt]
