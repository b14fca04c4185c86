"""Attaching a training loss to a forward graph: what an imported model needs before
`make_training_graph`, since exported models rarely carry their loss.

    attach_loss(graph, "cross-entropy", output="logits")

    logits (N, C) ──► SoftmaxCrossEntropy ──► loss ()          labels: new int64 input (N,)
            └────────────────────────────────► logits          (still an output)

| kind          | target input                              | loss                            |
| ------------- | ----------------------------------------- | ------------------------------- |
| cross-entropy | `labels`: int64 class ids, output's shape | mean softmax cross-entropy over |
|               | without its last (class) axis             | the last axis (PyTorch's        |
|               |                                           | CrossEntropyLoss on a (N, C)    |
|               |                                           | view)                           |
| mse           | `targets`: float, the output's shape      | mean squared error              |

An output of rank > 2 (a language model's (N, T, V) logits) is viewed as (N * T, V) rows, as
`F.cross_entropy(logits.view(-1, V), labels.view(-1))`. The loss is named `loss` and becomes the
graph's first output; the target gets role `label`. Names already taken get a suffix (`loss_1`).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("net")
    >>> x, w = b.input("x", (4, 3)), b.param("w", (3, 5))
    >>> g = attach_loss(b.build(outputs=[b.op("MatMul", [x, w], name="logits")]))
    >>> g.outputs, [(t.name, t.shape, t.dtype) for t in g.by_role("label")]
    (('loss', 'logits'), [('labels', (4,), 'int64')])
"""

from __future__ import annotations

from planner.dtypes import is_float
from planner.graph.builder import GraphBuilder
from planner.graph.ir import Graph
from planner.graph.validate import check_graph

LOSS_KINDS: tuple[str, ...] = ("cross-entropy", "mse")


class LossError(ValueError):
    """The loss cannot be attached; the message names the output or the kind."""


def attach_loss(graph: Graph, kind: str = "cross-entropy", output: str | None = None) -> Graph:
    """`graph` with a loss of `kind` (LOSS_KINDS) on `output`, and the target input it needs.

    `output` defaults to the graph's only output. Raises LossError when the kind is unknown,
    the output is not one of the graph's, does not fit the loss (a float tensor; rank >= 2 for
    cross-entropy), or the graph already ends in a loss.
    """
    from planner.graph.autodiff import AutodiffError, find_loss

    if kind not in LOSS_KINDS:
        raise LossError(f"unknown loss {kind!r}; expected one of {', '.join(LOSS_KINDS)}")
    graph = check_graph(graph)
    try:
        existing = find_loss(graph)
    except AutodiffError:
        existing = None
    if existing is not None:
        raise LossError(f"graph {graph.name!r} already has a loss, {existing!r}")
    output = _pick_output(graph, output)
    y = graph.tensor(output)
    if not is_float(y.dtype):
        raise LossError(f"output {output!r} is {y.dtype}; a loss needs a float output")
    b = _copy(graph)
    if kind == "mse":
        target = b.input(_fresh(graph, "targets"), y.shape, y.dtype, role="label")
        loss = b.op("MSE", [output, target], name="loss", outputs=[_fresh(graph, "loss")])
    else:
        if len(y.shape) < 2:
            raise LossError(f"output {output!r} has shape {list(y.shape)}; cross-entropy needs "
                            f"(N, C) logits, or (..., C)")
        labels = b.label(_fresh(graph, "labels"), y.shape[:-1])
        logits, ids = output, labels
        if len(y.shape) > 2:
            rows = _prod(y.shape[:-1])
            with b.scope("loss"):
                logits = b.op("Reshape", [output], {"shape": [rows, y.shape[-1]]},
                              name="logits")
                ids = b.op("Reshape", [labels], {"shape": [rows]}, name="labels")
        loss = b.op("SoftmaxCrossEntropy", [logits, ids], name="loss",
                    outputs=[_fresh(graph, "loss")])
    return check_graph(b.build(outputs=[loss, *graph.outputs]))


def _pick_output(graph: Graph, output: str | None) -> str:
    if output is None:
        if len(graph.outputs) != 1:
            raise LossError(f"graph {graph.name!r} has outputs {list(graph.outputs)}; name the "
                            f"one the loss is taken on")
        return graph.outputs[0]
    if output not in graph.outputs:
        raise LossError(f"{output!r} is not an output of graph {graph.name!r} (outputs: "
                        f"{list(graph.outputs)})")
    return output


def _copy(graph: Graph) -> GraphBuilder:
    """A GraphBuilder holding the graph: tensors from outside the step, then every node."""
    b = GraphBuilder(graph.name)
    for t in graph.tensors:
        if t.role not in ("activation", "grad") and t.updates is None:
            b.add_tensor(t)
    for n in graph.nodes:
        b.op_n(n.op, n.inputs, n.attrs, name=n.name, outputs=n.outputs)
    return b


def _fresh(graph: Graph, base: str) -> str:
    names = set(graph.tensor_map) | {n.name for n in graph.nodes}
    name, k = base, 0
    while name in names:
        k += 1
        name = f"{base}_{k}"
    return name


def _prod(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out
