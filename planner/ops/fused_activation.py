"""A layer's activation folded into the op that computes its pre-activation: Conv2D's and
MatMul's `activation` attr, one definition for both.

A convolution or linear layer followed by a Relu is two full passes over the layer's output;
planner/frontend/passes/fold_conv_bias.py and planner/frontend/passes/fold_bias.py fold the Relu
into the Conv2D or MatMul, which then writes y = act(product + bias) under the Relu's output name.
`activation` is "none" (absent means none) or "relu", float32 only: the folds make float32 ones
alone (a low type's Relu would act before y's one rounding instead of after it, a different
mixed-precision step), and the kernels apply it to a float32 y. The Relu is Relu's own rule, NaN
kept (the CPU kernels' pass `v < 0 ? 0 : v`, not oneDNN's Relu post-op, whose max(v, 0) gives 0 for
a NaN).

Costs: one comparison per output element, the count of the Relu it replaces. Gradient: the
Relu's, ReluGrad(dy, y) from the op's own output, before the bias's and the product's; a fold
made after autodiff (as both are) finds that ReluGrad already in the graph.

Example:
    >>> import numpy as np
    >>> apply_activation(np.array([-1.0, np.nan, 2.0]), {"activation": "relu"})
    array([ 0., nan,  2.])
    >>> activation_flops(TensorType((4, 8)), {"activation": "relu"})
    32
"""

from __future__ import annotations

import numpy as np

from planner.ops.base import Attr, Attrs, GradBuilder, OpError, TensorType, get_op

# The `activation` values: applied to the product plus bias as y is written. Most ops take
# "none" and "relu" (RELU_ONLY); BatchNorm and its gradient, and Conv2D, also "leaky_relu",
# LeakyRelu's rule with the op's `alpha` attr (SLOPE_ATTR; planner/step/fold_norm_relu.py,
# planner/step/fold_conv_leaky.py).
ACTIVATIONS = ("none", "relu", "leaky_relu")
RELU_ONLY = ("none", "relu")

# The attr as the ops declare it, and the leaky slope's.
ACTIVATION_ATTR = {"activation": Attr("str", optional=True)}
SLOPE_ATTR = {"alpha": Attr("float", optional=True)}


def activation(attrs: Attrs) -> str:
    return attrs.get("activation") or "none"


def folded_attrs(op: str, attrs: Attrs) -> Attrs:
    """The activation attrs a folded Relu or LeakyRelu node (or either's gradient), op `op`
    with `attrs`, gives the op it folds into: `activation` and a LeakyRelu's `alpha`.

    >>> folded_attrs("LeakyReluGrad", {}), folded_attrs("Relu", {})
    ({'activation': 'leaky_relu', 'alpha': 0.01}, {'activation': 'relu'})
    """
    if op in ("LeakyRelu", "LeakyReluGrad"):
        return {"activation": "leaky_relu", "alpha": get_op(op).normalize_attrs(attrs)["alpha"]}
    return {"activation": "relu"}


def foldable_slope(alpha: float) -> bool:
    """Whether a LeakyRelu of slope `alpha` folds: its float32 value (the runtime's) a positive
    normal number. The folded gradient reads y for x, the same mask only for a positive slope;
    oneDNN's post-op takes 0 as max(v, 0), which loses a NaN, and flushes a subnormal to 0
    (planner/verify/folds.py checks a plan's folds by this rule).

    >>> [foldable_slope(a) for a in (0.2, 1e30, 0.0, -0.2, 5e-324, 1e39, float("nan"))]
    [True, True, False, False, False, False, False]
    """
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not alpha > 0:
        return False
    with np.errstate(over="ignore", under="ignore"):
        a = float(np.float32(alpha))
    return float(np.finfo(np.float32).tiny) <= a <= float(np.finfo(np.float32).max)


def check_activation(op: str, attrs: Attrs, y: TensorType,
                     kinds: tuple[str, ...] = RELU_ONLY) -> None:
    """Refuse an activation not among `kinds` (the op's), leaky_relu without its slope, or an
    activation over a y that is not float32."""
    if activation(attrs) not in kinds:
        raise OpError(f"{op}: activation must be one of {list(kinds)}, got "
                      f"{attrs['activation']!r}")
    if activation(attrs) == "leaky_relu" and attrs.get("alpha") is None:
        raise OpError(f"{op}: activation leaky_relu needs its slope, attr alpha")
    if activation(attrs) != "none" and y.dtype != "float32":
        raise OpError(f"{op}: an activation needs float32 tensors, y is {y.dtype}")


def activation_flops(y: TensorType, attrs: Attrs) -> int:
    """The folded op's count: the Relu's one per output element, the LeakyRelu's two; 0
    without an activation."""
    return {"none": 0, "leaky_relu": 2}.get(activation(attrs), 1) * y.size


def apply_activation(y: np.ndarray, attrs: Attrs) -> np.ndarray:
    """The numpy reference: Relu's or LeakyRelu's own rule over the product plus bias."""
    if activation(attrs) == "leaky_relu":
        return get_op("LeakyRelu").reference([y], {"alpha": attrs["alpha"]})[0]
    return get_op("Relu").reference([y], {})[0] if activation(attrs) == "relu" else y


def apply_activation_grad(dy: np.ndarray, y: np.ndarray, attrs: Attrs) -> np.ndarray:
    """The numpy reference of the folded activation's gradient, from y before the
    activation: ReluGrad's rule on the Relu's output, LeakyReluGrad's on its input."""
    if activation(attrs) == "leaky_relu":
        return get_op("LeakyReluGrad").reference([dy, y], {"alpha": attrs["alpha"]})[0]
    if activation(attrs) == "relu":
        return get_op("ReluGrad").reference([dy, apply_activation(y, attrs)], {})[0]
    return dy


def activation_grad(g: GradBuilder, op: str, name: str, attrs: Attrs, dy: str, y: str) -> str:
    """dy of the pre-activation, from dy of y (the op's output): the Relu's gradient, or the
    LeakyRelu's of a positive slope, which reads y in place of its input (y > 0 exactly where
    the input is: the same mask; a slope <= 0 would flip or lose it)."""
    if activation(attrs) == "relu":
        return g.emit("ReluGrad", [dy, y])[0]
    alpha = attrs.get("alpha")
    if activation(attrs) == "leaky_relu" and alpha is not None and alpha > 0:
        return g.emit("LeakyReluGrad", [dy, y], {"alpha": alpha})[0]
    if activation(attrs) != "none":
        raise OpError(f"{op} {name!r}: no gradient for a folded activation "
                      f"{activation(attrs)!r}")
    return dy
