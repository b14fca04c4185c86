"""Rules for recurrent layers: LSTM and GRU, unrolled over their (static) sequence into
MatMul, LSTMCell (an LSTM step's gates and state in one op), Add, Split, Sigmoid, Tanh, Mul and
Concat, whose gradients the planner has.

Per direction d (forward, reverse, or both for bidirectional, outputs stacked as ONNX does):

    XW = X @ W[d]^T + Wb[d] (+ Rb[d] for LSTM)    one batched MatMul over all T steps
    for t in the direction's order:
        LSTM: H, C = LSTMCell(XW[t], C, H @ R[d]^T)          gate order i o f c, as ONNX:
              C = sigmoid(f) * C + sigmoid(i) * tanh(c~);  H = sigmoid(o) * tanh(C)
        GRU:  z, r, h~ from XW[t] and H @ R[d]^T + Rb[d]      gate order z r h
              linear_before_reset=1 (PyTorch's): h~ = tanh(xh + r * (H @ Rh^T + Rbh))
              linear_before_reset=0 (ONNX's default): h~ = tanh(xh + (r * H) @ Rh^T + Rbh)
              H = h~ + z * (H - h~)                 (= (1 - z) * h~ + z * H)

Missing initial states are zeros (a state tensor); initial states given as initializers are
state, not trained (convert.py), as PyTorch's are not parameters. The weight read at every
step gets one batched gradient (planner/frontend/passes/weight_grads.py). Not supported: peepholes,
non-default activations, clip, input_forget, and sequence_lens shorter than the sequence.
"""

from __future__ import annotations

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.onnx.context import NodeCtx, Value, rule
from planner.importers.onnx.errors import OnnxImportError

GATES = {"LSTM": 4, "GRU": 3}

# Longest unrolling (steps x directions): about 15 ops a cell, so a graph of ~60k ops at most;
# a sequence declared longer (a hostile or a streaming model) is refused, not unrolled.
MAX_STEPS = 4096
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


@rule("LSTM", "GRU")
def recurrent(n: NodeCtx) -> None:
    hidden = int(n.require_attr("hidden_size"))
    direction = n.attr("direction", "forward")
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): unknown direction "
                              f"{direction!r}")
    _check_supported(n, len(dirs))
    if len(n.shape(0)) != 3 or hidden <= 0:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): needs a rank-3 input and "
                              f"hidden_size > 0, got input shape {list(n.shape(0))} and "
                              f"hidden_size {hidden}")
    x = n.value(0)
    if n.attr("layout", 0):
        x = n.emit1("Transpose", [x], {"perm": [1, 0, 2]})  # (N, T, I) -> (T, N, I)
    steps, batch, _ = n.type_of(x).shape
    if steps * len(dirs) > MAX_STEPS:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): {steps} steps x {len(dirs)} "
                              f"direction(s) would unroll into more than {MAX_STEPS} cells")
    _check_lengths(n, steps, batch)
    ys, hs, cs = [], [], []
    for d, backwards in enumerate(dirs):
        y, h, c = _direction(n, x, d, backwards, hidden, steps, batch)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    # Y (T, D, N, H); Y_h and Y_c (D, N, H); layout=1: (N, T, D, H) and (N, D, H).
    _bind_stacked(n, 0, ys, axis=1, perm=[2, 0, 1, 3])
    _bind_stacked(n, 1, hs, axis=0, perm=[1, 0, 2])
    if n.op_type == "LSTM":
        _bind_stacked(n, 2, cs, axis=0, perm=[1, 0, 2])


def _check_supported(n: NodeCtx, num_dirs: int) -> None:
    op = n.op_type
    acts = n.attr("activations")
    if acts is not None and [a.lower() for a in acts] != \
            [a.lower() for a in DEFAULT_ACTIVATIONS[op]] * num_dirs:
        raise Unsupported(f"{op} (activations {list(acts)})")
    if n.attr("clip") is not None:
        raise Unsupported(f"{op} (clip)")
    if n.attr("input_forget", 0):
        raise Unsupported(f"{op} (input_forget)")
    if op == "LSTM" and n.has_input(7):
        raise Unsupported("LSTM (peepholes)")


def _check_lengths(n: NodeCtx, steps: int, batch: int) -> None:
    """sequence_lens (input 4) may only say every sequence is whole."""
    if not n.has_input(4):
        return
    lengths = n.const_array(4, "sequence_lens").reshape(-1)
    if lengths.shape != (batch,) or not (lengths == steps).all():
        raise Unsupported(f"{n.op_type} (sequence_lens shorter than the sequence)")


def _direction(n: NodeCtx, x: Value, d: int, backwards: bool, hidden: int, steps: int,
               batch: int) -> tuple[list[Value], Value, Value | None]:
    """One direction's outputs: per step H (N, H) in time order, the last H and (LSTM) C."""
    gates = GATES[n.op_type]
    lstm = n.op_type == "LSTM"
    w = _pick(n, n.value(1), d, [gates * hidden, -1])
    r = _pick(n, n.value(2), d, [gates * hidden, hidden])
    wb = rb = None
    if n.has_input(3):
        b = _pick(n, n.value(3), d, [2 * gates * hidden])
        wb, rb = n.emit("Split", [b], {"axis": 0, "sizes": [gates * hidden] * 2})
    xw = n.emit1("MatMul", [x, w], {"transpose_b": True})       # (T, N, gates * H)
    if wb is not None:
        xw = n.emit1("Add", [xw, n.emit1("Add", [wb, rb]) if lstm else wb])
    h = _initial(n, 5, d, batch, hidden)
    c = _initial(n, 6, d, batch, hidden) if lstm else None
    outs: dict[int, Value] = {}
    for t in (reversed(range(steps)) if backwards else range(steps)):
        xt = n.emit1("Reshape", [n.emit1("Slice", [xw], {"starts": [t], "ends": [t + 1],
                                                         "axes": [0]})],
                     {"shape": [batch, gates * hidden]})
        if lstm:
            h, c = _lstm_step(n, xt, h, c, r)
        else:
            h = _gru_step(n, xt, h, r, rb, hidden)
        outs[t] = h
    return [outs[t] for t in range(steps)], h, c


def _lstm_step(n: NodeCtx, xt: Value, h: Value, c: Value, r: Value) -> tuple[Value, Value]:
    h, c, _ = n.emit("LSTMCell", [xt, c, n.emit1("MatMul", [h, r], {"transpose_b": True})],
                     {"order": "iofg"})
    return h, c


def _gru_step(n: NodeCtx, xt: Value, h: Value, r: Value, rb: Value | None,
              hidden: int) -> Value:
    xz, xr, xh = n.emit("Split", [xt], {"axis": 1, "sizes": [hidden] * 3})
    before_reset = bool(n.attr("linear_before_reset", 0))
    rzr, rh = n.emit("Split", [r], {"axis": 0, "sizes": [2 * hidden, hidden]})
    hzr = n.emit1("MatMul", [h, rzr], {"transpose_b": True})
    rbh = None
    if rb is not None:
        rbzr, rbh = n.emit("Split", [rb], {"axis": 0, "sizes": [2 * hidden, hidden]})
        hzr = n.emit1("Add", [hzr, rbzr])
    hz, hr = n.emit("Split", [hzr], {"axis": 1, "sizes": [hidden] * 2})
    z = n.emit1("Sigmoid", [n.emit1("Add", [xz, hz])])
    reset = n.emit1("Sigmoid", [n.emit1("Add", [xr, hr])])
    if before_reset:
        hh = n.emit1("MatMul", [h, rh], {"transpose_b": True})
        hh = n.emit1("Mul", [reset, hh if rbh is None else n.emit1("Add", [hh, rbh])])
    else:
        hh = n.emit1("MatMul", [n.emit1("Mul", [reset, h]), rh], {"transpose_b": True})
        hh = hh if rbh is None else n.emit1("Add", [hh, rbh])
    cand = n.emit1("Tanh", [n.emit1("Add", [xh, hh])])
    return n.emit1("Add", [cand, n.emit1("Mul", [z, n.emit1("Sub", [h, cand])])])


def _pick(n: NodeCtx, v: Value, d: int, shape: list[int]) -> Value:
    """Direction d of a (D, ...) weight, reshaped to `shape`."""
    full = n.type_of(v).shape
    if not full or d >= full[0]:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): weight of shape {list(full)} "
                              f"has no direction {d}")
    one = v if full[0] == 1 else n.emit1("Slice", [v], {"starts": [d], "ends": [d + 1],
                                                        "axes": [0]})
    if shape[-1] == -1:
        shape = [*shape[:-1], full[-1]]
    return n.emit1("Reshape", [one], {"shape": shape})


def _initial(n: NodeCtx, k: int, d: int, batch: int, hidden: int) -> Value:
    """Initial H or C of direction d: input k (D, N, H; layout=1: N, D, H), or zeros."""
    if not n.has_input(k):
        return Const.of(n.imp.fresh(f"{n.label}/initial_{k}"),
                        np.zeros((batch, hidden), dtype=n.type(0).dtype), origin="constant")
    v = n.value(k)
    if n.attr("layout", 0):
        v = n.emit1("Transpose", [v], {"perm": [1, 0, 2]})
    return _pick(n, v, d, [batch, hidden])


def _bind_stacked(n: NodeCtx, k: int, parts: list[Value | None], axis: int,
                  perm: list[int]) -> None:
    """Output k: the parts (one per direction for Y_h / Y_c; per direction a list of steps for
    Y) stacked on `axis`, transposed by `perm` for layout=1; only when some node reads it."""
    name = n.output(k)
    if name is None or name not in n.imp.used:
        return
    batch_first = bool(n.attr("layout", 0))
    if k == 0:
        # Y: per direction, steps (N, H) -> (T, 1, N, H); directions on axis 1.
        parts = [_stack(n, [n.emit1("Reshape", [h], {"shape": [1, 1, *n.type_of(h).shape]})
                            for h in steps], 0) for steps in parts]
    else:
        parts = [n.emit1("Reshape", [h], {"shape": [1, *n.type_of(h).shape]}) for h in parts]
    y = _stack(n, parts, axis)
    if batch_first:
        y = n.emit1("Transpose", [y], {"perm": perm})
    n.bind(k, y)


def _stack(n: NodeCtx, parts: list[Value], axis: int) -> Value:
    return parts[0] if len(parts) == 1 else n.emit1("Concat", parts, {"axis": axis})
