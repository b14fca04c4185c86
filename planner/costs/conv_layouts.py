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
where the step keeps images blocked (planner.graph.blocked) oneDNN's kernel runs without those
reorders, which its measurements hold, and every convolution keeps it (`chosen_layouts`).

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
from planner.graph.step import with_layouts
from planner.ir.graph import Graph, Node
from planner.ops.conv import COLUMNS_OPS
from planner.ops.conv_scratch import ROLES

CONVOLUTIONS = frozenset({"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                          "ConvTranspose2D"})
CHANNELS_LAST = "nhwc"
COLUMNS = "columns"
# The largest forward output map (pixels) whose convolutions the profile measures on the
# columns kernels: on the 2-core EPYC 2x2 maps ran them up to ~2x faster, 4x4 ones either way,
# 8x8 and 16x16 ones 1.3-3.5x slower (bench/bench_conv_columns.py).
COLUMNS_AREA = 4


def channels_last(graph: Graph) -> Graph:
    """`graph` with every convolution node's kernel on channels-last layouts: what a profile
    measures beside the graph itself, so that `conv_layouts` can choose."""
    return with_layouts(graph, {n.name: CHANNELS_LAST for n in graph.nodes
                                if n.op in CONVOLUTIONS})


def alternative(graph: Graph, node: Node) -> str:
    """The layout a profile measures convolution `node` on beside its own (module docstring):
    `columns` for a float32 one-group convolution whose output maps (the forward's) have at
    most COLUMNS_AREA pixels, else channels-last."""
    if node.op in COLUMNS_OPS and node.attrs.get("groups", 1) == 1:
        tensors = [graph.tensor(t) for t in (*node.inputs, *node.outputs)]
        side, k = ROLES[node.op]["y"]  # where the op has the forward's output (or dy)
        y = graph.tensor((node.inputs if side == "in" else node.outputs)[k])
        if (all(t.dtype == "float32" for t in tensors)
                and y.shape[2] * y.shape[3] <= COLUMNS_AREA):
            return COLUMNS
    return CHANNELS_LAST


def alternatives(graph: Graph) -> Graph:
    """`graph` with every convolution node on its `alternative` layout: what a profile measures
    beside the graph itself, so that `conv_layouts` can choose."""
    return with_layouts(graph, {n.name: alternative(graph, n) for n in graph.nodes
                                if n.op in CONVOLUTIONS})


def profiled_signatures(graph: Graph, blocked: bool = False) -> list[OpSignature]:
    """What a CPU profile of `graph` measures, each once: its ops' signatures and, unless the
    step keeps images blocked (where `chosen_layouts` takes none), its convolutions'
    alternative ones."""
    return unique_signatures([*graph_signatures(graph).values(),
                              *(() if blocked else graph_signatures(alternatives(graph)).values())])


def conv_layouts(graph: Graph, table: CostTable | None) -> Graph:
    """`graph` with its alternative layout on each convolution whose measured times on it beat
    its own (module docstring); `graph` itself when none does."""
    return with_layouts(graph, chosen_layouts(graph, table))


def chosen_layouts(graph: Graph, table: CostTable | None,
                   blocked: bool = False) -> dict[str, str]:
    """Convolution node name -> its alternative layout where the measured times on it beat its
    own (the step graph's layouts: planner.graph.step). In a step that keeps images blocked
    (`blocked`, planner.graph.blocked) every convolution keeps oneDNN's blocked kernel: its
    times were measured on plain operands, with the reorders in and out that it no longer runs
    there, so they say nothing about the step's (the columns kernels, chosen so for ResNet-50's
    2x2 maps at batch 32, made its last stage's convolutions 6.8-7.0 ms a step against 5.3-5.6
    on oneDNN's: bench/RESULTS.md), and channels-last would add reorders of its own."""
    convs = [n for n in graph.nodes if n.op in CONVOLUTIONS and "layout" not in n.attrs]
    if table is None or not convs or blocked:
        return {}
    own = graph_signatures(graph)
    other = alternatives(graph)
    theirs = graph_signatures(other)
    chosen = {}
    for n in convs:
        a, b = _compact_seconds(table, own[n.name]), _compact_seconds(table, theirs[n.name])
        both = sorted(a.keys() & b.keys())
        layout = other.node_map[n.name].attrs["layout"]
        if both and sum(b[k] for k in both) < sum(a[k] for k in both):
            chosen[n.name] = layout
    return chosen


def recorded_layouts(graph: Graph) -> dict[str, str]:
    """Node name -> the layout a plan's graph records for it."""
    return {n.name: n.attrs["layout"] for n in graph.nodes if "layout" in n.attrs}


def _compact_seconds(table: CostTable, signature: OpSignature) -> dict[int, float]:
    entry = table.entry(signature)
    return dict(entry.cpu_points("compact")) if entry is not None else {}
