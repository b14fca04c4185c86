"""A forward graph's vector-Jacobian product as two graphs: the forward call and the backward call.

    split = split_vjp(graph, wrt=["w", "x"], of=["y"])
    split.forward    # graph's inputs -> graph's outputs, then the activations backward reads
    split.backward   # those activations (now inputs), `grad/<y>` per output -> each gradient

What PyTorch's autograd needs of a compiled piece of a model (planner/torch/backend.py): a
forward it calls now and a backward it calls later with the outputs' incoming gradients. Both
come from one differentiated graph (planner.frontend.autodiff.gradients: the planner's own
gradient rules, the same as a training graph's), cut where the backward begins: the forward
part is every node a forward output needs, the backward part every other node, and each tensor
the backward part reads from the forward part becomes an output of the one and an input of the
other (AOTAutograd's min-cut would choose what to recompute instead; this cut saves everything
the backward reads, as eager autograd does). A node of the backward part that needs no incoming
gradient (a mask from a forward activation) runs in the backward call; nothing is computed
twice.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("f")
    >>> x, w = b.input("x", (2, 3)), b.input("w", (3, 4))
    >>> y = b.op("Relu", [b.op("MatMul", [x, w])])
    >>> s = split_vjp(b.build(outputs=[y]), wrt=["w"], of=[y])
    >>> [n.op for n in s.forward.nodes], [n.op for n in s.backward.nodes]
    (['MatMul', 'Relu'], ['ReluGrad', 'MatMul'])
    >>> s.saved, s.forward_inputs_read, s.grads
    (('relu',), ('x',), {'w': 'grad/matmul/matmul'})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.frontend.autodiff import gradients
from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Tensor

# The roles a caller feeds (a loss's labels are "label").
FEEDS = ("input", "label")


@dataclass(frozen=True)
class VjpSplit:
    """The two graphs, and how their tensors meet: `saved` (forward activations the backward
    reads, the forward graph's outputs after the graph's own), `forward_inputs_read` (the
    forward's inputs the backward reads: fed to both calls), `seeds` (forward output -> the
    backward input taking its incoming gradient), `grads` (wrt tensor -> its gradient tensor in
    the backward graph, or an input of it, or None when no gradient reaches it)."""

    forward: Graph
    backward: Graph
    saved: tuple[str, ...]
    forward_inputs_read: tuple[str, ...]
    seeds: Mapping[str, str]
    grads: Mapping[str, str | None]


def split_vjp(graph: Graph, wrt: Sequence[str], of: Sequence[str]) -> VjpSplit:
    """`graph` (inference kind) differentiated with respect to `wrt` for the outputs `of`, cut
    into the forward and backward calls (module docstring). Raises AutodiffError (an op on the
    path without a gradient rule) as planner.frontend.autodiff.gradients does."""
    joint, grads = gradients(graph, wrt=list(wrt), of=list(of))
    seeds = {y: f"grad/{y}" for y in of}
    forward_names = _needed(joint, graph.outputs)
    forward_nodes = [n for n in joint.nodes if n.name in forward_names]
    backward_nodes = [n for n in joint.nodes if n.name not in forward_names]
    made_forward = {o for n in forward_nodes for o in n.outputs}
    inputs = {t.name for t in joint.tensors if t.role in FEEDS} - set(seeds.values())
    read = dict.fromkeys(i for n in backward_nodes for i in n.inputs)
    saved = tuple(t for t in read if t in made_forward and t not in inputs)
    inputs_read = tuple(t for t in read if t in inputs)
    forward = _graph(joint, f"{graph.name}/forward", forward_nodes,
                     tuple(dict.fromkeys((*graph.outputs, *saved))), {})
    grad_outputs = tuple(dict.fromkeys(g for g in grads.values() if g is not None))
    backward = _graph(joint, f"{graph.name}/backward", backward_nodes, grad_outputs,
                      {t: "input" for t in saved})
    return VjpSplit(forward, backward, saved, inputs_read, seeds, dict(grads))


def _needed(graph: Graph, outputs: Sequence[str]) -> set[str]:
    """The names of the nodes the tensors `outputs` depend on."""
    need, names = set(outputs), set()
    for n in reversed(graph.nodes):
        if any(o in need for o in n.outputs):
            names.add(n.name)
            need.update(n.inputs)
    return names


def _graph(joint: Graph, name: str, nodes: list, outputs: tuple[str, ...],
           roles: Mapping[str, str]) -> Graph:
    """The graph of `nodes` of `joint`, with every tensor they touch (and every output): a tensor
    in `roles` takes that role (an activation of the forward call is an input of the
    backward's), and every graph is an inference graph (it updates nothing)."""
    used = dict.fromkeys([*(t for n in nodes for t in (*n.inputs, *n.outputs)), *outputs])
    tensors = joint.tensor_map
    kept: list[Tensor] = []
    for t in (tensors[u] for u in used):
        role = roles.get(t.name, "activation" if t.role == "grad" else t.role)
        kept.append(t if role == t.role and t.updates is None else
                    t.model_copy(update={"role": role, "updates": None}))
    return check_graph(Graph(name=name, kind="inference", tensors=tuple(kept),
                             nodes=tuple(nodes), outputs=outputs, math=joint.math))
