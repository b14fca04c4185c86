"""Which layout each convolution's CPU kernel runs on: a planning decision, made from the profile.

oneDNN on x86 has two families of convolution kernels: the direct JIT kernels on blocked layouts
(what it picks when asked for `any`) and the brgemm kernels on channels-last (nhwc) ones. Which
is faster depends on the op, its direction and the CPU: on an AVX2 EPYC, DCGAN's stride-2 4x4
forward convolutions ran 2.2x faster channels-last, their weight gradients 1.5x slower. And
both run image by image: on a network's last stage (output maps of a few pixels) each image
streams the whole weight tensor for a handful of positions, where one matmul over the batch's
im2col columns (the runtime's `columns` kernels) reads it once (a 256x256x3x3 forward on 2x2
maps at batch 8: 1324 -> 702 us on one thread of the 2-core EPYC; on 8x8 and larger maps the
columns lose).

So each convolution has one alternative to its own layout (`alternative`): `columns` for a
float32 one-group convolution (forward, data or weight gradient) whose forward output maps have
at most COLUMNS_AREA pixels, channels-last for every other. The profile measures both (every
conv op of `alternatives(graph)` beside the graph's own), and `conv_layouts` gives each conv
node the layout its measurements favour, as the `layout` attr (planner/ops/conv.py) that the
CPU kernel reads. The arena's tensors stay NCHW either way: the kernel reorders in and out (or
copies the columns), so no other op sees the choice, and the numbers are the same
convolution's (up to summation order). That is a step on a target without a channel block:
where the step keeps images blocked (planner.step.blocked) oneDNN's kernel runs without those
reorders, which its measurements hold, and keeps them (`chosen_layouts`), but for one case.

A data gradient or a transposed convolution onto an image of a few channels (a network's first
layer seen from its gradient, as in a GAN's discriminator; a generator's last layer onto RGB)
is one that oneDNN's blocked kernels run padded to a whole block of channels, at a fraction of
their pace. Its alternative, on every step, is `image_columns`: the runtime's kernel that runs
it image by image, one matmul and one col2im each, reading and writing the images as the step
keeps them (blocked or plain), so its measurements in the step's own layouts weigh it fairly
against oneDNN's (DCGAN's two at batch 32 on two threads of the 2-core Xeon: 9.66 -> 2.39
and 4.82 -> 1.19 ms, `bench/bench_conv_columns.py --cases "64->3"`).

Measured or nothing: a node is given its alternative only where the table holds measured CPU
times of both its signatures at some thread counts and the alternative's sum over the counts
both have is lower; a node priced analytically keeps oneDNN's own choice. The chosen attr is
part of the plan's embedded graph (so a plan diff shows a layout that moved);
`recorded_layouts` and `with_layouts` let `planner verify --graph` carry a plan's choices onto
the graph it derives.

Example: a table whose nhwc forward is faster gives the forward nhwc, the others keep theirs
(a 6x6 output map: channels-last is its alternative):

    >>> from planner.costs.records import CostEntry, CostTable, CpuSample
    >>> from planner.costs.signature import OpSignature, graph_signatures, unique_signatures
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("c")
    >>> x = b.input("x", (2, 8, 6, 6))
    >>> y = b.op("Conv2D", [x, b.param("w", (8, 8, 3, 3), init="glorot")], {"pads": [1, 1, 1, 1]})
    >>> g = b.build([y])
    >>> def timed(sig, seconds):
    ...     return CostEntry(signature=sig, cpu=(CpuSample(threads=1, affinity="compact",
    ...                                                    seconds=seconds),))
    >>> (plain,) = graph_signatures(g).values()
    >>> (last,) = graph_signatures(alternatives(g)).values()
    >>> table = CostTable(target="t", entries=(timed(plain, 2.0), timed(last, 1.0)))
    >>> [n.attrs.get("layout") for n in conv_layouts(g, table).nodes]
    ['nhwc']
    >>> [n.attrs.get("layout") for n in conv_layouts(g, CostTable(target="t")).nodes]
    [None]
"""

from __future__ import annotations

from planner.costs.records import CostTable
from planner.costs.signature import OpSignature, graph_signatures, unique_signatures
from planner.ir.graph import Graph, Node
from planner.ops import REGISTRY
from planner.ops.conv import COLUMNS_OPS, IMAGE_COLUMNS_OPS
from planner.ops.conv_scratch import ROLES
from planner.step.layouts import with_layouts

# The convolutions (forward, data and filter gradients, transposed): the op table's.
CONVOLUTIONS = frozenset(name for name, op in REGISTRY.items() if op.convolution)
CHANNELS_LAST = "nhwc"
COLUMNS = "columns"
IMAGE_COLUMNS = "image_columns"
# An image of fewer channels than this: oneDNN reads it flat as a first layer's input (its
# forward and weight gradient run at their usual pace) but its blocked kernels write it padded
# to a whole block (16 on AVX-512), so a data gradient or transposed convolution onto it does
# the work of 16 channels: DCGAN's onto 3 (batch 32, 64 px) ran at 45 GFLOP/s on the 2-core
# Xeon against ~280 for its other convolutions (planner/ops/conv_scratch.py reads 8 the same).
FEW_CHANNELS = 8
# The largest forward output map (pixels) whose convolutions the profile measures on the
# columns kernels: on the 2-core EPYC 2x2 maps ran them up to ~2x faster, 4x4 ones either way,
# 8x8 and 16x16 ones 1.3-3.5x slower (bench/bench_conv_columns.py).
COLUMNS_AREA = 4


def channels_last(graph: Graph) -> Graph:
    """`graph` with every convolution node's kernel on channels-last layouts: what a profile
    measures beside the graph itself, so that `conv_layouts` can choose."""
    return with_layouts(graph, {n.name: CHANNELS_LAST for n in graph.nodes
                                if n.op in CONVOLUTIONS})


def alternative(graph: Graph, node: Node, blocked: bool = False) -> str | None:
    """The layout a profile measures convolution `node` on beside its own (module docstring):
    `image_columns` for a float32 one-group data gradient or transposed convolution whose image
    has fewer than FEW_CHANNELS channels; else, in a step that does not keep images blocked,
    `columns` for a float32 one-group convolution whose output maps (the forward's) have at
    most COLUMNS_AREA pixels, channels-last for every other; else none."""
    if node.op not in CONVOLUTIONS:
        return None
    # what the runtime's own kernels take (conv_columns.h's columns_apply)
    columns_apply = node.attrs.get("groups", 1) == 1 and all(
        graph.tensor(t).dtype == "float32" for t in (*node.inputs, *node.outputs))
    if node.op in IMAGE_COLUMNS_OPS and columns_apply \
            and _operand(graph, node, "x").shape[1] < FEW_CHANNELS:
        return IMAGE_COLUMNS
    if blocked:
        return None
    if node.op in COLUMNS_OPS and columns_apply:
        y = _operand(graph, node, "y")   # the forward's output (or dy)
        if y.shape[2] * y.shape[3] <= COLUMNS_AREA:
            return COLUMNS
    return CHANNELS_LAST


def _operand(graph: Graph, node: Node, role: str):
    """Convolution `node`'s image x, weights w or output y (conv_scratch.ROLES)."""
    side, k = ROLES[node.op][role]
    return graph.tensor((node.inputs if side == "in" else node.outputs)[k])


def alternatives(graph: Graph, blocked: bool = False) -> Graph:
    """`graph` with every convolution node that has an `alternative` layout on it: what a
    profile measures beside the graph itself, so that `conv_layouts` can choose."""
    return with_layouts(graph, {n.name: layout for n in graph.nodes
                                if (layout := alternative(graph, n, blocked)) is not None})


def profiled_signatures(graph: Graph, blocked: bool = False) -> list[OpSignature]:
    """What a CPU profile of `graph` measures, each once: its ops' signatures and its
    convolutions' alternative ones (in a step that keeps images blocked, `blocked`, those
    alone that have one there)."""
    return unique_signatures([*graph_signatures(graph).values(),
                              *graph_signatures(alternatives(graph, blocked)).values()])


def conv_layouts(graph: Graph, table: CostTable | None) -> Graph:
    """`graph` with its alternative layout on each convolution whose measured times on it beat
    its own (module docstring); `graph` itself when none does."""
    return with_layouts(graph, chosen_layouts(graph, table))


def chosen_layouts(graph: Graph, table: CostTable | None,
                   blocked: bool = False) -> dict[str, str]:
    """Convolution node name -> its alternative layout where the measured times on it beat its
    own. In a step that keeps images blocked (`blocked`, planner.step.blocked), `graph` is the
    step's own graph, its tensors' layouts set, and both times must have been measured so (not
    a plain twin's: CostTable.entry): only the image-columns alternative is weighed there (it
    reads and writes the images as they lie); every other convolution keeps oneDNN's blocked
    kernel (the columns kernels, chosen so from plain operands for ResNet-50's 2x2 maps at
    batch 32, made its last stage's convolutions 6.8-7.0 ms a step against 5.3-5.6 on
    oneDNN's blocked ones: bench/RESULTS.md), and channels-last would add reorders of its
    own."""
    convs = [n for n in graph.nodes if n.op in CONVOLUTIONS and "layout" not in n.attrs]
    if table is None or not convs:
        return {}
    other = alternatives(graph, blocked)
    if other is graph:
        return {}
    own, theirs = graph_signatures(graph), graph_signatures(other)
    chosen = {}
    for n in convs:
        layout = other.node_map[n.name].attrs.get("layout")
        if layout is None:
            continue
        a, b = (_compact_seconds(table, sig, exact=blocked)
                for sig in (own[n.name], theirs[n.name]))
        both = sorted(a.keys() & b.keys())
        if both and sum(b[k] for k in both) < sum(a[k] for k in both):
            chosen[n.name] = layout
    return chosen


def recorded_layouts(graph: Graph) -> dict[str, str]:
    """Node name -> the layout a plan's graph records for it."""
    return {n.name: n.attrs["layout"] for n in graph.nodes if "layout" in n.attrs}


def _compact_seconds(table: CostTable, signature: OpSignature,
                     exact: bool = False) -> dict[int, float]:
    """The signature's measured compact times by thread count; `exact`: its own entry alone,
    never its plain twin's (CostTable.entry), whose reorders the blocked step does not run."""
    if exact and signature not in table:
        return {}
    entry = table.entry(signature)
    return dict(entry.cpu_points("compact")) if entry is not None else {}
