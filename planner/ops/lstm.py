"""LSTMCell and LSTMCellGrad: the element-wise part of one LSTM step in one pass, between the
GEMMs (which stay MatMul nodes), as PyTorch's fused LSTM cell.

LSTMCell [gates (N, 4H), c_prev (N, H), recurrent? (N, 4H)] attr order ("ifgo") -> [h, c, acts]:
the pre-activations z = gates (+ recurrent: the step's h_prev x U when x x W of every step is
one GEMM) hold the input, forget, cell and output gates as four blocks of H columns in the
order `order` names them ("ifgo": PyTorch's; "iofg": ONNX's i, o, f, c), and

    i, f, o = sigmoid(z_i), sigmoid(z_f), sigmoid(z_o);   g = tanh(z_g)
    c = f * c_prev + i * g;   h = o * tanh(c)

acts (N, 4H) keeps i, f, g, o in z's layout: what the backward reads (with c_prev and c).

LSTMCellGrad [dh, dc, acts, c_prev, c, dh2?] attr order -> [dgates (N, 4H), dc_prev (N, H)],
with dh2 a second part of h's gradient summed into dh (planner/frontend/passes/lstm_grads.py folds
the two-way sum of an unrolled LSTM's h gradient, from the next step and from the output, here):

    dc' = dc + dh * o * (1 - tanh(c)^2)
    dz_i = dc' * g * i (1 - i);   dz_f = dc' * c_prev * f (1 - f)
    dz_g = dc' * i * (1 - g^2);   dz_o = dh * tanh(c) * o (1 - o);   dc_prev = dc' * f

dgates is the gradient of gates and of recurrent alike (they are summed).
FLOPs per hidden unit and row: LSTMCell 24 (three sigmoids at 4, two tanhs at 4, the state
update 4), LSTMCellGrad 20 (tanh 4, then 16 multiply-adds).

Example (z = 0: every sigmoid 1/2, g = 0, so c = c_prev / 2):
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> h, c, acts = get_op("LSTMCell").reference(
    ...     [np.zeros((1, 4)), np.array([[2.0]])], {"order": "ifgo"})
    >>> c, acts
    (array([[1.]]), array([[0.5, 0.5, 0. , 0.5]]))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.activation import _sigmoid
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

ATTRS = {"order": Attr("str", "ifgo")}


def gate_order(op: str, a: Attrs) -> str:
    """The attr `order`, checked: a permutation of "ifgo"."""
    order = a["order"]
    if sorted(order) != sorted("ifgo"):
        raise OpError(f"{op}: order must name the gates i, f, g, o once each, got {order!r}")
    return order


def _hidden(op: str, gates: TensorType, c: TensorType) -> int:
    require_float(op, gates, "gates")
    if gates.rank != 2 or gates.shape[1] % 4:
        raise OpError(f"{op}: gates must be (N, 4H), got {list(gates.shape)}")
    n, hidden = gates.shape[0], gates.shape[1] // 4
    if c != TensorType((n, hidden), gates.dtype):
        raise OpError(f"{op}: the cell state must be {gates.dtype} {[n, hidden]} (gates "
                      f"{list(gates.shape)}), got {c.dtype} {list(c.shape)}")
    return hidden


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    gate_order("LSTMCell", a)
    if len(ins) > 3:
        raise OpError(f"LSTMCell takes 2 or 3 inputs (gates, c_prev, recurrent), got {len(ins)}")
    gates, c, *rest = ins
    _hidden("LSTMCell", gates, c)
    if rest and rest[0] != gates:
        raise OpError(f"LSTMCell: recurrent must be {gates.dtype} {list(gates.shape)} like "
                      f"gates, got {rest[0].dtype} {list(rest[0].shape)}")
    return [c, c, gates]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    gate_order("LSTMCellGrad", a)
    if len(ins) > 6:
        raise OpError(f"LSTMCellGrad takes 5 or 6 inputs (dh, dc, acts, c_prev, c, dh2), got "
                      f"{len(ins)}")
    dh, dc, acts, c_prev, c, *dh2 = ins
    _hidden("LSTMCellGrad", acts, c_prev)
    for what, t in (("dh", dh), ("dc", dc), ("c", c), *(("dh2", t) for t in dh2)):
        if t != c_prev:
            raise OpError(f"LSTMCellGrad: {what} must be {c_prev.dtype} {list(c_prev.shape)} "
                          f"like c_prev, got {t.dtype} {list(t.shape)}")
    return [acts, c_prev]


def _blocks(z: np.ndarray, order: str) -> dict[str, np.ndarray]:
    return dict(zip(order, np.split(z, 4, axis=1), strict=True))


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    gates, c_prev, *rest = xs
    z = _blocks(gates + rest[0] if rest else gates, a["order"])
    act = {k: np.tanh(v) if k == "g" else _sigmoid(v) for k, v in z.items()}
    c = act["f"] * c_prev + act["i"] * act["g"]
    h = act["o"] * np.tanh(c)
    return [h, c, np.concatenate([act[k] for k in a["order"]], axis=1)]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dh, dc, acts, c_prev, c, *dh2 = xs
    dh = dh + dh2[0] if dh2 else dh
    i, f, g, o = (_blocks(acts, a["order"])[k] for k in "ifgo")
    tc = np.tanh(c)
    dct = dc + dh * o * (1 - tc * tc)
    dz = {"i": dct * g * i * (1 - i), "f": dct * c_prev * f * (1 - f),
          "g": dct * i * (1 - g * g), "o": dh * tc * o * (1 - o)}
    return [np.concatenate([dz[k] for k in a["order"]], axis=1), dct * f]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dh, dc, dacts = grads
    if dacts is not None:
        raise OpError("LSTMCell: no gradient rule for its acts output")
    inputs = list(node.inputs)
    wanted = [g.needs(t) for t in inputs]
    if (dh is None and dc is None) or not any(wanted):
        return [None] * len(inputs)
    h, c, acts = node.outputs
    state = g.type(c)
    zeros = {"shape": list(state.shape), "dtype": state.dtype}
    dh = dh if dh is not None else g.emit("Zeros", [], zeros)[0]
    dc = dc if dc is not None else g.emit("Zeros", [], zeros)[0]
    dgates, dc_prev = g.emit("LSTMCellGrad", [dh, dc, acts, inputs[1], c],
                             {"order": node.attrs.get("order", "ifgo")})
    out = [dgates, dc_prev, dgates][:len(inputs)]
    return [d if w else None for d, w in zip(out, wanted, strict=True)]


register(OpDef(
    name="LSTMCell", arity=None, min_inputs=2, attrs=ATTRS, cost_class="elementwise",
    infer=_infer,
    flops=lambda ins, outs, a: 24 * outs[0].size,
    reference=_reference,
    gradient=_gradient,
    doc="[gates, c_prev, recurrent?] -> [h, c, acts]: one LSTM step's gates (blocks in "
        "`order`), cell state and output in one pass; acts keeps the activated gates.",
))

register(OpDef(
    name="LSTMCellGrad", arity=None, min_inputs=5, attrs=ATTRS, cost_class="elementwise",
    infer=_grad_infer,
    flops=lambda ins, outs, a: 20 * outs[1].size,
    reference=_grad_reference,
    doc="Gradient of LSTMCell: [dh, dc, acts, c_prev, c, dh2?] -> [dgates, dc_prev] (dh2: "
        "summed into dh).",
))
