"""Dynamic loss scaling (fp16-mixed training), as ops inside the step: torch.amp.GradScaler's
rule with no host round trip.

    UnscaleGrads [g1 .. gn, scale]     -> [g1 / scale .. gn / scale, found_inf]
    UpdateLossScale [scale, clean, found_inf] -> [scale', clean']
    SkipOnOverflow [found_inf, next, old] -> old where found_inf else next

found_inf is a float32 scalar, 1 when any gradient element is infinite or NaN, else 0.
UnscaleGrads multiplies by the float32 reciprocal of the scale, as GradScaler.unscale_ does
(exact for the powers of two the scale takes). UpdateLossScale is torch._amp_update_scale_:
on overflow the scale is multiplied by backoff_factor and the clean-step count reset; else the
count grows, and when it reaches growth_interval the scale is multiplied by growth_factor
(kept only if finite) and the count reset. SkipOnOverflow writes a state tensor's next value
over its old bytes, or leaves the old value, so an overflowing step changes no parameter and
no optimizer state (GradScaler.step skips optimizer.step()).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> one = np.float32
    >>> get_op("UnscaleGrads").reference([np.array([2.0, np.inf], one), one(4.0)], {})[1]
    array(1., dtype=float32)
    >>> get_op("UpdateLossScale").reference([one(8.0), one(2.0), one(0.0)],
    ...     {"growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3})
    [array(16., dtype=float32), array(0., dtype=float32)]
"""

from __future__ import annotations

import numpy as np

from planner.ops.base import Attr, Attrs, OpDef, OpError, TensorType, register, require_float

_SCALAR = TensorType((), "float32")


def _require_scalar(op: str, t: TensorType, what: str) -> None:
    if t != _SCALAR:
        raise OpError(f"{op}: {what} must be a float32 scalar, got shape {list(t.shape)} "
                      f"({t.dtype})")


# ---- UnscaleGrads -----------------------------------------------------------------------------

def _infer_unscale(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    *grads, scale = ins
    _require_scalar("UnscaleGrads", scale, "scale (the last input)")
    for k, g in enumerate(grads):
        if g.dtype != "float32":
            raise OpError(f"UnscaleGrads: gradient {k} must be float32, got {g.dtype}")
    return [*grads, _SCALAR]


def _unscale(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    *grads, scale = xs
    inv = np.float32(1.0 / np.float64(scale))   # GradScaler: scale.double().reciprocal().float()
    found = any(not np.isfinite(g).all() for g in grads)
    return [*(g * inv for g in grads), np.array(1.0 if found else 0.0, np.float32)]


register(OpDef(
    name="UnscaleGrads", arity=None, min_inputs=2, recompute="never",
    # g_k / scale over g_k's bytes: the step holds each gradient once (GradScaler's in-place
    # unscale_); the kernels read every element before writing it.
    in_place=lambda n: range(n - 1),
    infer=_infer_unscale,
    flops=lambda ins, outs, a: 2 * sum(t.size for t in ins[:-1]),   # a test and a multiply
    reference=_unscale,
    cost_class="elementwise",
    doc="UnscaleGrads [g1 .. gn, scale] -> [g1 / scale .. gn / scale, found_inf]: "
        "GradScaler.unscale_, found_inf 1 when any element is inf or NaN.",
))


# ---- UpdateLossScale --------------------------------------------------------------------------

def _infer_update_scale(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    for t, what in zip(ins, ("scale", "clean-step count", "found_inf"), strict=True):
        _require_scalar("UpdateLossScale", t, what)
    if a["growth_interval"] < 1:
        raise OpError(f"UpdateLossScale: growth_interval must be >= 1, got "
                      f"{a['growth_interval']}")
    return [_SCALAR, _SCALAR]


def _update_scale(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    scale, clean, found = (np.float32(x) for x in xs)
    f = np.float32
    if found:
        return [np.array(scale * f(a["backoff_factor"])), np.array(f(0))]
    clean = clean + f(1)
    if clean == f(a["growth_interval"]):
        grown = scale * f(a["growth_factor"])
        return [np.array(grown if np.isfinite(grown) else scale), np.array(f(0))]
    return [np.array(scale), np.array(clean)]


register(OpDef(
    name="UpdateLossScale", arity=3, recompute="never",
    attrs={"growth_factor": Attr("float", 2.0), "backoff_factor": Attr("float", 0.5),
           "growth_interval": Attr("int", 2000)},
    infer=_infer_update_scale,
    flops=lambda ins, outs, a: 3,
    reference=_update_scale,
    cost_class="elementwise",
    doc="UpdateLossScale [scale, clean, found_inf] -> [scale', clean']: "
        "torch._amp_update_scale_ (halve on overflow, grow after growth_interval clean steps).",
))


# ---- SkipOnOverflow ---------------------------------------------------------------------------

def _infer_skip(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    found, nxt, old = ins
    _require_scalar("SkipOnOverflow", found, "found_inf")
    require_float("SkipOnOverflow", old, "old value")
    if nxt != old:
        raise OpError(f"SkipOnOverflow: next value {list(nxt.shape)} ({nxt.dtype}) is not "
                      f"like the old value {list(old.shape)} ({old.dtype})")
    return [old]


register(OpDef(
    name="SkipOnOverflow", arity=3, recompute="never",
    infer=_infer_skip,
    flops=lambda ins, outs, a: 0,
    reference=lambda xs, a: [xs[2].copy() if xs[0] else xs[1]],
    cost_class="data-movement",
    doc="SkipOnOverflow [found_inf, next, old] -> old where found_inf else next: a state "
        "update that an overflowing fp16 step skips.",
))
