"""Attaching a training loss to a forward graph: what an imported model needs before
`make_training_graph`, since exported models rarely carry their loss.

    attach_loss(graph, "cross-entropy", output="logits")

    logits (N, C) ──► SoftmaxCrossEntropy ──► loss ()          labels: new int64 input (N,)
            └────────────────────────────────► logits          (still an output)

| kind          | target input                              | loss                            |
| ------------- | ----------------------------------------- | ------------------------------- |
| cross-entropy | `labels`: int64 class ids, the output's   | PyTorch's F.cross_entropy:      |
|               | shape without its class axis              | softmax over the class axis,    |
|               |                                           | mean over labels not ignored    |
| mse           | `targets`: float, the output's shape      | mean squared error              |

Cross-entropy's class axis, as PyTorch's convention (classes on axis 1):
  - (N, C): axis 1, labels (N,);
  - (N, C, d1, d2, ...) of rank 4 or more (a segmentation net's (N, C, H, W)): axis 1, labels
    (N, d1, d2, ...); the width is never taken for the classes, even when C == W;
  - trailing axes of size 1 after axis 1 are squeezed first, so an ONNX classifier ending in
    (N, 1000, 1, 1) takes (N, 1000) logits and labels (N,) (PyTorch would want (N, 1, 1));
  - rank 3 is ambiguous, (N, C, L) or a sequence model's (N, T, V) with classes last, and is
    refused unless `axis` says which (`axis=-1` views it as F.cross_entropy(y.view(-1, V), ...));
  - a class axis of size 1 is refused (the softmax of one logit is 1: nothing would train).
`ignore_index` (default -100, as PyTorch) and `label_smoothing` are F.cross_entropy's.

A cross-entropy output that a Softmax or LogSoftmax over the class axis produced (exported
models often end in one) takes the loss on that node's input, the logits: cross-entropy applies
its own log-softmax, and a second one would leave almost nothing to train. LogSoftmax's input
gives the same loss and gradient; for a Softmax, a warning says so. The output stays an output.

The loss is named `loss` and becomes the graph's first output; the target gets role `label`.
Names already taken get a suffix (`loss_1`).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("net")
    >>> x, w = b.input("x", (4, 3)), b.param("w", (3, 5))
    >>> g = attach_loss(b.build(outputs=[b.op("MatMul", [x, w], name="logits")]))
    >>> g.outputs, [(t.name, t.shape, t.dtype) for t in g.by_role("label")]
    (('loss', 'logits'), [('labels', (4,), 'int64')])
"""

from __future__ import annotations

import warnings

from planner.dtypes import is_float
from planner.graph.builder import GraphBuilder
from planner.graph.validate import check_graph
from planner.ir.graph import Graph

LOSS_KINDS: tuple[str, ...] = ("cross-entropy", "mse")


class LossError(ValueError):
    """The loss cannot be attached; the message names the output or the kind."""


def attach_loss(graph: Graph, kind: str = "cross-entropy", output: str | None = None, *,
                axis: int | None = None, ignore_index: int = -100,
                label_smoothing: float = 0.0) -> Graph:
    """`graph` with a loss of `kind` (LOSS_KINDS) on `output`, and the target input it needs.

    `output` defaults to the graph's only output. `axis`, `ignore_index` and `label_smoothing`
    are cross-entropy's (see the module doc for the default class axis). Raises LossError when
    the kind is unknown, the output is not one of the graph's, does not fit the loss (a float
    tensor; a class axis that is clear and holds more than one class), or the graph already
    ends in a loss.
    """
    from planner.frontend.autodiff import AutodiffError, find_loss

    if kind not in LOSS_KINDS:
        raise LossError(f"unknown loss {kind!r}; expected one of {', '.join(LOSS_KINDS)}")
    if kind != "cross-entropy" and (axis is not None or ignore_index != -100 or
                                    label_smoothing != 0.0):
        raise LossError(f"{kind} takes no axis, ignore_index or label_smoothing")
    if not 0.0 <= label_smoothing <= 1.0:
        raise LossError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
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
        target = b.input(graph.fresh_name("targets"), y.shape, y.dtype, role="label")
        loss = b.op("MSE", [output, target], name="loss", outputs=[graph.fresh_name("loss")])
        return check_graph(b.build(outputs=[loss, *graph.outputs]))
    shape, class_axis = class_axis_of(output, y.shape, axis)
    logits = _logits_of(graph, output, class_axis)
    labels = b.label(graph.fresh_name("labels"), shape[:class_axis] + shape[class_axis + 1:])
    if shape != y.shape:
        with b.scope("loss"):
            logits = b.op("Reshape", [logits], {"shape": list(shape)}, name="logits")
    attrs = {"axis": class_axis, "ignore_index": ignore_index, "label_smoothing": label_smoothing}
    loss = b.op("SoftmaxCrossEntropy", [logits, labels], attrs, name="loss",
                outputs=[graph.fresh_name("loss")])
    return check_graph(b.build(outputs=[loss, *graph.outputs]))


def class_axis_of(output: str, shape: tuple[int, ...], axis: int | None
                  ) -> tuple[tuple[int, ...], int]:
    """(the logits' shape, trailing 1s squeezed when no axis is given; the class axis) of an
    output of `shape`; LossError when it is ambiguous or holds one class.

    >>> class_axis_of("y", (2, 1000, 1, 1), None), class_axis_of("y", (4, 6, 32, 32), None)
    (((2, 1000), 1), ((4, 6, 32, 32), 1))
    >>> class_axis_of("y", (2, 7, 9), -1)
    ((2, 7, 9), 2)
    """
    if axis is not None:
        if not -len(shape) <= axis < len(shape) or len(shape) < 2:
            raise LossError(f"output {output!r} has shape {list(shape)}: no class axis {axis} "
                            f"(cross-entropy takes (N, C, ...) logits)")
        axis %= len(shape)
    else:
        if len(shape) < 2:
            raise LossError(f"output {output!r} has shape {list(shape)}; cross-entropy needs "
                            f"(N, C) or (N, C, d1, ...) logits")
        while len(shape) > 2 and shape[-1] == 1:
            shape = shape[:-1]
        if len(shape) == 3:
            n, a, v = shape
            raise LossError(
                f"output {output!r} has shape {list(shape)}: are the classes on axis 1 (N, C, L; "
                f"labels {[n, v]}) or last (a sequence's N, T, V; labels {[n, a]})? Say which: "
                f"--loss 'cross-entropy:{output}?axis=1' or '...?axis=-1'")
        axis = 1
    if shape[axis] < 2:
        raise LossError(f"output {output!r} has shape {list(shape)}: its class axis {axis} holds "
                        f"{shape[axis]} class(es); cross-entropy needs at least 2")
    return shape, axis


def _logits_of(graph: Graph, output: str, axis: int) -> str:
    """The tensor the loss takes: the output, or the input of the Softmax / LogSoftmax over
    the class axis that produced it."""
    node = graph.producer.get(output)
    if node is None or node.op not in ("Softmax", "LogSoftmax"):
        return output
    rank = len(graph.tensor(output).shape)
    if node.attrs["axis"] % rank != axis % rank:
        return output
    if node.op == "Softmax":
        warnings.warn(f"cross-entropy on {output!r} is taken on {node.inputs[0]!r}, the input "
                      f"of its Softmax node {node.name!r}: cross-entropy applies its own "
                      f"softmax", stacklevel=3)
    return node.inputs[0]


def parse_loss_spec(spec: str) -> tuple[str, str | None, dict[str, int | float]]:
    """`KIND[:OUTPUT][?axis=A&ignore_index=I&label_smoothing=S]` as (kind, output, options).

    >>> parse_loss_spec("cross-entropy:logits?axis=-1&label_smoothing=0.1")
    ('cross-entropy', 'logits', {'axis': -1, 'label_smoothing': 0.1})
    """
    head, query = spec, ""
    if "?" in spec:
        head, _, query = spec.rpartition("?")
    kind, _, output = head.partition(":")
    options: dict[str, int | float] = {}
    for item in query.split("&") if query else ():
        key, eq, value = item.partition("=")
        if not eq or key not in _OPTIONS:
            raise LossError(f"loss option {item!r}: expected axis=, ignore_index= or "
                            f"label_smoothing=")
        try:
            options[key] = _OPTIONS[key](value)
        except ValueError:
            raise LossError(f"loss option {key}={value!r} is not a number") from None
    return kind, output or None, options


_OPTIONS = {"axis": int, "ignore_index": int, "label_smoothing": float}


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


def with_loss(graph: Graph, spec: str | None) -> Graph:
    """The graph with the loss a `--loss KIND[:OUTPUT]` option names attached (unchanged when
    spec is None); see planner.frontend.loss.

    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2, loss=False)
    >>> with_loss(g, "cross-entropy:logits").outputs
    ('loss', 'logits')
    """
    if spec is None:
        return graph
    kind, output, options = parse_loss_spec(spec)
    return attach_loss(graph, kind, output, **options)
