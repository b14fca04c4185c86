"""torch's random ops as the planner's (planner/ops/random.py): one counter-based generator,
each op (and each Dropout) with its own seed, numbered 1, 2, ... in graph order, so a step's
draws are a function of (seed, step, rank). They match torch's distributions, not torch's bits.

| ATen op                               | planner op                                        |
| ------------------------------------- | ------------------------------------------------- |
| rand, rand_like, uniform (uniform_)   | RandomUniform (low, high)                         |
| randn, randn_like, normal (normal_)   | RandomNormal (mean, std); a tensor mean or std:   |
|                                       | mean + std * RandomNormal(0, 1)                   |
| bernoulli.p (bernoulli_(p) on a       | Bernoulli (p): stochastic depth's keep mask       |
|   shaped tensor)                      |                                                   |
| bernoulli (a tensor of probabilities; | Bernoulli [p] (p broadcast to x's shape)          |
|   x.bernoulli_(p))                    |                                                   |
| randint                               | RandomInt                                         |
| randint_like (of a float tensor)      | RandomInt, cast to the tensor's dtype             |
| randperm                              | RandomPerm                                        |
| exponential_(lambd)                   | -log1p(-u) / lambd, u = RandomUniform [0, 1)      |
| cauchy_(median, sigma)                | median + sigma tan(pi (u - 1/2)), the angle      |
|                                       | clipped inside (-pi/2, pi/2) (float32 pi/2 is     |
|                                       | above pi/2, where tan changes sign)               |
| geometric_(p)                         | max(1, ceil(log1p(-u) / log1p(-p))): the trials   |
|                                       | to the first success, u = 0 counted as one        |
| log_normal_(mean, std)                | exp(RandomNormal(mean, std))                      |
| rrelu (training; rrelu_with_noise)    | x r where x <= 0, r = RandomUniform(lower, upper) |
|                                       | (noise r, else 1); the gradient dx = dy noise     |
| multinomial, without replacement      | the k largest log p - log E, E = -log1p(-u) an    |
|                                       | exponential draw per category (torch's own        |
|                                       | exponential race): TopK's indices                 |
| multinomial, with replacement         | per sample, the count of cumsum(p) entries at or  |
|                                       | below u sum(p) (the inverse CDF), at most C - 1   |

The in-place forms draw into the tensor they are called on: a buffer or a parameter so
overwritten (`self.noise.exponential_()`) is drawn anew each step
(planner/importers/torch/convert.py).

A float result other than float32 is refused (the kernels draw float32).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import NodeCtx, Value, rule
from planner.ops.random import RANDOM_OPS
from planner.ops.refusals import INVALID_PROBABILITIES

# Kept whole by convert.decompose (torch decomposes bernoulli(p) into rand, lt and a cast).
RANDOM_PRESERVED = ("bernoulli.default",)



def _float_out(n: NodeCtx) -> tuple[int, ...]:
    if n.out_dtype != "float32":
        raise Unsupported(f"{n.op} (a {n.out_dtype} result; the planner draws float32)")
    return tuple(n.out_shape or ())


def _draw(n: NodeCtx, op: str, inputs: list, attrs: dict) -> str:
    return n.emit1(op, inputs, {"seed": n.next_dropout_seed(), **attrs})


@rule("aten.rand.default", "aten.rand_like.default")
def rand(n: NodeCtx) -> Value:
    return _draw(n, "RandomUniform", [], {"shape": list(_float_out(n))})


@rule("aten.uniform.default")
def uniform(n: NodeCtx) -> Value:
    low, high = float(n.arg(1, "from", 0.0)), float(n.arg(2, "to", 1.0))
    if not low <= high:
        raise n.fail(f"uniform_ needs from <= to, got [{low}, {high})")
    return _draw(n, "RandomUniform", [], {"shape": list(_float_out(n)), "low": low,
                                          "high": high})


@rule("aten.randn.default", "aten.randn_like.default")
def randn(n: NodeCtx) -> Value:
    return _draw(n, "RandomNormal", [], {"shape": list(_float_out(n))})


@rule("aten.normal.float_float", "aten.normal.Tensor_float", "aten.normal.float_Tensor",
      "aten.normal.Tensor_Tensor", "aten.normal_functional.default")
def normal(n: NodeCtx) -> Value:
    shape = _float_out(n)
    first = 1 if n.op == "aten.normal_functional.default" else 0
    mean, std = n.arg(first, "mean", 0.0), n.arg(first + 1, "std", 1.0)
    if isinstance(mean, (int, float)) and isinstance(std, (int, float)):
        if std < 0:
            raise n.fail(f"normal needs std >= 0, got {std}")
        return _draw(n, "RandomNormal", [], {"shape": list(shape), "mean": float(mean),
                                             "std": float(std)})
    z = _draw(n, "RandomNormal", [], {"shape": list(shape)})
    scaled = n.emit1("Mul", [z, _tensor(n, std)])
    return n.emit1("Add", [scaled, _tensor(n, mean)])


def _tensor(n: NodeCtx, v: object) -> str | Const:
    if isinstance(v, (str, Const)):
        return v
    if isinstance(v, (int, float)):
        return n.const(float(v), "float32")
    raise n.fail(f"expected a tensor or a number, got {type(v).__name__}")


@rule("aten.bernoulli.p")
def bernoulli_p(n: NodeCtx) -> Value:
    p = float(n.arg(1, "p", 0.5))
    if not 0.0 <= p <= 1.0:
        raise n.fail(f"bernoulli needs 0 <= p <= 1, got {p}")
    return _draw(n, "Bernoulli", [], {"shape": list(_float_out(n)), "p": p})


@rule("aten.bernoulli.default", "aten.bernoulli.Tensor")
def bernoulli(n: NodeCtx) -> Value:
    shape = _float_out(n)
    p = n.tensor(0) if n.op.endswith(".default") else n.tensor(1, "p")  # .Tensor: (self, p)
    if n.dtype(p) != "float32":
        raise Unsupported(f"{n.op} (probabilities of dtype {n.dtype(p)})")
    if n.shape(p) != shape:  # x.bernoulli_(p) with p broadcast to x
        p = n.emit1("Expand", [p], {"shape": list(shape)})
    return _draw(n, "Bernoulli", [p], {})


@rule("aten.randint.low", "aten.randint.default")
def randint(n: NodeCtx) -> Value:
    low, high = (int(n.arg(0, "low")), int(n.arg(1, "high"))) if n.op.endswith(".low") \
        else (0, int(n.arg(0, "high")))
    if n.out_dtype != "int64":
        raise Unsupported(f"{n.op} (a {n.out_dtype} result; the planner draws int64)")
    if not 0 < high - low < 2**32:
        raise n.fail(f"randint needs 0 < high - low < 2**32, got [{low}, {high})")
    return _draw(n, "RandomInt", [], {"shape": list(n.out_shape or ()), "low": low,
                                      "high": high})


@rule("aten.randperm.default")
def randperm(n: NodeCtx) -> Value:
    count = int(n.arg(0, "n"))
    if n.out_dtype != "int64":
        raise Unsupported(f"{n.op} (a {n.out_dtype} result; the planner draws int64)")
    if not 0 <= count < 2**32:
        raise n.fail(f"randperm needs 0 <= n < 2**32, got {count}")
    return _draw(n, "RandomPerm", [], {"n": count})


@rule("aten.randint_like.default", "aten.randint_like.low_dtype")
def randint_like(n: NodeCtx) -> Value:
    low, high = (0, int(n.arg(1, "high"))) if n.op.endswith(".default") else \
        (int(n.arg(1, "low")), int(n.arg(2, "high")))
    if not 0 < high - low < 2**32:
        raise n.fail(f"randint_like needs 0 < high - low < 2**32, got [{low}, {high})")
    if n.out_dtype not in ("int64", "float32"):
        raise Unsupported(f"{n.op} (a {n.out_dtype} result; the planner draws int64 or float32)")
    ints = _draw(n, "RandomInt", [], {"shape": list(n.out_shape or ()), "low": low,
                                      "high": high})
    return ints if n.out_dtype == "int64" else n.emit1("Cast", [ints], {"to": "float32"})


def _unit(n: NodeCtx) -> str:
    """u uniform in [0, 1) of the node's (float32) shape."""
    return _draw(n, "RandomUniform", [], {"shape": list(_float_out(n))})


def _scaled(n: NodeCtx, x: str, scale: float, shift: float = 0.0) -> str:
    if scale != 1.0:
        x = n.emit1("Mul", [x, n.const(scale, "float32")])
    return n.emit1("Add", [x, n.const(shift, "float32")]) if shift else x


@rule("aten.exponential.default")
def exponential(n: NodeCtx) -> Value:
    lambd = float(n.arg(1, "lambd", 1.0))
    if not lambd > 0:
        raise n.fail(f"exponential_ needs lambd > 0, got {lambd}")
    return _scaled(n, n.emit1("Log1p", [n.emit1("Neg", [_unit(n)])]), -1.0 / lambd)


# float32 below pi/2: tan's argument stays on the side it was drawn on
_HALF_PI_BELOW = float(np.nextafter(np.float32(math.pi / 2), np.float32(0)))


@rule("aten.cauchy.default")
def cauchy(n: NodeCtx) -> Value:
    median, sigma = float(n.arg(1, "median", 0.0)), float(n.arg(2, "sigma", 1.0))
    if not sigma > 0:
        raise n.fail(f"cauchy_ needs sigma > 0, got {sigma}")
    angle = n.emit1("Clip", [_scaled(n, _unit(n), math.pi, -math.pi / 2)],
                    {"min": -_HALF_PI_BELOW, "max": _HALF_PI_BELOW})
    return _scaled(n, n.emit1("Tan", [angle]), sigma, median)


@rule("aten.geometric.default")
def geometric(n: NodeCtx) -> Value:
    p = float(n.arg(1, "p"))
    if not 0 < p < 1:
        raise n.fail(f"geometric_ needs 0 < p < 1, got {p}")
    trials = n.emit1("Log1p", [n.emit1("Neg", [_unit(n)])])
    trials = n.emit1("Ceil", [_scaled(n, trials, 1.0 / math.log1p(-p))])
    return n.emit1("Max", [trials, n.const(1.0, "float32")])


@rule("aten.log_normal.default")
def log_normal(n: NodeCtx) -> Value:
    mean, std = float(n.arg(1, "mean", 1.0)), float(n.arg(2, "std", 2.0))
    if not std > 0:
        raise n.fail(f"log_normal_ needs std > 0, got {std}")
    return n.emit1("Exp", [_draw(n, "RandomNormal", [], {"shape": list(_float_out(n)),
                                                           "mean": mean, "std": std})])


@rule("aten.rrelu_with_noise_functional.default")
def rrelu(n: NodeCtx) -> Value:
    """(x, noise, lower, upper, training) -> (y, noise'): in training x r where x <= 0 with r
    drawn in [lower, upper) (noise' = r there, 1 elsewhere); in eval the leaky slope
    (lower + upper) / 2 and noise as it was."""
    x = n.tensor(0)
    lower, upper = float(n.arg(2, "lower", 1 / 8)), float(n.arg(3, "upper", 1 / 3))
    training = bool(n.arg(4, "training", False))
    if n.dtype(x) != "float32":
        raise Unsupported(f"{n.op} (of a {n.dtype(x)} tensor)")
    if not lower <= upper:
        raise n.fail(f"rrelu needs lower <= upper, got [{lower}, {upper}]")
    if not training:
        return n.emit1("LeakyRelu", [x], {"alpha": (lower + upper) / 2}), n.tensor(1)
    slope = _draw(n, "RandomUniform", [], {"shape": list(n.shape(x)), "low": lower,
                                           "high": upper})
    negative = n.emit1("LessOrEqual", [x, n.const(0.0, "float32")])
    noise = n.emit1("Where", [negative, slope, n.const(1.0, "float32")])
    return n.emit1("Mul", [x, noise]), noise


def fresh_draw(imp: Any, value: object) -> bool:
    """Is `value` made by random ops from constants alone (never from a parameter, a buffer or
    an input): a tensor drawn anew, whatever it held before?"""
    if not isinstance(value, (str, Const)):
        return False
    stack, seen, drawn = [value if isinstance(value, str) else value.name], set(), False
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        const = imp.consts.get(name)
        if const is not None:
            if const.origin == "initializer":
                return False
            continue
        node = imp.builder.producer(name)
        if node is None:
            return False
        drawn |= node.op in RANDOM_OPS
        stack.extend(node.inputs)
    return drawn


@rule("aten.multinomial.default")
def multinomial(n: NodeCtx) -> Value:
    p = n.tensor(0)
    samples, replace = int(n.arg(1, "num_samples")), bool(n.arg(2, "replacement", False))
    shape = n.shape(p)
    if n.dtype(p) != "float32" or len(shape) not in (1, 2) or not shape[-1]:
        raise Unsupported(f"{n.op} (of a {n.dtype(p)} {list(shape)} tensor)")
    if samples < 1 or (not replace and samples > shape[-1]):
        raise n.fail(f"num_samples {samples} must be in [1, {shape[-1]}] without replacement")
    axis = len(shape) - 1
    if isinstance(p, Const) and p.foldable:  # known now: refused now, as torch would
        _check_probabilities(n, np.asarray(p.value(), np.float64), axis)
    if not replace:
        u = _draw(n, "RandomUniform", [], {"shape": list(shape)})
        race = n.emit1("Max", [n.emit1("Neg", [n.emit1("Log1p", [n.emit1("Neg", [u])])]),
                               n.const(2.0**-30, "float32")])  # u = 0 would give log 0
        keys = n.emit1("Sub", [n.emit1("Log", [p]), n.emit1("Log", [race])])
        drawn = n.emit("TopK", [keys], {"k": samples, "axis": axis, "largest": True},
                       n_out=2)[1]
        return _refused_unless_valid(n, p, drawn, shape)
    rows = shape[:-1]
    cdf = n.emit1("CumSum", [p], {"axis": axis})
    total = n.emit1("Slice", [cdf], {"starts": [shape[-1] - 1], "ends": [shape[-1]],
                                     "axes": [axis]})
    u = _draw(n, "RandomUniform", [], {"shape": [*rows, samples]})
    target = n.emit1("Reshape", [n.emit1("Mul", [u, total])], {"shape": [*rows, samples, 1]})
    lines = n.emit1("Reshape", [cdf], {"shape": [*rows, 1, shape[-1]]})
    below = n.emit1("Cast", [n.emit1("LessOrEqual", [lines, target])], {"to": "float32"})
    count = n.emit1("ReduceSum", [below], {"axes": [axis + 1], "keepdims": False})
    count = n.emit1("Min", [count, n.const(float(shape[-1] - 1), "float32")])
    return _refused_unless_valid(n, p, n.emit1("Cast", [count], {"to": "int64"}), shape)


def _check_probabilities(n: NodeCtx, p: np.ndarray, axis: int) -> None:
    if not np.isfinite(p).all() or (p < 0).any():
        raise n.fail("probabilities hold inf, NaN or a negative value (torch refuses them)")
    if (p.sum(axis=axis) <= 0).any():
        raise n.fail("probabilities of a row sum to 0 (torch refuses them)")


def _refused_unless_valid(n: NodeCtx, p: Value, drawn: str, shape: tuple[int, ...]) -> str:
    """The draws, through a look-up that fails the step where a row of p is not a
    distribution (an element inf, NaN or negative, or a sum of 0), as torch.multinomial
    raises: the row's draws are moved past a table of one row per category, which the
    Embedding kernel (and the reference) refuse with an error naming the look-up
    `<node>/invalid_probabilities`. The table is zeros (a Fill of the step): a valid row's
    look-up adds 0 to its draws."""
    categories, axis = shape[-1], len(shape) - 1
    zero = n.const(0.0, "float32")
    ordinary = [n.emit1("Cast", [n.emit1(op, pair)], {"to": "float32"})
                for op, pair in (("LessOrEqual", [zero, p]),  # false for NaN and p < 0
                                 ("LessOrEqual", [p, n.const(np.finfo(np.float32).max,
                                                             "float32")]))]  # false for inf
    each = n.emit1("ReduceMin", [n.emit1("Mul", ordinary)], {"axes": [axis], "keepdims": True})
    total = n.emit1("ReduceSum", [p], {"axes": [axis], "keepdims": True})
    positive = n.emit1("Cast", [n.emit1("Less", [zero, total])], {"to": "float32"})
    bad = n.emit1("Sub", [n.const(1.0, "float32"), n.emit1("Mul", [each, positive])])
    past = n.emit1("Cast", [n.emit1("Mul", [bad, n.const(float(categories), "float32")])],
                   {"to": "int64"})  # 0 for a valid row, `categories` for one that is not
    ids = n.emit1("Add", [drawn, past])
    table = n.emit1("Fill", [], {"shape": [categories, 1], "value": 0.0, "dtype": "float32"})
    (looked,) = n.imp.builder.op_n("Embedding", [table, ids],
                                   name=f"{n.label}{INVALID_PROBABILITIES}")
    zeros = n.emit1("Cast", [n.emit1("Reshape", [looked], {"shape": list(n.shape(drawn))})],
                    {"to": "int64"})
    return n.emit1("Add", [drawn, zeros])
