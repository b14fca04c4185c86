"""Precision policies: a training graph -> the same step with planned casts (torch.autocast's
rules written into the graph, where the scheduler and memory planner see them).

    policy       what runs in which type
    fp32         everything float32 (the graph unchanged)
    tf32         float32 tensors; TF32 math in convolutions and GEMMs is a GPU math mode of the
                 kernels, not a change of dtypes: the graph is unchanged (a CPU runs float32)
    bf16-mixed   convolutions, matrix products and their gradients (LOW_PRECISION_OPS) read
                 bfloat16 operands and write bfloat16 results, accumulating in float32 inside
                 the kernel; everything else (softmax, losses, normalization statistics,
                 reductions, bias gradients, the optimizer update) stays float32; params and
                 optimizer state stay float32 (master weights)
    fp16-mixed   the same with float16. Without loss scaling (not planned yet), gradients
                 below float16's smallest subnormal (6e-8) flush to zero

Where it sits: after autodiff, on the training graph. Applied before autodiff (autocast's
place), the casts' gradient rule would send a bfloat16 dy into every gradient rule of a
low-precision op, and the auxiliary ops those rules emit (a bias gradient's reduction,
`sum_to_shape` over broadcast axes, BatchNorm's statistics behind a convolution) would run in
bfloat16, against the policy that reductions stay float32; each rule would have to know the
policy. After autodiff, the forward and backward ops are classified by one table, and a tensor
cast once serves every low-precision reader, forward and backward alike: a convolution's
bfloat16 input and weight, cast for the forward op, are what its filter and data gradients read
(the activation saved for backward is the bfloat16 copy, at half the bytes).

Memory, as it stands: the low copies are planned tensors at their real bytes (2 per element),
but only convolutions and matrix products run in the low type, so the float32 values that
float32 ops still read in backward (ReLU's output for ReluGrad, a convolution's output for
BatchNorm's gradient) stay alive next to the low copies the low-precision gradients read: a
bf16-mixed step's peak is above float32's (ResNet-18, batch 16, 64x64 on h100-80gb: 108 MB
against 83 MB). autocast's memory saving needs the ops between convolutions (bias, ReLU,
pooling, BatchNorm's normalisation with float32 statistics) to run in the low type as well.

The rewrite, in graph order: a low-precision op's float32 inputs are read through a Cast to
the low type (one per tensor, inserted before its first reader); its output, renamed
`<output>/<low type>`, is cast back to float32 under its old name for the float32 readers.
Casts of casts are elided: a low-precision reader of a cast-back value reads the low value
itself (low -> float32 -> low is the identity), and a cast-back nobody reads is dropped.

Example:
    >>> from planner.graph.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                         Optimizer(kind="sgd"), precision="bf16-mixed")
    >>> [(n.op, n.attrs.get("to", "")) for n in g.nodes][:4]
    [('Cast', 'bfloat16'), ('Cast', 'bfloat16'), ('MatMul', ''), ('Cast', 'float32')]
    >>> g.tensor("fc1/weight").dtype, g.tensor("fc1/weight/bfloat16").dtype
    ('float32', 'bfloat16')
"""

from __future__ import annotations

from typing import Literal

from planner.graph.ir import Graph, Node, Tensor
from planner.graph.validate import GraphError

Precision = Literal["fp32", "tf32", "bf16-mixed", "fp16-mixed"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16-mixed", "fp16-mixed")

# The low type of each mixed policy.
LOW_TYPE: dict[str, str] = {"bf16-mixed": "bfloat16", "fp16-mixed": "float16"}

# Ops a mixed policy runs in the low type (float32 accumulation inside their kernels).
LOW_PRECISION_OPS: frozenset[str] = frozenset(
    {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul"})


def apply_precision(graph: Graph, precision: str) -> Graph:
    """`graph` under `precision` (one of PRECISIONS); fp32 and tf32 return it unchanged.

    Raises: ValueError for an unknown policy, GraphError when a name the rewrite needs is
    taken.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {list(PRECISIONS)}")
    if precision not in LOW_TYPE:
        return graph
    return _mixed(graph, LOW_TYPE[precision])


def _mixed(graph: Graph, low: str) -> Graph:
    tensors = graph.tensor_map
    added: dict[str, list[Tensor]] = {}   # original tensor -> tensors derived from it
    low_of: dict[str, str] = {}           # float32 tensor -> its low-type copy
    cast_back: dict[str, str] = {}        # float32 output of a cast-back -> its node's name
    nodes: list[Node] = []
    renamed: dict[str, str] = {}          # the ops' outputs renamed to their low-type copies

    def new_tensor(source: str, name: str, dtype: str) -> str:
        if name in tensors or any(name == t.name for ts in added.values() for t in ts):
            raise GraphError(f"tensor {name!r}: the {low} policy needs this name for a copy "
                             f"of {source!r}, but the graph already has it")
        t = tensors[source]
        role = t.role if t.role in ("activation", "grad") else "activation"
        added.setdefault(source, []).append(Tensor(name=name, shape=t.shape, dtype=dtype,
                                                   role=role))
        return name

    for n in graph.nodes:
        floats = [tensors[i].dtype == "float32" for i in n.inputs]
        if n.op not in LOW_PRECISION_OPS or not all(floats) or n.inputs == ():
            nodes.append(n)
            continue
        inputs = []
        for x in n.inputs:
            if x not in low_of:
                low_of[x] = new_tensor(x, f"{x}/{low}", low)
                nodes.append(Node(name=f"{x}/cast_{low}", op="Cast", inputs=(x,),
                                  outputs=(low_of[x],), attrs={"to": low}))
            inputs.append(low_of[x])
        (y,) = n.outputs
        y_low = new_tensor(y, f"{y}/{low}", low)
        renamed[y] = y_low
        nodes.append(n.model_copy(update={"inputs": tuple(inputs), "outputs": (y_low,)}))
        nodes.append(Node(name=f"{y}/cast_float32", op="Cast", inputs=(y_low,), outputs=(y,),
                          attrs={"to": "float32"}))
        low_of[y] = y_low
        cast_back[y] = nodes[-1].name

    read = {i for n in nodes for i in n.inputs} | set(graph.outputs)
    dead = {cast_back[y] for y in cast_back if y not in read}
    nodes = [n for n in nodes if n.name not in dead]
    kept: list[Tensor] = []
    for t in graph.tensors:
        if t.name in renamed and cast_back[t.name] in dead:
            kept += [x for x in added.get(t.name, ()) if x.name == renamed[t.name]]
            kept += [x for x in added.get(t.name, ()) if x.name != renamed[t.name]]
            continue
        kept.append(t)
        kept += added.get(t.name, [])
    return Graph(name=graph.name, kind=graph.kind, tensors=tuple(kept), nodes=tuple(nodes),
                 outputs=graph.outputs)
