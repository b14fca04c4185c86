"""ClipGradNorm: torch.nn.utils.clip_grad_norm_ over a training step's gradients, a planned op
of the update phase (gradient of nothing):

    ClipGradNorm [g1 .. gn] -> [g1 * c .. gn * c, total_norm]

    total_norm = || (||g1||, .., ||gn||) ||     (2-norms; each summed in float64, rounded to
                                                 the gradients' float32 as PyTorch's norms)
    c          = min(max_norm / (total_norm + 1e-6), 1)      (PyTorch's eps and clamp)

A global-norm reduction then a scale: one op, since the scale of every gradient waits for the
norm of all of them. Its outputs may take the gradients' bytes (each element read before it
is written), as PyTorch scales in place.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> g = get_op("ClipGradNorm").reference([np.array([3.0, 4.0], np.float32)],
    ...                                      {"max_norm": 1.0})
    >>> [round(float(v), 6) for v in g[0]], float(g[1])
    ([0.6, 0.8], 5.0)
"""

from __future__ import annotations

import numpy as np

from planner.ops.base import Attr, Attrs, OpDef, OpError, TensorType, register

# clip_grad_norm_'s guard against a zero norm.
EPS = 1e-6


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if not a["max_norm"] > 0:
        raise OpError(f"ClipGradNorm: max_norm must be > 0, got {a['max_norm']}")
    for k, g in enumerate(ins):
        if g.dtype != ins[0].dtype or g.dtype not in ("float32", "float64"):
            raise OpError(f"ClipGradNorm: gradient {k} is {g.dtype}; every gradient must be "
                          f"float32 (float64 in a reference graph), as gradient 0")
    return [*ins, TensorType((), ins[0].dtype)]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    f = xs[0].dtype.type
    norms = [f(np.sqrt(np.sum(np.square(g, dtype=np.float64)))) for g in xs]
    total = f(np.sqrt(np.sum(np.square(np.array(norms, np.float64)))))
    coef = min(f(a["max_norm"]) / (total + f(EPS)), f(1.0))
    return [*(g * coef for g in xs), np.array(total, xs[0].dtype)]


register(OpDef(
    name="ClipGradNorm", arity=None, min_inputs=1, recompute="never",
    attrs={"max_norm": Attr("float", required=True)},
    in_place=lambda n: range(n),
    infer=_infer,
    flops=lambda ins, outs, a: 3 * sum(t.size for t in ins),  # square-add, then a multiply
    # every gradient read twice (the norm, the scale) and written once
    bytes_moved=lambda ins, outs, a: 3 * sum(t.nbytes for t in ins) + 4,
    reference=_reference,
    cost_class="reduction",
    doc="ClipGradNorm [g1 .. gn] -> [g1 * c .. gn * c, total_norm]: "
        "torch.nn.utils.clip_grad_norm_, c = min(max_norm / (total_norm + 1e-6), 1).",
))
