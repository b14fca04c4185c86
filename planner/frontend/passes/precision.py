"""Precision policies: a training graph -> the same step with planned casts (torch.autocast's
rules written into the graph, where the scheduler and memory planner see them).

    policy       what runs in which type
    fp32         everything float32 (the graph unchanged)
    tf32         float32 tensors; TF32 math in convolutions and GEMMs is a GPU math mode of the
                 kernels, not a change of dtypes: the graph's tensors and ops are unchanged and
                 it carries `math="tf32"` (Graph.math), which the CUDA executor reads once at
                 load: on a GPU of compute capability 8.0 or newer its float32 convolutions
                 run cuDNN's CUDNN_DEFAULT_MATH (TF32 tensor cores allowed) and its float32
                 GEMMs CUBLAS_COMPUTE_32F_FAST_TF32; below sm_80 (no TF32) the plan is made
                 and the executor runs float32 FMA math, as for fp32. The CPU executor ignores
                 it: CPUs have no TF32, every op runs float32. The cost model follows the
                 executors (planner.costs.signature.kernel_math): on a GPU with TF32 the
                 float32 TF32_OPS are priced at its TF32 peak and keyed ` math=tf32` in cost
                 tables; on a CPU or an older GPU the graph is priced exactly as fp32
    bf16-mixed   convolutions, matrix products and their gradients (LOW_PRECISION_OPS) read
                 bfloat16 operands and write bfloat16 results, accumulating in float32 inside
                 the kernel; the ops between them (FOLLOW_OPS: ReLU, BatchNorm's normalisation,
                 pooling, residual adds, reshapes and their gradients) run in bfloat16 when
                 their inputs are, computing in float32 and rounding once; softmax, losses,
                 normalization statistics, reductions, bias gradients and the optimizer update
                 stay float32; params and optimizer state stay float32 (master weights)
    fp16-mixed   the same with float16, and dynamic loss scaling (planned by autodiff, before
                 this pass: the loss scale seeds the backward pass, UnscaleGrads divides the
                 gradients and flags inf/NaN, the updates are skipped on overflow and
                 UpdateLossScale follows torch.amp.GradScaler; planner/ops/loss_scale.py), so
                 gradients below float16's smallest subnormal (6e-8) do not flush to zero

Where it sits: after autodiff, on the training graph. Applied before autodiff (autocast's
place), the casts' gradient rule would send a bfloat16 dy into every gradient rule of a
low-precision op, and the auxiliary ops those rules emit (a bias gradient's reduction,
`sum_to_shape` over broadcast axes, BatchNorm's statistics behind a convolution) would run in
bfloat16, against the policy that reductions stay float32; each rule would have to know the
policy. After autodiff, the forward and backward ops are classified by one table, and a tensor
cast once serves every low-precision reader, forward and backward alike: a convolution's
bfloat16 input and weight, cast for the forward op, are what its filter and data gradients read
(the activation saved for backward is the bfloat16 copy, at half the bytes).

Memory: the activations saved for backward are the low copies (2 bytes per element), and no
float32 copy of an activation is kept: the ops between convolutions run in the low type, so
ReLU's output (ReluGrad reads it), a convolution's output (BatchNormGrad reads it) and the
residual path exist in bfloat16 only; BatchNorm takes its low x with float32 scale, bias and
statistics, as cuDNN's and oneDNN's batch norms and torch.autocast do. ResNet-50 on h100-80gb in
11 GiB (`planner fit ... --vary batch`) fits 1.9x float32's batch.

The rewrite, in graph order: a low-precision op's float32 inputs are read through a Cast to
the low type (one per tensor, inserted before its first reader); its output is renamed
`<output>/<low type>`. A FOLLOW op whose data inputs all have low values runs on them and
writes low data outputs the same way (autocast's rule for ops on neither of its lists: the
widest input type). A float32 reader of a value that exists only in the low type gets a Cast
back to float32 under the value's old name, inserted before the first such reader. Casts of
casts never happen: a low reader of a value that has a low copy reads the copy (low -> float32
-> low would be the identity).

Example:
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                         Optimizer(kind="sgd"), precision="bf16-mixed")
    >>> [(n.op, g.tensor(n.outputs[0]).dtype) for n in g.nodes][2:6]
    [('MatMul', 'bfloat16'), ('Cast', 'bfloat16'), ('BiasAdd', 'bfloat16'), ('Relu', 'bfloat16')]
    >>> g.tensor("fc1/weight").dtype, g.tensor("fc1/weight/bfloat16").dtype
    ('float32', 'bfloat16')
"""

from __future__ import annotations

from typing import Literal

from planner.dtypes import LOW_FLOATS
from planner.graph.validate import GraphError
from planner.ir.graph import Graph, Node, Tensor

Precision = Literal["fp32", "tf32", "bf16-mixed", "fp16-mixed"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16-mixed", "fp16-mixed")

# The low type of each mixed policy.
LOW_TYPE: dict[str, str] = {"bf16-mixed": "bfloat16", "fp16-mixed": "float16"}

# Ops a mixed policy runs in the low type (float32 accumulation inside their kernels).
LOW_PRECISION_OPS: frozenset[str] = frozenset(
    {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul"})


# Ops whose float32 kernels a tf32 graph runs in TF32 on a GPU that has it: the CUDA
# executor's cuDNN convolutions (all four directions) and cuBLAS GEMMs (Node::tf32).
TF32_OPS: frozenset[str] = LOW_PRECISION_OPS | {"ConvTranspose2D"}


def compute_type(op: str, dtypes: tuple[str, ...] | list[str], math: str | None = None) -> str:
    """The math type an op's kernel computes in, given its input dtypes and the math mode its
    kernel runs under (Graph.math where the device has it; None: plain float32 math): the
    low type for a LOW_PRECISION_OPS op whose inputs are all of one low type (tensor cores,
    AMX: the cost model prices it at that type's peak, Processor.peak_flops_for), "tf32" for
    a TF32_OPS op on float32 inputs under math "tf32", else float32 (the FOLLOW ops and
    everything else compute in float32 whatever they read).

    >>> compute_type("Conv2D", ("bfloat16", "bfloat16")), compute_type("Relu", ("bfloat16",))
    ('bfloat16', 'float32')
    >>> f32 = ("float32", "float32")
    >>> compute_type("MatMul", f32, "tf32"), compute_type("Add", f32, "tf32")
    ('tf32', 'float32')
    """
    kinds = set(dtypes)
    if op in LOW_PRECISION_OPS and len(kinds) == 1 and next(iter(kinds)) in LOW_FLOATS:
        return next(iter(kinds))
    if math == "tf32" and op in TF32_OPS and kinds == {"float32"}:
        return "tf32"
    return "float32"


# Ops that run in the low type when every one of their data inputs is already there (autocast's
# "widest input type" rule for ops on neither of its lists): op -> (data input positions or
# None for all, data output positions). Their other inputs stay float32 (BatchNorm's scale,
# bias and running statistics) and so do their other outputs (the batch statistics). Their
# kernels compute in float32 and round each data output once.
FOLLOW_OPS: dict[str, tuple[tuple[int, ...] | None, tuple[int, ...]]] = {
    "Relu": ((0,), (0,)),
    "BiasAdd": ((0,), (0,)),          # its bias is cast to the low type (LOW_PARAMS)
    "BiasAddGrad": ((0,), ()),        # a reduction: a low dy, a float32 db
    "ReluGrad": ((0, 1), (0,)),
    "BatchNorm": ((0,), (0,)),
    "BatchNormGrad": ((0, 1), (0,)),
    "MaxPool": ((0,), (0,)),
    "MaxPoolGrad": ((0, 1), (0,)),
    "AvgPool": ((0,), (0,)),
    "AvgPoolGrad": ((0,), (0,)),
    "Add": ((0, 1), (0,)),
    "AddN": (None, (0,)),
    "Reshape": ((0,), (0,)),
    "Flatten": ((0,), (0,)),
    "Concat": (None, (0,)),
    # a reduction: a low x, a float32 mean
    "GlobalAvgPool": ((0,), ()),
}


# Parameter inputs a FOLLOW op reads in the low type when it runs there (autocast casts a
# linear or convolution's bias with its weight).
LOW_PARAMS: dict[str, tuple[int, ...]] = {"BiasAdd": (1,)}


def apply_precision(graph: Graph, precision: str) -> Graph:
    """`graph` under `precision` (one of PRECISIONS); fp32 returns it unchanged, tf32 marks
    its math (Graph.math) and changes nothing else.

    Raises: ValueError for an unknown policy, GraphError when a name the rewrite needs is
    taken.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {list(PRECISIONS)}")
    if precision == "tf32":
        return graph.model_copy(update={"math": "tf32"})
    if precision not in LOW_TYPE:
        return graph
    return _mixed(graph, LOW_TYPE[precision])


def _data_positions(node: Node) -> tuple[list[int], tuple[int, ...]]:
    ins, outs = FOLLOW_OPS[node.op]
    return (list(range(len(node.inputs))) if ins is None else [i for i in ins
                                                                if i < len(node.inputs)]), outs


def _mixed(graph: Graph, low: str) -> Graph:
    tensors = graph.tensor_map
    added: dict[str, list[Tensor]] = {}   # original tensor -> tensors derived from it
    low_of: dict[str, str] = {}           # float32 tensor -> its low-type copy
    low_only: set[str] = set()            # produced in the low type; no float32 value yet
    renamed: dict[str, str] = {}          # outputs produced in the low type -> their low name
    nodes: list[Node] = []

    def new_tensor(source: str, name: str, dtype: str) -> str:
        if name in tensors or any(name == t.name for ts in added.values() for t in ts):
            raise GraphError(f"tensor {name!r}: the {low} policy needs this name for a copy "
                             f"of {source!r}, but the graph already has it")
        t = tensors[source]
        role = t.role if t.role in ("activation", "grad") else "activation"
        added.setdefault(source, []).append(Tensor(name=name, shape=t.shape, dtype=dtype,
                                                   role=role))
        return name

    def as_low(x: str) -> str:
        if x not in low_of:
            low_of[x] = new_tensor(x, f"{x}/{low}", low)
            nodes.append(Node(name=f"{x}/cast_{low}", op="Cast", inputs=(x,),
                              outputs=(low_of[x],), attrs={"to": low}))
        return low_of[x]

    def as_float32(x: str) -> str:
        # The float32 value of a tensor produced in the low type, cast back where a float32
        # op first reads it (widening is exact).
        if x in low_only:
            low_only.discard(x)
            nodes.append(Node(name=f"{x}/cast_float32", op="Cast", inputs=(low_of[x],),
                              outputs=(x,), attrs={"to": "float32"}))
        return x

    def run_low(n: Node, data_in: list[int], data_out: tuple[int, ...]) -> None:
        inputs = list(n.inputs)
        for i in data_in:
            inputs[i] = as_low(inputs[i])
        outputs = list(n.outputs)
        for k in data_out:
            y = outputs[k]
            outputs[k] = renamed[y] = low_of[y] = new_tensor(y, f"{y}/{low}", low)
            low_only.add(y)
        nodes.append(n.model_copy(update={"inputs": tuple(inputs), "outputs": tuple(outputs)}))

    for n in graph.nodes:
        floats = [tensors[i].dtype == "float32" for i in n.inputs]
        if n.op in LOW_PRECISION_OPS and all(floats) and n.inputs:
            run_low(n, list(range(len(n.inputs))), (0,))
            continue
        if n.op in FOLLOW_OPS:
            data_in, data_out = _data_positions(n)
            if data_in and all(n.inputs[i] in low_of for i in data_in) and all(
                    tensors[n.outputs[k]].dtype == "float32" for k in data_out):
                run_low(n, [*data_in, *LOW_PARAMS.get(n.op, ())], data_out)
                continue
        nodes.append(n.model_copy(update={"inputs": tuple(as_float32(x) for x in n.inputs)}))
    for y in graph.outputs:
        as_float32(y)

    kept: list[Tensor] = []
    for t in graph.tensors:
        if t.name in renamed and t.name in low_only:   # never needed in float32
            kept += [x for x in added.get(t.name, ()) if x.name == renamed[t.name]]
            kept += [x for x in added.get(t.name, ()) if x.name != renamed[t.name]]
            continue
        kept.append(t)
        kept += added.get(t.name, [])
    return Graph(name=graph.name, kind=graph.kind, tensors=tuple(kept), nodes=tuple(nodes),
                 outputs=graph.outputs)
