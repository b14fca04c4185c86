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
| randperm                              | RandomPerm                                        |

A float result other than float32 is refused (the kernels draw float32).
"""

from __future__ import annotations

from planner.importers.onnx.errors import Unsupported
from planner.importers.onnx.values import Const
from planner.torch.context import NodeCtx, Value, rule

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
