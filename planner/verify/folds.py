"""Verify a folded activation's preconditions from the graph the plan embeds: the slope of a
folded LeakyRelu, and that its gradient uses the forward's slope.

A CPU step folds a LeakyRelu into the Conv2D or BatchNorm computing its input (the op takes
`activation: leaky_relu` and `alpha`), and its gradient either into the BatchNormGrad (which
evaluates LeakyReluGrad's mask again from the normalised input) or into a LeakyReluGrad that
reads the folded op's output y in place of the LeakyRelu's input x. y > 0 exactly where x > 0
only for a positive slope, and the runtime applies the slope as a float32 (oneDNN's post-op
takes a slope of 0 as max(v, 0), which loses a NaN; a subnormal one is flushed to 0 there):

    slope      every node with `activation: leaky_relu` has an `alpha` whose float32 value is
               a positive normal number (not 0, negative, subnormal, infinite or NaN)
    gradients  a LeakyReluGrad reading as its x the output of a node with a folded activation
               has that node's slope, or the slope of a LeakyRelu reading that output (a second
               LeakyRelu after the folded one, whose own gradient reads its input); a
               BatchNormGrad with a folded activation has the activation and slope of the
               BatchNorm whose saved statistics it reads, or of a Relu or LeakyRelu reading
               that BatchNorm's y where its forward was left apart (statistics no BatchNorm
               of the graph wrote are the op's inputs as they are: there is no forward)

Derived from the graph's nodes alone: nothing the plan says of its folds is read.

Example:
    >>> from planner.ir.graph import Graph, Node, Tensor
    >>> t = lambda n, role="activation": Tensor(name=n, shape=(1, 1, 2, 2), role=role)
    >>> g = Graph(name="g", nodes=(
    ...     Node(name="c", op="Conv2D", inputs=("x", "w"), outputs=("y",),
    ...          attrs={"activation": "leaky_relu", "alpha": -0.2}),), tensors=(
    ...     t("x", "input"), Tensor(name="w", shape=(1, 1, 1, 1), role="param"), t("y")),
    ...     outputs=("y",))
    >>> fold_problems(g)   # doctest: +NORMALIZE_WHITESPACE
    ["op 'c' (Conv2D): its folded leaky_relu has slope alpha -0.2, not a positive normal
      float32: the fold's gradient reads y for x, the same mask only for a positive slope"]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from planner.ir.graph import Graph, Node
from planner.ops import REGISTRY

_TINY = float(np.finfo(np.float32).tiny)
_MAX = float(np.finfo(np.float32).max)


def _act(node: Node) -> str:
    return node.attrs.get("activation") or "none"


def _alpha(node: Node) -> Any:
    """The node's slope as given, else its op's default (LeakyRelu's and LeakyReluGrad's;
    None for an optional one, a fold's)."""
    spec = getattr(REGISTRY.get(node.op), "attrs", {}).get("alpha")
    return node.attrs.get("alpha", None if spec is None else spec.default)


def _positive_normal_f32(alpha: Any) -> bool:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        return False
    if not math.isfinite(alpha) or alpha <= 0:
        return False
    with np.errstate(over="ignore", under="ignore"):
        as_f32 = float(np.float32(alpha))
    return _TINY <= as_f32 <= _MAX


def fold_problems(graph: Graph, plan: dict[str, Any] | None = None) -> list[str]:
    """Every rule of the module docstring `graph` breaks; [] when it holds."""
    problems = []
    producer = {o: n for n in graph.nodes for o in n.outputs}
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)

    def slopes_reading(tensor: str, op: str) -> list[tuple[str, Any]]:
        return [("leaky_relu" if r.op == "LeakyRelu" else "relu",
                 _alpha(r) if r.op == "LeakyRelu" else None)
                for r in readers.get(tensor, []) if r.op == op and r.inputs[:1] == (tensor,)]

    for n in graph.nodes:
        if _act(n) == "leaky_relu" and not _positive_normal_f32(n.attrs.get("alpha")):
            problems.append(
                f"op {n.name!r} ({n.op}): its folded leaky_relu has slope alpha "
                f"{n.attrs.get('alpha')!r}, not a positive normal float32: the fold's gradient "
                f"reads y for x, the same mask only for a positive slope")
        if n.op == "LeakyReluGrad" and len(n.inputs) == 2:
            p = producer.get(n.inputs[1])
            if p is None or _act(p) == "none":
                continue
            allowed = [a for _, a in slopes_reading(n.inputs[1], "LeakyRelu")]
            if _act(p) == "leaky_relu":
                allowed.append(p.attrs.get("alpha"))
            if _alpha(n) not in allowed:
                problems.append(
                    f"op {n.name!r} (LeakyReluGrad): slope alpha {_alpha(n)!r} reading "
                    f"{n.inputs[1]!r}, the output of op {p.name!r} with a folded "
                    f"{_act(p)} (alpha {p.attrs.get('alpha')!r}): a gradient of another slope "
                    f"than its forward's")
        if n.op == "BatchNormGrad" and _act(n) != "none" and len(n.inputs) > 3:
            bn = producer.get(n.inputs[3])
            if bn is None or bn.op != "BatchNorm":
                continue  # statistics given as they are: the op's own rule, no forward's
            forward = [(_act(bn), bn.attrs.get("alpha"))] if _act(bn) != "none" else \
                slopes_reading(bn.outputs[0], "LeakyRelu") + slopes_reading(bn.outputs[0],
                                                                            "Relu")
            mine = (_act(n), n.attrs.get("alpha") if _act(n) == "leaky_relu" else None)
            if mine not in forward:
                problems.append(
                    f"op {n.name!r} (BatchNormGrad): folded {mine[0]} (alpha {mine[1]!r}), but "
                    f"its BatchNorm {bn.name!r} is followed by "
                    f"{', '.join(f'{a} (alpha {s!r})' for a, s in forward) or 'no activation'}"
                    f": a gradient of another activation than its forward's")
    return problems
