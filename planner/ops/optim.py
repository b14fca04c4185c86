"""Training-step ops: parameter updates (SGD, ApplyMomentum, ApplyAdam), the step counter
(Increment), the loss seed of the backward pass (Fill) and gradient accumulation over
micro-batches (AccumulateGrad).

An update op reads a persistent tensor and writes its next value; autodiff marks that output with
`updates=<persistent tensor>` (planner/ir/graph.py), so executors write it over the old bytes.
The learning rate `lr` and weight decay `wd` are the update's last two inputs, float32 scalars
the step reads (a parameter group's, planner/graph/optimizer.py), so a schedule changes them
between steps without a new plan. The formulas are PyTorch's (torch.optim.SGD with and without
momentum, torch.optim.Adam and AdamW), each computed in the parameter's dtype:

    SGD             g = grad + wd * p;  p' = p - lr * g
    ApplyMomentum   g = grad + wd * p;  v' = m * v + (1 - d) * g (v' = g on the first step,
                    t = 1);  p' = p - lr * (g + m * v' if nesterov else v')
    ApplyAdam       g = grad + wd * p (decoupled: g = grad, p = p * (1 - lr * wd), AdamW's);
                    m' = b1 * m + (1 - b1) * g;  v' = b2 * v + (1 - b2) * g^2
                    (amsgrad: v_max' = max(v_max, v'), read in place of v' below)
                    p' = p - lr / (1 - b1^t) * m' / (sqrt(v') / sqrt(1 - b2^t) + eps)

where t is the step count *after* this step's Increment (1 on the first step). Without
dampening (d = 0) ApplyMomentum needs no step count: v starts at zero, so the first step's
v' = g, as PyTorch's buffer cloned from the gradient; with dampening the step count is an
input after the velocity (torch.optim.SGD does not dampen the first step). With the optional
attribute `momentum_input` the momentum m (ApplyMomentum) or b1 (ApplyAdam) is no attribute
but a float32 scalar input just before lr, read each step as lr is (a scheduler's
cycle_momentum writes it): Adam's bias correction then takes this step's b1 to the power t,
as torch.optim.Adam's `1 - beta1 ** step` does. `maximize` is no
attribute: the training graph negates the gradient before the update, as torch.optim does
first (planner/frontend/autodiff.py).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> lr, wd = np.float32(0.1), np.float32(0.0)
    >>> get_op("SGD").reference([np.array([1.0, 2.0]), np.array([0.5, 0.5]), lr, wd], {})[0]
    array([0.95, 1.95])
"""

from __future__ import annotations

import numpy as np

from planner.dtypes import DTYPE_BYTES
from planner.ops.base import (
    Attr,
    Attrs,
    OpDef,
    OpError,
    Pointwise,
    TensorType,
    register,
    require_float,
)

# The hyperparameter inputs every update op ends with (planner.graph.optimizer.HYPERPARAMETERS).
HYPER_INPUTS: tuple[str, ...] = ("lr", "weight_decay")


def _check_like(op: str, param: TensorType, other: TensorType, what: str) -> None:
    if (other.shape, other.dtype) != (param.shape, param.dtype):
        raise OpError(f"{op}: {what} has shape {list(other.shape)} ({other.dtype}) but the param "
                      f"has shape {list(param.shape)} ({param.dtype})")


def _check_scalars(op: str, ins: list[TensorType], names: tuple[str, ...]) -> None:
    for t, what in zip(ins, names, strict=True):
        if t != TensorType((), "float32"):
            raise OpError(f"{op}: {what} must be a float32 scalar, got shape {list(t.shape)} "
                          f"({t.dtype})")


def _infer_update(op: str, parts):
    """Shape rule of an update whose `parts(attrs)` gives (slots, scalars): param, grad and
    every slot alike, then the float32 scalars and the hyperparameters; an output like param
    for the param and each slot."""

    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        slots, scalars = parts(a)
        want = 2 + len(slots) + len(scalars) + len(HYPER_INPUTS)
        if len(ins) != want:
            raise OpError(f"{op}: takes {want} inputs with these attributes (param, grad, "
                          f"{', '.join((*slots, *scalars, *HYPER_INPUTS))}), got {len(ins)}")
        param = ins[0]
        require_float(op, param, "param")
        tensors = 2 + len(slots)
        for t, what in zip(ins[1:tensors], ("grad", *slots), strict=True):
            _check_like(op, param, t, what)
        _check_scalars(op, ins[tensors:], (*scalars, *HYPER_INPUTS))
        return [param] * (1 + len(slots))

    return infer


def momentum_parts(a: Attrs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """ApplyMomentum's state slots and scalar inputs before lr and weight decay: the step
    count only with dampening, the momentum only with `momentum_input` (module docstring).

    >>> momentum_parts({"dampening": 0.5, "momentum_input": True})
    (('velocity',), ('step', 'momentum'))
    """
    return ("velocity",), (*(("step",) if a.get("dampening") else ()),
                           *(("momentum",) if a.get("momentum_input") else ()))


def adam_parts(a: Attrs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """ApplyAdam's state slots (amsgrad: the running maximum of v too) and its scalar inputs
    before lr and weight decay: the step count, and beta1 with `momentum_input`.

    >>> adam_parts({"amsgrad": True})
    (('m', 'v', 'v_max'), ('step',))
    """
    return (("m", "v", "v_max") if a.get("amsgrad") else ("m", "v"),
            ("step", "beta1") if a.get("momentum_input") else ("step",))


def _decayed(p: np.ndarray, g: np.ndarray, weight_decay: np.ndarray) -> np.ndarray:
    """PyTorch's coupled weight decay (L2): g + wd * p."""
    return g + p.dtype.type(weight_decay) * p if weight_decay != 0 else g


# Scalar formulas (generated kernels): weight decay only where it is non-zero, as the reference
# (0 * inf would be NaN); nesterov and decoupled arrive as 0 or 1.

def _decayed_pw(m, p, g, wd):
    return m.where(wd != 0, g + wd * p, g)


def _sgd_pw(m, xs, a):
    p, g, lr, wd = xs
    return [p - lr * _decayed_pw(m, p, g, wd)]


def _momentum_pw(m, xs, a):
    p, g, v, *read, lr, wd = xs
    mom = read[-1] if a.get("momentum_input") else a["momentum"]
    g = _decayed_pw(m, p, g, wd)
    v_next = mom * v + g
    step = m.where(a["nesterov"] != 0, g + mom * v_next, v_next)
    return [p - lr * step, v_next]


def _adam_pw(m, xs, a):
    p, g, mo, v, t, *read, lr, wd = xs
    b1, b2 = read[0] if a.get("momentum_input") else a["beta1"], a["beta2"]
    decoupled = a["decoupled"] != 0
    g = m.where(decoupled, g, _decayed_pw(m, p, g, wd))
    p = m.where(decoupled, p * (1.0 - lr * wd), p)
    m_next = b1 * mo + (1.0 - b1) * g
    v_next = b2 * v + (1.0 - b2) * g * g
    step_size = lr / (1.0 - m.pow(b1, t))
    denom = m.sqrt(v_next) / m.sqrt(1.0 - m.pow(b2, t)) + a["epsilon"]
    return [p - step_size * (m_next / denom), m_next, v_next]


# The state slots and scalar inputs of each update op, given its attributes.
UPDATE_PARTS = {"SGD": lambda a: ((), ()), "ApplyMomentum": momentum_parts,
                "ApplyAdam": adam_parts}


# ---- SGD --------------------------------------------------------------------------------------

def _sgd(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    p, g, lr, wd = xs
    return [p - p.dtype.type(lr) * _decayed(p, g, wd)]


register(OpDef(
    name="SGD", arity=4,
    infer=_infer_update("SGD", UPDATE_PARTS["SGD"]),
    # per element: multiply-add for the step, one more for weight decay
    flops=lambda ins, outs, a: ins[0].size * 4,
    reference=_sgd,
    pointwise=Pointwise(_sgd_pw, signatures=("float32,float32,float32,float32->float32",),
                        scalar_inputs=(2, 3)),
    doc="SGD [param, grad, lr, weight_decay] -> param_next = param - lr * (grad + weight_decay "
        "* param).",
))


# ---- Momentum ---------------------------------------------------------------------------------

def _momentum(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    p, g, v, *scalars, lr, wd = xs
    steps = scalars[:1] if a.get("dampening") else []
    f = p.dtype.type
    lr, d = f(lr), f(a.get("dampening") or 0.0)
    m = f(scalars[-1]) if a.get("momentum_input") else f(a["momentum"])
    g = _decayed(p, g, wd)
    if d != 0 and float(steps[0]) == 1:  # torch.optim.SGD's first buffer: the gradient itself
        v_next = g.copy()
    elif d != 0:
        v_next = m * v + (f(1) - d) * g
    else:
        v_next = m * v + g
    step = g + m * v_next if a["nesterov"] else v_next
    return [p - lr * step, v_next]


register(OpDef(
    name="ApplyMomentum", arity=None, min_inputs=5,
    attrs={"momentum": Attr("float", 0.9), "nesterov": Attr("bool", False),
           # optional: absent (0) leaves graphs made before it byte-identical
           "dampening": Attr("float", optional=True),
           # optional: the momentum is an input (module docstring), `momentum` unread
           "momentum_input": Attr("bool", optional=True)},
    infer=_infer_update("ApplyMomentum", momentum_parts),
    # per element: velocity and param multiply-adds, weight decay, Nesterov's look-ahead
    flops=lambda ins, outs, a: ins[0].size * (6 + (2 if a["nesterov"] else 0)),
    reference=_momentum,
    pointwise=Pointwise(
        _momentum_pw,
        signatures=("float32,float32,float32,float32,float32->float32,float32",),
        params=(("momentum", "float32", 0.9), ("nesterov", "float32", 0.0)),
        scalar_inputs=(3, 4)),
    # The CUDA kernel is generated from this formula: without dampening only (the step
    # count's input is not in its signature, so codegen.backends refuses a dampened node).
    doc="ApplyMomentum [param, grad, velocity, (step if dampening), (momentum if "
        "momentum_input), lr, weight_decay] -> "
        "[param_next, velocity_next], PyTorch's v = momentum * v + (1 - dampening) * g (v = g "
        "on step 1); param -= lr * v (or g + momentum * v with nesterov).",
))


# ---- Adam -------------------------------------------------------------------------------------

def _adam(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    read = 1 if a.get("momentum_input") else 0
    if a.get("amsgrad"):
        p, g, m, v, v_max, step, *beta1, lr, wd = xs
    else:
        p, g, m, v, step, *beta1, lr, wd = xs
    f = p.dtype.type
    lr, b2, eps = f(lr), f(a["beta2"]), f(a["epsilon"])
    b1 = f(beta1[0]) if read else f(a["beta1"])
    t = f(step)
    if a["decoupled"]:
        p = p * (f(1) - lr * f(wd))
    else:
        g = _decayed(p, g, wd)
    m_next = b1 * m + (f(1) - b1) * g
    v_next = b2 * v + (f(1) - b2) * g * g
    step_size = lr / (f(1) - b1 ** t)
    if a.get("amsgrad"):
        v_max_next = np.maximum(v_max, v_next)
        denom = np.sqrt(v_max_next) / np.sqrt(f(1) - b2 ** t) + eps
        return [p - step_size * (m_next / denom), m_next, v_next, v_max_next]
    denom = np.sqrt(v_next) / np.sqrt(f(1) - b2 ** t) + eps
    return [p - step_size * (m_next / denom), m_next, v_next]


register(OpDef(
    name="ApplyAdam", arity=None, min_inputs=7,
    attrs={"beta1": Attr("float", 0.9), "beta2": Attr("float", 0.999),
           "epsilon": Attr("float", 1e-8), "decoupled": Attr("bool", False),
           "amsgrad": Attr("bool", optional=True),
           # optional: beta1 is an input (module docstring), the attribute unread
           "momentum_input": Attr("bool", optional=True)},
    infer=_infer_update("ApplyAdam", adam_parts),
    # per element: 3 for m, 4 for v, sqrt, scale and epsilon (3), divide and update (3),
    # 2 for weight decay; amsgrad: the maximum and its read
    flops=lambda ins, outs, a: ins[0].size * (17 if a.get("amsgrad") else 15),
    reference=_adam,
    pointwise=Pointwise(
        _adam_pw,
        signatures=("float32,float32,float32,float32,float32,float32,float32"
                    "->float32,float32,float32",),
        params=(("beta1", "float32", 0.9), ("beta2", "float32", 0.999),
                ("epsilon", "float32", 1e-8), ("decoupled", "float32", 0.0)),
        scalar_inputs=(4, 5, 6)),
    # The CUDA kernel is generated from this formula: without amsgrad only (v_max is not in
    # its signature, so codegen.backends refuses an amsgrad node).
    doc="ApplyAdam [param, grad, m, v, (v_max if amsgrad), step, (beta1 if momentum_input), "
        "lr, weight_decay] -> "
        "[param_next, m_next, v_next, (v_max_next)], torch.optim.Adam (AdamW with "
        "`decoupled`; amsgrad: the running maximum of v in the denominator) with bias "
        "correction by the step count t (already incremented for this step).",
))


# ---- step counter and loss seed -----------------------------------------------------------------

def _infer_increment(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if ins[0].dtype == "int64":
        if a["by"] != int(a["by"]):
            raise OpError(f"Increment: an int64 counter needs a whole `by`, got {a['by']}")
    else:
        require_float("Increment", ins[0])
    return [ins[0]]


register(OpDef(
    name="Increment",
    recompute="never", arity=1,
    attrs={"by": Attr("float", 1.0)},
    infer=_infer_increment,
    flops=lambda ins, outs, a: outs[0].size,
    reference=lambda xs, a: [xs[0] + xs[0].dtype.type(a["by"])],
    pointwise=Pointwise(lambda m, xs, p: [xs[0] + m.cast(p["by"], m.out_dtypes[0])],
                        signatures=("float32->float32", "int64->int64"),
                        params=(("by", "float64", 1.0),)),
    doc="Increment [x] -> x + by; a step count (Adam's float32 one, the int64 dropout step), "
        "updated in place.",
))


def _infer_fill(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if a["dtype"] not in DTYPE_BYTES:
        raise OpError(f"Fill: unknown dtype {a['dtype']!r}; expected one of "
                      f"{sorted(DTYPE_BYTES)}")
    if any(d < 0 for d in a["shape"]):
        raise OpError(f"Fill: shape {a['shape']} has a negative dimension")
    return [TensorType(tuple(a["shape"]), a["dtype"])]


register(OpDef(
    name="Fill",
    recompute="never", arity=0,
    attrs={"shape": Attr("ints", required=True), "value": Attr("float", required=True),
           "dtype": Attr("str", "float32")},
    infer=_infer_fill,
    flops=lambda ins, outs, a: 0,
    reference=lambda xs, a: [np.full(tuple(a["shape"]), a["value"], dtype=a["dtype"])],
    pointwise=Pointwise(lambda m, xs, p: [m.cast(p["value"], m.out_dtypes[0])],
                        signatures=("->float32", "->int64"), params=(("value", "float64", 0.0),)),
    doc="Fill [] -> a tensor of `shape` holding `value`; seeds the backward pass with "
        "d loss / d loss = 1.",
))


# ---- AccumulateGrad ---------------------------------------------------------------------------

def _infer_accumulate(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    total, grad, micro_step = ins
    require_float("AccumulateGrad", grad, "gradient")
    if total != grad:
        raise OpError(f"AccumulateGrad: the sum {list(total.shape)} ({total.dtype}) is not like "
                      f"the gradient {list(grad.shape)} ({grad.dtype})")
    if micro_step != TensorType((), "int64"):
        raise OpError(f"AccumulateGrad: the micro-step count must be an int64 scalar, got "
                      f"shape {list(micro_step.shape)} ({micro_step.dtype})")
    if a["micro_batches"] < 2:
        raise OpError(f"AccumulateGrad: micro_batches must be >= 2, got {a['micro_batches']}")
    return [total]


def _accumulate(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    total, grad, micro_step = xs
    share = grad / grad.dtype.type(a["micro_batches"])
    # The first micro-batch of an optimizer step starts the sum: what the last step left in
    # it is never read.
    return [share if int(micro_step) % a["micro_batches"] == 0 else total + share]


register(OpDef(
    name="AccumulateGrad", arity=3, recompute="never",
    attrs={"micro_batches": Attr("int", required=True)},
    nondiff_inputs=(2,),
    infer=_infer_accumulate,
    flops=lambda ins, outs, a: 2 * outs[0].size,
    reference=_accumulate,
    cost_class="elementwise",
    doc="AccumulateGrad [sum, grad, micro_step] -> grad / K on the first of K micro-batches "
        "(micro_step % K == 0), else sum + grad / K: gradient accumulation "
        "(planner/ir/accumulation.py), written over the sum's bytes.",
))
