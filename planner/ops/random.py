"""Random ops inside the training step, all drawn from Dropout's counter-based generator
(planner/ops/dropout.py), so that a step is a pure function of (seed, step, rank):

    draw(seed, step, rank, i) = splitmix64(step_seed(seed, step) * GOLDEN_GAMMA
                                           + rank * RANK_GAMMA + i)          (uint64, wrapping)

`seed` is the op's own (the torch front end numbers random ops and Dropouts 1, 2, ... in graph
order), `step` the training graph's `rng/step` counter (an optional last input, int64 scalar,
which make_training_graph adds as it does for Dropout; resuming from a checkpoint restores it,
so the stream continues), `rank` the data-parallel rank the executor runs as (0 alone, and in
the reference interpreter), and `i` the element's flat index. At rank 0 this is Dropout's
stream: Dropout keeps element i when (draw >> 11) * 2**-53 >= rate.

Each op turns the draw of element i into its value (k24 = draw >> 40, a 24-bit integer):

    RandomUniform  [(step)]      float32(low + float32(high - low) * k24 * 2**-24)  in [low, high)
    RandomNormal   [(step)]      float32(mean + std * sqrt(-2 log u1) cos(2 pi u2)), Box-Muller
                                 with u1 = (k24 + 1) * 2**-24 in (0, 1] and
                                 u2 = ((draw >> 16) & 0xFFFFFF) * 2**-24, in double
    Bernoulli      [(p), (step)] 1.0 where (draw >> 11) * 2**-53 < p else 0.0; p an attr, or a
                                 float tensor (then the output has p's shape and dtype)
    RandomInt      [(step)]      low + ((draw >> 32) * (high - low) >> 32), int64 in [low, high)
    RandomPerm     [(step)]      a permutation of 0..n-1 (int64): Fisher-Yates, position
                                 i = n-1 .. 1 swapped with j = (draw_i >> 32) * (i + 1) >> 32

Every value is computed with exact integer arithmetic, or with one rounding that every
implementation rounds alike (the uniform's product of a float32 and a 24-bit integer is exact
in double), so the CPU executor, the CUDA executor and the reference draw the same bits. The
normal's log and cos are the C library's on the CPU and in the reference (bit-equal on one
machine); CUDA's differ from them in the last double bit now and then, which changes the
float32 result with probability about 2**-28 per element. RandomInt's and RandomPerm's
multiply-shift maps a 32-bit draw to [0, m) with a bias of at most m / 2**32 (none for powers
of two); m must be below 2**32.

The ops have no gradient (torch's random ops have none either: a Bernoulli's p gets zero).

FLOPs per element: RandomUniform 2, RandomNormal 8 (log, sqrt, cos, multiplies), Bernoulli 1,
RandomInt 2, RandomPerm 2; the integer hash is not counted, as for Dropout.

Example:
    >>> from planner.ops import get_op
    >>> u = get_op("RandomUniform")
    >>> x = u.reference([], u.normalize_attrs({"shape": [4], "seed": 3}))[0]
    >>> x.dtype, bool(((0 <= x) & (x < 1)).all())
    (dtype('float32'), True)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import is_float
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    elementwise_flops,
    register,
)
from planner.ops.dropout import _MASK64, GOLDEN_GAMMA, splitmix64, step_seed

if TYPE_CHECKING:
    from planner.ir.graph import Node

# The rank's offset of the counter: another odd Weyl constant (2**64 / the plastic number), so
# ranks' streams start far apart in the generator's 2**64 counters.
RANK_GAMMA = 0xD1B54A32D192ED03

RANDOM_OPS = ("RandomUniform", "RandomNormal", "Bernoulli", "RandomInt", "RandomPerm")


def draws(seed: int, step: int, n: int, rank: int = 0) -> np.ndarray:
    """The generator's uint64 draws 0..n-1 for (seed, step, rank) (module docstring).

    >>> from planner.ops.dropout import dropout_mask
    >>> d = draws(seed=5, step=0, n=6)
    >>> keep = (d >> 11).astype(float) * 2.0**-53 >= 0.3
    >>> keep.tolist() == dropout_mask(5, 6, 0.3).tolist()
    True
    """
    base = (step_seed(seed, step) * GOLDEN_GAMMA + rank * RANK_GAMMA) & _MASK64
    return splitmix64(np.uint64(base) + np.arange(n, dtype=np.uint64))


def _step(xs: list[np.ndarray]) -> int:
    """The step counter: the last input when it is an int64 scalar, else 0."""
    return int(xs[-1]) if xs and xs[-1].dtype == np.int64 and xs[-1].shape == () else 0


def _k24(d: np.ndarray) -> np.ndarray:
    return (d >> np.uint64(40)).astype(np.float64)


def _uniform(xs: list[np.ndarray], a: Attrs, shape: tuple[int, ...]) -> np.ndarray:
    d = draws(a["seed"], _step(xs), math.prod(shape))
    low = np.float32(a["low"])
    span = np.float64(np.float32(a["high"]) - low)  # float32 arithmetic, as the kernels
    return (span * _k24(d) * 2.0**-24 + np.float64(low)).astype(np.float32).reshape(shape)


def _libm(f, x: np.ndarray) -> np.ndarray:
    """f (math.log, math.cos: the C library's, which the CPU kernel calls) element by element."""
    return np.fromiter(map(f, x.ravel().tolist()), dtype=np.float64, count=x.size)


def _normal(xs: list[np.ndarray], a: Attrs, shape: tuple[int, ...]) -> np.ndarray:
    d = draws(a["seed"], _step(xs), math.prod(shape))
    u1 = (_k24(d) + 1.0) * 2.0**-24
    u2 = ((d >> np.uint64(16)) & np.uint64(0xFFFFFF)).astype(np.float64) * 2.0**-24
    radius = np.sqrt(-2.0 * _libm(math.log, u1))
    z = radius * _libm(math.cos, 2.0 * math.pi * u2)
    return (a["mean"] + a["std"] * z).astype(np.float32).reshape(shape)


def _bernoulli(xs: list[np.ndarray], a: Attrs, shape: tuple[int, ...]) -> np.ndarray:
    d = draws(a["seed"], _step(xs), math.prod(shape))
    p = xs[0].astype(np.float64).ravel() if xs and xs[0].dtype.kind == "f" else a["p"]
    u = (d >> np.uint64(11)).astype(np.float64)
    dtype = xs[0].dtype if xs and xs[0].dtype.kind == "f" else np.float32
    return (u < np.asarray(p) * 2.0**53).astype(dtype).reshape(shape)


def _below(d: np.ndarray, m: np.ndarray | int) -> np.ndarray:
    """(d >> 32) * m >> 32: a 32-bit draw mapped to [0, m), m < 2**32 (exact in uint64)."""
    return ((d >> np.uint64(32)) * np.asarray(m, dtype=np.uint64)) >> np.uint64(32)


def _randint(xs: list[np.ndarray], a: Attrs, shape: tuple[int, ...]) -> np.ndarray:
    d = draws(a["seed"], _step(xs), math.prod(shape))
    k = _below(d, a["high"] - a["low"]).astype(np.int64)
    return (k + a["low"]).reshape(shape)


def _randperm(xs: list[np.ndarray], a: Attrs, shape: tuple[int, ...]) -> np.ndarray:
    n = shape[0]
    d = draws(a["seed"], _step(xs), n)
    picks = _below(d, np.arange(1, n + 1, dtype=np.uint64)).tolist()
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = picks[i]
        perm[i], perm[j] = perm[j], perm[i]
    return np.asarray(perm, dtype=np.int64)


def _check_inputs(op: str, ins: list[TensorType], takes_p: bool) -> TensorType | None:
    """The p tensor (Bernoulli) or None; OpError for inputs that are neither p nor the step."""
    rest = list(ins)
    if rest and rest[-1].dtype == "int64":
        if rest[-1].shape != ():
            raise OpError(f"{op}: step must be an int64 scalar, got {list(rest[-1].shape)}")
        rest.pop()
    if takes_p and rest and is_float(rest[0].dtype):
        return rest.pop(0) if len(rest) == 1 else _too_many(op, ins)
    if rest:
        _too_many(op, ins)
    return None


def _too_many(op: str, ins: list[TensorType]):
    want = "[(p), (step)]" if op == "Bernoulli" else "[] or [step]"
    raise OpError(f"{op} takes {want}, got {[f'{t.dtype} {list(t.shape)}' for t in ins]}")


def _shape_attr(op: str, a: Attrs) -> tuple[int, ...]:
    shape = tuple(a.get("shape") or ())
    if any(d < 0 for d in shape):
        raise OpError(f"{op}: shape {list(shape)} has a negative dimension")
    return shape


def _check_seed(op: str, a: Attrs) -> None:
    if not 0 <= a["seed"] <= _MASK64:
        raise OpError(f"{op}: seed must lie in [0, 2**64), got {a['seed']}")


def _infer_of(op: str):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        _check_seed(op, a)
        p = _check_inputs(op, ins, op == "Bernoulli")
        if op == "RandomPerm":
            if not 0 <= a["n"] < 2**32:
                raise OpError(f"RandomPerm: n must lie in [0, 2**32), got {a['n']}")
            return [TensorType((a["n"],), "int64")]
        shape = p.shape if p is not None else _shape_attr(op, a)
        if op == "RandomInt":
            if not 0 < a["high"] - a["low"] < 2**32:
                raise OpError(f"RandomInt: high - low must lie in [1, 2**32), got "
                              f"[{a['low']}, {a['high']})")
            return [TensorType(shape, "int64")]
        if op == "RandomNormal" and a["std"] < 0:
            raise OpError(f"RandomNormal: std must not be negative, got {a['std']}")
        if op == "Bernoulli" and p is None and not 0.0 <= a["p"] <= 1.0:
            raise OpError(f"Bernoulli: p must lie in [0, 1], got {a['p']}")
        return [TensorType(shape, p.dtype if p is not None else "float32")]
    return infer


def _reference_of(draw):
    def reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
        if xs and xs[0].dtype.kind == "f":  # Bernoulli's p
            shape = xs[0].shape
        elif "n" in a:
            shape = (a["n"],)
        else:
            shape = tuple(a.get("shape") or ())
        return [draw(xs, a, shape)]
    return reference


def _no_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    """A draw carries no gradient to its probabilities (torch's bernoulli gives p zero)."""
    return [None] * len(node.inputs)


_SEED = {"seed": Attr("int", 0)}
_SHAPE = {"shape": Attr("ints", [])}

_ROWS = (
    ("RandomUniform", _uniform, 2, {**_SHAPE, "low": Attr("float", 0.0),
                                    "high": Attr("float", 1.0)},
     "[(step)] -> float32 uniform in [low, high) of `shape`, as torch.rand / uniform_."),
    ("RandomNormal", _normal, 8, {**_SHAPE, "mean": Attr("float", 0.0),
                                  "std": Attr("float", 1.0)},
     "[(step)] -> float32 normal(mean, std) of `shape` (Box-Muller), as torch.randn / normal."),
    ("Bernoulli", _bernoulli, 1, {**_SHAPE, "p": Attr("float", 0.5)},
     "[(p), (step)] -> float32 1.0 with probability p (the attr, or the float32 tensor p), "
     "else 0.0, as torch.bernoulli."),
    ("RandomInt", _randint, 2, {**_SHAPE, "low": Attr("int", 0), "high": Attr("int", 2)},
     "[(step)] -> int64 uniform in [low, high) of `shape`, as torch.randint."),
    ("RandomPerm", _randperm, 2, {"n": Attr("int", required=True)},
     "[(step)] -> int64 random permutation of 0..n-1, as torch.randperm."),
)

for _name, _draw, _flops, _attrs, _doc in _ROWS:
    register(OpDef(
        name=_name, arity=None, min_inputs=0, cost_class="elementwise",
        attrs={**_SEED, **_attrs},
        infer=_infer_of(_name),
        flops=elementwise_flops(_flops),
        reference=_reference_of(_draw),
        # Only Bernoulli reads a float (p): the others never lie on a path from a param.
        gradient=_no_gradient if _name == "Bernoulli" else None,
        nondiff_inputs=(1,) if _name == "Bernoulli" else (0,),
        doc=_doc,
    ))
