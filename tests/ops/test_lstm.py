"""LSTMCell: the reference against PyTorch's nn.LSTMCell (both gate orders), the gradient rule
against finite differences and torch autograd (h's and c's gradients, alone and together), two
steps whose h-gradient sum the cell's gradient takes (planner/frontend/passes/lstm_grads.py), and
the shape and attribute errors. The CPU kernels: tests/codegen/test_op_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import gradients
from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import run
from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients

torch = pytest.importorskip("torch")

BATCH, INPUT, HIDDEN = 3, 5, 4


def _reorder(z: np.ndarray, order: str) -> np.ndarray:
    """PyTorch's i, f, g, o gate blocks of z in `order`."""
    blocks = dict(zip("ifgo", np.split(z, 4, axis=1), strict=True))
    return np.concatenate([blocks[k] for k in order], axis=1)


@pytest.mark.parametrize("order", ["ifgo", "iofg"])
def test_reference_matches_nn_lstm_cell(order):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(INPUT, HIDDEN)
    x, h, c = (rng.standard_normal(s).astype(np.float32)
               for s in ((BATCH, INPUT), (BATCH, HIDDEN), (BATCH, HIDDEN)))
    with torch.no_grad():
        want_h, want_c = (t.numpy() for t in cell(torch.tensor(x), (torch.tensor(h),
                                                                    torch.tensor(c))))
        w_ih, w_hh, b_ih, b_hh = (p.numpy() for p in (cell.weight_ih, cell.weight_hh,
                                                      cell.bias_ih, cell.bias_hh))
    # gates from the input, the recurrent part from h: LSTMCell sums them
    gates, rec = x @ w_ih.T + b_ih, h @ w_hh.T + b_hh
    got_h, got_c, acts = reference("LSTMCell", [_reorder(gates, order), c, _reorder(rec, order)],
                                   {"order": order})
    assert got_h.dtype == np.float32 and got_h.shape == (BATCH, HIDDEN)
    # A GEMM of 9 terms and a few activations of values of order 1, in another summation
    # order than PyTorch's: some ulps.
    np.testing.assert_allclose(got_h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-6)
    z = _reorder(gates + rec, order)
    blocks = dict(zip(order, np.split(z, 4, axis=1), strict=True))
    want_acts = np.concatenate([np.tanh(b) if k == "g" else 1 / (1 + np.exp(-b))
                                for k, b in blocks.items()], axis=1)
    np.testing.assert_allclose(acts, want_acts, rtol=1e-6, atol=1e-7)


def _inputs(recurrent: bool, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((BATCH, 4 * HIDDEN)), rng.standard_normal((BATCH, HIDDEN))]
    return xs + [rng.standard_normal((BATCH, 4 * HIDDEN))] if recurrent else xs


def _torch_cell(order: str):
    def fn(gates, c, rec=None):
        z = gates if rec is None else gates + rec
        blocks = dict(zip(order, torch.split(z, HIDDEN, 1), strict=True))
        i, f, o = (torch.sigmoid(blocks[k]) for k in "ifo")
        c = f * c + i * torch.tanh(blocks["g"])
        return [o * torch.tanh(c), c]
    return fn


@pytest.mark.parametrize("of", [[0, 1], [0], [1]])
@pytest.mark.parametrize("order,recurrent", [("ifgo", False), ("iofg", True)])
def test_gradient_matches_finite_differences_and_torch(of, order, recurrent):
    xs = _inputs(recurrent)
    attrs = {"order": order}
    grads, dys = check_gradient("LSTMCell", xs, attrs, of=of, tol=1e-7)
    by_output = dict(zip(of, dys, strict=True))
    # torch's dys per output, zero for the output not differentiated
    full = [by_output.get(k, np.zeros((BATCH, HIDDEN))) for k in (0, 1)]
    want = torch_gradients(_torch_cell(order), xs, full, wrt=list(range(len(xs))))
    for got, w in zip(grads, want, strict=True):
        assert rel_error(got, w) < 1e-12
    emitted = apply_rule("LSTMCell", xs, attrs, of=of)[2]
    assert emitted.count("LSTMCellGrad") == 1 and set(emitted) <= {"LSTMCellGrad", "Zeros"}


def test_shape_and_order_errors():
    infer = get_op("LSTMCell").infer
    g, c = TensorType((2, 8)), TensorType((2, 2))
    assert infer([g, c], {"order": "ifgo"}) == [c, c, g]
    with pytest.raises(OpError, match="order must name the gates"):
        infer([g, c], {"order": "iffo"})
    with pytest.raises(OpError, match=r"gates must be \(N, 4H\)"):
        infer([TensorType((2, 7)), c], {"order": "ifgo"})
    with pytest.raises(OpError, match="cell state must be"):
        infer([g, TensorType((2, 3))], {"order": "ifgo"})
    with pytest.raises(OpError, match="recurrent must be"):
        infer([g, c, TensorType((2, 4))], {"order": "ifgo"})
    with pytest.raises(OpError, match="dc must be"):
        get_op("LSTMCellGrad").infer([c, TensorType((1, 2)), g, c, c], {"order": "ifgo"})


def _two_steps():
    """Two LSTM steps, the first's h read by the second's recurrent GEMM and as an output: its
    gradient is a two-way sum, which the LSTMCellGrad of step 1 takes as dh and dh2."""
    b = GraphBuilder("two_steps")
    x1, x2 = (b.input(f"x{t}", (BATCH, 4 * HIDDEN), "float64") for t in (1, 2))
    c0 = b.input("c0", (BATCH, HIDDEN), "float64")
    u = b.input("u", (HIDDEN, 4 * HIDDEN), "float64")
    h1, c1, _ = b.op_n("LSTMCell", [x1, c0], {"order": "iofg"}, name="step1")
    h2, c2, _ = b.op_n("LSTMCell", [x2, c1, b.op("MatMul", [h1, u])], {"order": "iofg"},
                       name="step2")
    return b.build(outputs=[h1, h2, c2]), ["x1", "x2", "c0", "u"], [h1, h2, c2]


def test_two_steps_fold_the_h_gradient_sum_and_match_finite_differences():
    graph, wrt, of = _two_steps()
    grad_graph, grads = gradients(graph, wrt=wrt, of=of)
    check_graph(grad_graph)
    ops = [n.op for n in grad_graph.nodes]
    assert "AddN" not in ops and ops.count("LSTMCellGrad") == 2
    cell1 = next(n for n in grad_graph.nodes if n.op == "LSTMCellGrad" and len(n.inputs) == 6)
    assert cell1.inputs[3] == "c0"  # step 1's gradient took both parts of dh
    rng = np.random.default_rng(3)
    feeds = {t: rng.standard_normal(graph.tensor(t).shape) for t in wrt}
    dys = {o: rng.standard_normal(graph.tensor(o).shape) for o in of}
    values = run(grad_graph, {**feeds, **{f"grad/{o}": dy for o, dy in dys.items()}}, {})

    def f(xs):
        out = run(graph, xs, {})
        return sum(float(np.sum(out[o] * dy)) for o, dy in dys.items())

    eps = 1e-6
    for t in wrt:
        numeric = np.zeros_like(feeds[t])
        for idx in np.ndindex(feeds[t].shape):
            up, down = dict(feeds), dict(feeds)
            up[t], down[t] = feeds[t].copy(), feeds[t].copy()
            up[t][idx] += eps
            down[t][idx] -= eps
            numeric[idx] = (f(up) - f(down)) / (2 * eps)
        # central differences of float64 values of order 1: about eps^2 + 1e-16 / eps
        assert rel_error(values[grads[t]], numeric) < 1e-7, t
