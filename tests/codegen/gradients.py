"""The executor's gradient of every parameter against the numpy reference interpreter's, at
float32 tolerances derived from the computation itself (test_executor_gradients.py).

One executor step (every tensor its own bytes, so every value reads back) is split in two:

- the forward pass (every tensor the loss depends on) against the float64 reference run on the
  same feeds and parameters. Its values are continuous in the inputs, so rounding moves them
  by rounding-sized amounts only;
- the backward pass with the forward "teacher-forced": the float64 reference runs every other
  node on the executor's own forward values (and its own backward values before it). Which
  side of zero a ReLU input near 0 fell on, or which element of a max-pool window won, is then
  the executor's own decision on both sides. Without this, a ReLU input within ~1e-6 of zero
  rounds to either side in float32 and the flipped element moves upstream weight gradients by
  percents, on a correct executor as much as on a wrong one (a 2.5% "error" in a
  ShuffleNet-v2-sized net here was exactly one such flip).

The tolerance of a tensor g (float64 reference g64, the executor's g):

    max|g - g64| <= 10 * max|g32 - g64| + 16 * eps32 * max|g64|

where g32 is the numpy float32 run of the same computation (teacher-forced the same way). A
float32 sum of K terms lies within about K * eps32 * sum|terms| of the exact one, and where in
that interval depends on the order: numpy sums pairwise (~log2 K * eps32 * sum|terms|), a
oneDNN kernel in blocks, so |g32 - g64| measures this computation's own rounding, cancellation
included, and the factor 10 covers the order (the same rule as tests/importers/torch_step.py's
`mismatches`). The 16 ulps of the tensor's scale cover a reference that rounds exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.graph.interpret import run, widened
from planner.ir.graph import Graph
from planner.ops import get_op
from tests.codegen.helpers import step_with_values

EPS32 = float(np.finfo(np.float32).eps)


def forward_tensors(graph: Graph) -> set[str]:
    """The tensors the step's outputs (the loss, logits) depend on, themselves included."""
    seen: set[str] = set()
    todo = list(graph.outputs)
    producer = graph.producer
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in producer:
            todo.extend(producer[name].inputs)
    return seen


def parameter_gradients(graph: Graph) -> dict[str, str]:
    """Each trained parameter's gradient tensor: the gradient its optimizer update reads.

    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                         Optimizer(kind="sgd"))
    >>> parameter_gradients(g)["fc2/bias"]
    'grad/fc2/bias_add/biasaddgrad'
    >>> sorted(t for t in forward_tensors(g) if g.tensor(t).role == "activation")
    ['logits', 'loss', 'relu1']
    """
    grads = {}
    for n in graph.nodes:
        updated = [graph.tensor(o).updates for o in n.outputs]
        params = [p for p in updated if p and graph.tensor(p).role == "param"]
        if not params:
            continue
        (grad,) = (i for i in n.inputs if graph.tensor(i).role == "grad")  # one per update
        for p in params:
            grads[p] = grad
    return grads


def teacher_forced(graph: Graph, values: Mapping[str, np.ndarray], forward: set[str],
                   dtype: type) -> dict[str, np.ndarray]:
    """Every node outside `forward` run by its reference in `dtype` on the executor's forward
    values (`values`) and on its own results before it."""
    env = {k: _as(v, dtype) for k, v in values.items() if k in forward or k not in
           graph.producer}
    for n in graph.nodes:
        if all(o in forward for o in n.outputs):
            continue
        outs = get_op(n.op).reference([env[i] for i in n.inputs], n.attrs)
        for name, value in zip(n.outputs, outs, strict=True):
            if name not in forward:  # BatchNorm's saved statistics beside its forward output
                env[name] = _as(np.asarray(value), dtype)
    return env


def _as(v: np.ndarray, dtype: type) -> np.ndarray:
    v = np.asarray(v)
    return v.astype(dtype) if v.dtype.kind == "f" else v


def excess(got: np.ndarray, single: np.ndarray, exact: np.ndarray) -> float:
    """How far `got` is from `exact`, over what is allowed (module docstring); <= 1 passes."""
    got, single, exact = (np.asarray(a, np.float64) for a in (got, single, exact))
    if exact.size == 0:
        return 0.0
    finite = np.isfinite(exact)
    if not np.array_equal(np.isfinite(got), finite) or not np.array_equal(
            got[~finite], exact[~finite], equal_nan=True):
        return float("inf")
    got, single, exact = got[finite], single[finite], exact[finite]
    err = np.max(np.abs(got - exact), initial=0.0)
    allowed = (10 * np.max(np.abs(single - exact), initial=0.0)
               + 16 * EPS32 * np.max(np.abs(exact), initial=0.0))
    if allowed == 0:
        return 0.0 if err == 0 else float("inf")
    return float(err / allowed)


def gradient_report(graph: Graph, values: Mapping[str, np.ndarray],
                    feeds: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]
                    ) -> tuple[list[tuple[float, str]], list[tuple[float, str]], str]:
    """(forward excesses, parameter-gradient excesses, the first tensor off) of one executor
    step whose every value is in `values`; each excess as (excess, tensor name), sorted."""
    forward = forward_tensors(graph)
    f64 = run(widened(graph), feeds, state)
    f32 = run(graph, feeds, state)
    fwd = sorted((excess(values[t], f32[t], f64[t]), t) for t in forward
                 if t in graph.producer)
    b64 = teacher_forced(widened(graph), values, forward, np.float64)
    b32 = teacher_forced(graph, values, forward, np.float32)
    grads = parameter_gradients(graph)
    back = sorted((excess(values[g], b32[g], b64[g]), f"{p} (gradient {g})")
                  for p, g in grads.items())
    first = ""
    for n in graph.nodes:
        for o in n.outputs:
            ref32, ref64 = (f32, f64) if o in forward else (b32, b64)
            if excess(values[o], ref32[o], ref64[o]) > 1:
                first = f"{o} (node {n.name}, {n.op})"
                break
        if first:
            break
    return fwd, back, first


def check_gradients(graph, module, state, feeds) -> None:
    """One step of `module` (built from `graph` with every tensor its own bytes): the forward
    values and every trained parameter's gradient within their float32 tolerances."""
    values = step_with_values(module, graph, state, feeds)
    forward, grads, first = gradient_report(graph, values, feeds, state)
    trained = {t.updates for t in graph.tensors
               if t.updates and graph.tensor(t.updates).role == "param"}
    assert trained and set(parameter_gradients(graph)) == trained
    assert forward[-1][0] <= 1, f"forward off (error / allowed): {forward[-3:]}; first " \
                                f"tensor off: {first}"
    assert grads[-1][0] <= 1, f"gradients off (error / allowed): {grads[-3:]}; first tensor " \
                              f"off: {first}"
