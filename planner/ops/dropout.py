"""Dropout with a counter-based mask, and its gradient, which recomputes the mask.

The mask is a pure function of (seed, flat element index), so the C++ and CUDA executors
reproduce it bit for bit and the backward pass recomputes it instead of storing it:

    u    = splitmix64(seed * 0x9E3779B97F4A7C15 + index)      (uint64, wrapping)
    keep = (u >> 11) * 2**-53 >= rate                         (a double in [0, 1))
    y    = x * keep / (1 - rate)                              (in x's dtype)

`splitmix64(s)` is the first output of Vigna's SplitMix64 generator whose state is s, i.e. the
mixing function applied to s + 0x9E3779B97F4A7C15 (see `splitmix64`). Hence the mask bit for
(seed, index 0) is SplitMix64's published output number `seed` from state 0, which the tests
check. In C:

    uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    bool keep = (double)(z >> 11) * 0x1.0p-53 >= rate;
    y = x * (T)keep / (T)(1.0 - rate);          // T = float for float32 tensors

A fresh mask every training step: the optional second input `step` (an int64 scalar, the
training graph's `rng/step` counter, planner/frontend/autodiff.py) moves the seed to

    seed_t = seed + step * 2**32 + step_key(step >> 32)   (mod 2**64)

so step 0, or no step input, gives the mask above, and nodes whose seeds differ (below 2**32)
never share a mask at any step. DropoutGrad reads the same step as its Dropout. The random ops
(planner/ops/random.py) draw from this same stream, keyed by their own seeds; data-parallel
rank k draws its rank-k stream (`draws(seed, step, n, rank=k)`), so ranks drop independent
elements; the formulas above are rank 0's, which the reference interpreter runs as.

Example:
    >>> dropout_mask(seed=0, n=8, rate=0.5).astype(int).tolist()
    [1, 1, 1, 0, 0, 0, 1, 0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    Pointwise,
    TensorType,
    elementwise_flops,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment, 2**64 / golden ratio, odd
_MASK64 = (1 << 64) - 1


def splitmix64(state: np.ndarray | int) -> np.ndarray:
    """SplitMix64's next output from `state` (uint64, elementwise, wrapping arithmetic).

    z = state + GOLDEN_GAMMA; z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9;
    z = (z ^ z >> 27) * 0x94D049BB133111EB; return z ^ z >> 31.

    >>> hex(int(splitmix64(0)))     # the published first output of SplitMix64 seeded with 0
    '0xe220a8397b1dcdaf'
    """
    shape = np.shape(state)
    # At least 1-D: numpy wraps uint64 array arithmetic silently but warns on 0-d scalars.
    z = np.array(state, dtype=np.uint64, ndmin=1) + np.uint64(GOLDEN_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))).reshape(shape)


def dropout_mask(seed: int, n: int, rate: float) -> np.ndarray:
    """Keep mask (bool, shape (n,)) for flat indices 0..n-1: keep iff (u >> 11) * 2**-53 >= rate,
    u = splitmix64(seed * GOLDEN_GAMMA + index). A fraction close to 1 - rate is kept.

    >>> bool(dropout_mask(7, 1000, 0.0).all()), int(dropout_mask(7, 1000, 0.3).sum())
    (True, 705)
    """
    if not 0 <= seed <= _MASK64:
        raise ValueError(f"dropout seed must lie in [0, 2**64), got {seed}")
    base = np.uint64((seed * GOLDEN_GAMMA) & _MASK64)
    u = splitmix64(base + np.arange(n, dtype=np.uint64))
    # The top 53 bits as a double in [0, 1): exact, as a C cast of a 53-bit integer is.
    return (u >> np.uint64(11)).astype(np.float64) * 2.0**-53 >= rate


STEP_STRIDE = 1 << 32  # seed_t = seed + step * STEP_STRIDE: per-node seeds stay apart
MIX_ZERO = 0xE220A8397B1DCDAF  # splitmix64(0)


def step_key(high: int) -> int:
    """What a step's high 32 bits add to its seed: splitmix64(high) - splitmix64(0), 0 for
    steps below 2**32 (their seeds as they always were) and distinct for every high half
    (splitmix64 is a bijection), so step 2**32 + k does not repeat step k's draws.

    >>> step_key(0), step_key(1) != 0
    (0, True)
    """
    return (int(splitmix64(high)) - MIX_ZERO) & _MASK64


def step_seed(seed: int, step: int) -> int:
    """The seed of the mask at training step `step` (mod 2**64): seed + step * 2**32 plus
    step_key of its high half (the low half's multiple alone would repeat every 2**32 steps).

    >>> step_seed(7, 0), step_seed(7, 1) == 7 + 2**32, step_seed(7, 2**32) != step_seed(7, 0)
    (7, True, True)
    """
    step &= _MASK64
    return (seed + step * STEP_STRIDE + step_key(step >> 32)) & _MASK64


def _apply_mask(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    v = xs[0]
    step = int(xs[1]) if len(xs) > 1 else 0
    keep = dropout_mask(step_seed(a["seed"], step), v.size, a["rate"]).reshape(v.shape)
    return [v * keep.astype(v.dtype) / v.dtype.type(1.0 - a["rate"])]


def _check_attrs(op: str, a: Attrs) -> None:
    if not 0.0 <= a["rate"] < 1.0:
        raise OpError(f"{op}: rate must lie in [0, 1), got {a['rate']}")
    if not 0 <= a["seed"] <= _MASK64:
        raise OpError(f"{op}: seed must lie in [0, 2**64), got {a['seed']}")


def _infer(op: str):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        _check_attrs(op, a)
        if len(ins) > 2:
            raise OpError(f"{op} takes 1 or 2 inputs ([x] or [x, step]), got {len(ins)}")
        require_float(op, ins[0], "input" if op == "Dropout" else "dy")
        if len(ins) == 2 and (ins[1].dtype != "int64" or ins[1].shape != ()):
            raise OpError(f"{op}: step must be an int64 scalar, got {list(ins[1].shape)} "
                          f"{ins[1].dtype}")
        return [ins[0]]
    return infer


def _dropout_gradient(g: GradBuilder, node: Node,
                      grad_outputs: list[str | None]) -> list[str | None]:
    x, dy = node.inputs[0], grad_outputs[0]
    if dy is None or not g.needs(x):
        return [None] * len(node.inputs)
    dx = g.emit("DropoutGrad", [dy, *node.inputs[1:]],
                {"rate": node.attrs["rate"], "seed": node.attrs["seed"]})
    return [*dx, *[None] * (len(node.inputs) - 1)]


_ATTRS = {"rate": Attr("float", 0.5), "seed": Attr("int", 0)}


def _mask_pointwise(m, xs, p):
    """The scalar formula: the step is read from its tensor (element 0) inside the kernel."""
    x = xs[0]
    step = m.cast(xs[1], "uint64") if len(xs) > 1 else m.u64(0)
    # step_key(step >> 32): splitmix64 of the high half, less splitmix64(0)
    k = (step >> m.u64(32)) + m.u64(GOLDEN_GAMMA)
    k = (k ^ (k >> m.u64(30))) * m.u64(0xBF58476D1CE4E5B9)
    k = (k ^ (k >> m.u64(27))) * m.u64(0x94D049BB133111EB)
    key = (k ^ (k >> m.u64(31))) - m.u64(MIX_ZERO)
    z = ((p["seed"] + (step << m.u64(32)) + key) * m.u64(GOLDEN_GAMMA)
         + m.cast(m.index, "uint64") + m.u64(GOLDEN_GAMMA))
    z = (z ^ (z >> m.u64(30))) * m.u64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> m.u64(27))) * m.u64(0x94D049BB133111EB)
    z = z ^ (z >> m.u64(31))
    # (u >> 11) * 2**-53 >= rate, scaled by 2**53 (exact): keep
    keep = m.cast(z >> m.u64(11), "float64") >= p["rate"] * 2.0**53
    return [x * m.where(keep, 1.0, 0.0) / m.cast(1.0 - p["rate"], "float32")]


_POINTWISE = Pointwise(_mask_pointwise, signatures=("float32->float32", "float32,int64->float32"),
                       params=(("rate", "float64", 0.5), ("seed", "uint64", 0)),
                       scalar_inputs=(1,))

register(OpDef(
    name="Dropout",
    cost_class="elementwise", arity=None,
    attrs=_ATTRS,
    infer=_infer("Dropout"),
    # Per element: the multiply by the mask and the division by (1 - rate); the integer hash
    # that makes the mask is not counted.
    flops=elementwise_flops(2),
    reference=_apply_mask,
    gradient=_dropout_gradient,
    pointwise=_POINTWISE,
    nondiff_inputs=(1,),
    evaluation_identity=True,
    doc="[x] or [x, step] -> x * mask / (1 - rate), the counter-based mask of (seed at step, "
        "flat index).",
))

register(OpDef(
    name="DropoutGrad",
    cost_class="elementwise", arity=None,
    attrs=_ATTRS,
    infer=_infer("DropoutGrad"),
    flops=elementwise_flops(2),
    reference=_apply_mask,
    pointwise=_POINTWISE,
    nondiff_inputs=(1,),
    doc="[dy] or [dy, step] -> dy * mask / (1 - rate), recomputing Dropout's mask from the "
        "same rate, seed and step.",
))
