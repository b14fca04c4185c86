"""Activations kept channel-blocked between the kernels that read them so (a step graph pass).

oneDNN's convolution kernels on x86 run on blocked layouts: nChw16c with AVX-512, nChw8c with
AVX2 (C / B blocks of B channels, the B channels innermost). On a plain NCHW tensor each
convolution reorders its image in and its output back, and its gradients do the same for x, dy
and dx: in ResNet-50's step (width 0.25, 64 px, batch 4, `ONEDNN_VERBOSE=profile_exec`) on a
2-core AVX-512 Xeon, such reorders took 3.3 ms, as much as the convolutions themselves (3.4).
Between two convolutions sit only ops that do not care: BatchNorm and the max pool (whose CPU
loops read a blocked image as well), Relu, the residual Add, their gradients. So the step graph
keeps those tensors blocked (Tensor.layout) and the reorders go.

Which tensors: the operands of an op that works by position (OpDef.channel_blocked BY_POSITION:
Relu, Add, ...; every operand but scalar bounds of one shape) share one layout, as do those a
kernel takes alike (BatchNorm's x and y), so they form a group. A group is kept blocked when
each of its tensors

  - is a float32 (N, C, H, W) activation or gradient with C a multiple of the block, not an
    output of the graph (what the caller gets back is plain), and
  - is read and written only by ops that take it blocked at that operand (OpDef.channel_blocked:
    a convolution's image and output, on oneDNN's own kernel or the columns kernels, BatchNorm's
    in training, a max pool's, the global average pool's input and its gradient's output, or a
    by-position op).

Anything else (an average pool over smaller windows, a view, a channels-last convolution, a
parameter's gradient) keeps a tensor plain, and its whole group with it: a tensor is blocked
only where every kernel that touches it knows. The block is the target's (CPU.vector_floats);
a GPU's step or a target that names none keeps every tensor plain.

Example: conv -> relu -> conv keeps the relu's input and output blocked; the image fed in and the
output returned stay plain:

    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("c")
    >>> x = b.input("x", (2, 16, 6, 6))
    >>> w1 = b.param("w1", (16, 16, 3, 3), init="he")
    >>> w2 = b.param("w2", (16, 16, 3, 3), init="he")
    >>> h = b.op("Conv2D", [x, w1], {"pads": [1, 1, 1, 1]})
    >>> r = b.op("Relu", [h])
    >>> y = b.op("Conv2D", [r, w2], {"pads": [1, 1, 1, 1]})
    >>> g = b.build([y])
    >>> sorted(blocked_tensors(g, 16)) == sorted([h, r]), blocked_tensors(g, 0)
    (True, frozenset())
    >>> [t.layout for t in with_blocked(g, 16).tensors if t.name == r]
    ['nChw16c']
"""

from __future__ import annotations

from networkx.utils import UnionFind

from planner.graph.validate import check_graph
from planner.ir.graph import Graph
from planner.ops.base import BY_POSITION, get_op

IMAGE_ROLES = frozenset({"activation", "grad"})


def blocked_layout(block: int) -> str:
    """The Tensor.layout of images blocked by `block` channels: nChw16c for 16."""
    return f"nChw{block}c"


def blocked_tensors(graph: Graph, block: int) -> frozenset[str]:
    """The tensors of `graph` a step keeps blocked by `block` channels (module docstring);
    none for block 0."""
    if not block:
        return frozenset()
    returned = set(graph.outputs)
    fits = {t.name: (t.role in IMAGE_ROLES and t.dtype == "float32" and len(t.shape) == 4
                     and t.shape[1] % block == 0 and t.name not in returned)
            for t in graph.tensors}
    groups = UnionFind(fits)
    for n in graph.nodes:
        operands = [*(("in", k, t) for k, t in enumerate(n.inputs)),
                    *(("out", k, t) for k, t in enumerate(n.outputs))]
        rule = get_op(n.op).channel_blocked
        if rule == BY_POSITION:
            # A scalar operand (a bound) is read the same at every element, whatever the
            # layout; the others line up position by position when their shapes agree.
            images = [t for _, _, t in operands if graph.tensor(t).size > 1]
            if len({graph.tensor(t).shape for t in images}) <= 1:
                groups.union(*images)
                continue
        alike = get_op(n.op).blocked_groups(n.attrs, len(n.inputs), len(n.outputs))
        for slots in alike:
            groups.union(*((n.inputs if side == "in" else n.outputs)[k] for side, k in slots))
        takes = {slot for slots in alike for slot in slots}
        for side, k, t in operands:
            if (side, k) not in takes:
                fits[t] = False
    return frozenset(name for group in groups.to_sets() if all(fits[t] for t in group)
                     for name in group)


def with_blocked(graph: Graph, block: int) -> Graph:
    """`graph` with Tensor.layout set on the tensors `blocked_tensors` keeps blocked and on no
    other; `graph` itself when that changes nothing."""
    kept = blocked_tensors(graph, block)
    layout = blocked_layout(block) if block else None
    def want(name: str) -> str | None:
        return layout if name in kept else None

    tensors = tuple(t.model_copy(update={"layout": want(t.name)}) if t.layout != want(t.name)
                    else t for t in graph.tensors)
    if all(a is b for a, b in zip(tensors, graph.tensors, strict=True)):
        return graph
    return check_graph(graph.model_copy(update={"tensors": tensors}))
