"""Autodiff: a forward graph and an optimizer -> one training graph (reverse mode, graph rewrite).

`make_training_graph` is a short list of steps, the last of them the checked passes of
planner/frontend/passes/ that rewrite training graphs (TRAINING_PASSES there):

    find_loss        the graph's marked loss (Graph.loss), else its scalar output written by a
                     loss op (an error names the outputs when there is none)
    differentiate    copy the forward nodes, then walk them backwards calling each op's gradient
                     rule (planner/ops), summing the gradients of a tensor read several times
    emit_updates     one update node per trainable param (SGD, ApplyMomentum, ApplyAdam)
    rewrites         TRAINING_PASSES = (lstm_grads, slice_grads, weight_grads,
                     softmax_fusion, in_place, transpose_fold, precision, fold_bias,
                     fold_conv_bias): an RNN's gradient sums, attention's softmax, the
                     persistent tensors' next values marked in place, transposes into GEMM
                     strides, the precision policy's casts, bias and Relu folds

What depends on the CPU cores a step runs on is planning's (planner/step/): a graph
does not depend on the target.

Every node is added through GraphBuilder, so it passes the same shape rules as any graph as it is
added; in-place order holds by construction (updates come last). The forward graph is validated
on the way in, and the graph again after each rewrite that changed it (`rewritten`, as the
front end's passes are), so a rewrite that breaks a rule is caught where it does.

Only what is needed is differentiated: a tensor gets a gradient only if it lies on a path from a
param to the loss, so neither the first layer's input nor the labels get one, and a branch that
does not reach the loss emits nothing.

Layout of a training graph (node order is a topological order, deterministic for a given input):

    forward nodes        as in the forward graph, same node and tensor names
    grad/...             backward, role "grad": the seed `grad/<loss>/seed` (Fill, 1.0), then the
                         gradient nodes of each forward node, in reverse forward order, named
                         `grad/<forward node>/<op>`; sums of several contributions are AddN nodes
                         named `grad/<tensor>/sum`
    update/...           after every backward node, so every reader of a param's old value runs
                         before it is overwritten: `update/step/increment` (the step count of
                         Adam or dampened momentum, once, first) then one node per param in
                         graph order, `update/<param>/<op>`,
                         and last `update/rng/step/increment` when the graph has Dropout

    tensor                   role              updates
    optim/<param>/<slot>     optimizer-state   -            (init zeros; slot: velocity | m | v
                                                             | v_max)
    optim/step               optimizer-state   -            (float32 scalar, Adam and
                                                             dampened momentum only)
    optim/group/<k>/lr       state             -            (float32 scalar, init constant: per
    optim/group/<k>/weight_decay                             parameter group k, read by the
                                                             updates; planner/graph/optimizer.py)
    rng/step                 state             -            (int64 scalar, zeros; Dropout only)
    optim/<param>/grad_sum   state             -            (--accumulate K: each gradient's
    optim/micro_step                                         sum and the micro-batch count;
                                                             planner/ir/accumulation.py)
    update/<param>           param             <param>
    update/<param>/<slot>    optimizer-state   optim/<param>/<slot>
    update/step              optimizer-state   optim/step
    update/rng/step          state             rng/step

With a recorded learning-rate schedule (Optimizer.schedule): `optim/schedule_step` (int64
scalar, optimizer-state, zeros) counts the optimizer steps taken, and each group's ScheduledLR
`optim/group/<k>/lr/schedule` writes `optim/group/<k>/lr/scheduled`, the rate its updates read.

fp16-mixed loss scaling (LossScaling; planner/ops/loss_scale.py): the backward seed is the
scale itself, `optim/loss_scale` (float32 scalar, init "loss-scale": 2^16), instead of the Fill;
`grad/unscale` (UnscaleGrads) divides every param's gradient by it into `grad/<param>/unscaled`
and writes `grad/found_inf`; each update writes `<next value>/unchecked` and a SkipOnOverflow
`update/<...>/skip_on_overflow` writes the next value over the old one, or keeps the old one
on an overflowing step (Adam's step count too: the skipped step is not counted); last,
`update/optim/loss_scale/update` (UpdateLossScale) writes the scale and its clean-step count
`optim/loss_scale/clean_steps`. The Dropout step still counts every step, as PyTorch's RNG.

Gradient clipping (Optimizer.clip_grad_norm): one ClipGradNorm `grad/clip_grad_norm` over every
param's gradient (unscaled first under fp16-mixed) writes `grad/<param>/clipped`, read by the
updates, and the total norm `grad/total_norm`.

Dropout: every Dropout node without a step input is given `rng/step`, the count of training
steps taken, so each step draws a fresh mask (planner/ops/dropout.py) and its DropoutGrad
recomputes the same one; the count is saved and restored with the rest of the state.

BatchNorm running statistics: a forward BatchNorm with training=True writes new running statistics
(outputs 1 and 2). This pass, not the zoo, marks them as in-place updates of the running_mean and
running_var inputs (when those have role "state"), so a forward graph stays a plain inference
graph and every model builder or importer gets the same treatment. A zoo graph that already marks
them is kept as it is.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("fit")
    >>> x, y = b.input("x", (4, 3)), b.input("y", (4, 2))
    >>> w = b.param("w", (3, 2), init="glorot")
    >>> loss = b.op("MSE", [b.op("MatMul", [x, w]), y], name="loss")
    >>> g = make_training_graph(b.build(outputs=[loss]), Optimizer(kind="sgd", lr=0.1))
    >>> [n.op for n in g.nodes]
    ['MatMul', 'MSE', 'Fill', 'MSEGrad', 'MatMul', 'SGD']
    >>> g.tensor("update/w").updates, g.tensor("update/w").role
    ('w', 'param')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.dtypes import is_float
from planner.frontend.passes import (
    GRADIENT_PASSES,
    TRAINING_PASSES,
    Differentiated,
    rewritten,
)
from planner.graph.builder import GraphBuilder
from planner.graph.optimizer import LossScaling, Optimizer, hyperparameter_tensor
from planner.graph.validate import GraphError, check_graph, check_loss, normalize_attrs
from planner.ir.accumulation import MICRO_STEP, grad_sum_tensor, micro_step_tensor
from planner.ir.graph import Graph, Node, Tensor
from planner.ir.phases import node_phase
from planner.ops import TensorType, get_op
from planner.ops.loss import LOSS_OPS
from planner.ops.random import RANDOM_OPS

# Name prefixes the training graph reserves for what this pass adds.
RESERVED_SCOPES: tuple[str, ...] = ("grad/", "update/", "optim/", "rng/")

# The training step counter Dropout nodes read for a fresh mask each step (planner/ops/dropout.py).
DROPOUT_STEP = "rng/step"

# fp16-mixed's dynamic loss scale (float32 scalar state; the backward seed) and the overflow
# flag of each step's gradients (planner/ops/loss_scale.py).
LOSS_SCALE = "optim/loss_scale"
FOUND_INF = "grad/found_inf"
# The optimizer steps taken, which a recorded learning-rate schedule reads (int64 scalar).
SCHEDULE_STEP = "optim/schedule_step"
# clip_grad_norm_'s total norm of the gradients (before clipping), a step's output on request.
CLIP_TOTAL_NORM = "grad/total_norm"


class AutodiffError(ValueError):
    """The graph cannot be differentiated; the message names the node, tensor or output."""


# ---- the passes -------------------------------------------------------------------------------

def make_training_graph(graph: Graph, optimizer: Optimizer, precision: str = "fp32",
                        loss_scaling: LossScaling | None = None, accumulate: int = 1) -> Graph:
    """Forward graph (ending in a loss) + optimizer -> training graph (kind "training").

    Parameters: `graph`, a forward graph whose outputs include one scalar loss; `optimizer`, the
    update rule applied to every param that receives a gradient (a param the loss does not
    depend on is left alone, as torch.optim skips parameters whose grad is None); `precision`,
    one of planner.frontend.passes.precision.PRECISIONS; `loss_scaling`, fp16-mixed's dynamic loss
    scaling (LossScaling() when None; ignored by the other policies);
    `accumulate`, the micro-batches per optimizer step (planner/ir/accumulation.py).
    Returns: the training graph laid out as in the module docstring; its outputs are the
    forward graph's outputs.
    Raises: AutodiffError (no loss, no param reaches the loss, an op without a gradient rule
    on the path, reserved names in use), GraphError (the forward graph breaks a rule) and
    GraphBuildError (a gradient rule emitted a node that breaks its op's shape rule).
    """
    graph = add_dropout_step(_prepare(graph))
    loss = find_loss(graph)
    params = [t.name for t in graph.by_role("param")]
    b = _copy_forward(graph)
    scaling = (loss_scaling or LossScaling()) if precision == "fp16-mixed" else None
    scaled = scaling is not None and scaling.enabled
    seed = b.add_tensor(Tensor(name=LOSS_SCALE, shape=(), dtype="float32",
                               role="optimizer-state", init="loss-scale")) if scaled else \
        _seed(b, graph.tensor(loss))
    grads = _differentiate(b, graph, params, {loss: seed})
    if not any(grads.values()):
        raise AutodiffError(f"graph {graph.name!r}: the loss {loss!r} depends on no param "
                            f"(params: {params[:5]}{' ...' if len(params) > 5 else ''})")
    if optimizer.maximize:
        _negate(b, grads)
    summed = _accumulate(b, graph, grads, accumulate) if accumulate > 1 else {}
    found_inf = _unscale(b, grads) if scaled else None
    if optimizer.clip_grad_norm is not None:
        _clip(b, grads, optimizer.clip_grad_norm)
    updated = _emit_updates(b, graph, grads, optimizer, found_inf)
    _copy_write_backs(b, graph)
    if scaling is not None and found_inf is not None:
        updated.update(_update_loss_scale(b, scaling, found_inf))
    if DROPOUT_STEP in graph.tensor_map:
        updated.update(_count(b, DROPOUT_STEP))
    if summed:
        updated.update(summed | _count(b, MICRO_STEP))
    if optimizer.schedule is not None:
        updated.update(_count(b, SCHEDULE_STEP))
    marks = {**_running_stat_updates(graph), **updated}
    return rewritten(b.build(outputs=graph.outputs, kind="training"),
                     Differentiated(graph, marks, precision), TRAINING_PASSES)


def gradients(graph: Graph, wrt: Sequence[str] | None = None,
              of: Sequence[str] | None = None) -> tuple[Graph, dict[str, str | None]]:
    """The forward graph plus the backward nodes giving d(loss)/d(t) for each t in `wrt`.

    `wrt` defaults to every param. `of=None` differentiates the loss (seeded with 1.0);
    `of=[y1, ...]` computes the vector-Jacobian product instead: each y gets its incoming
    gradient from a new input tensor named `grad/<y>` that the caller feeds (as
    torch.autograd.grad's grad_outputs). Used by gradient checks; no updates are emitted.
    Returns (graph, {t: name of its gradient tensor, or None when no gradient reaches it}); the
    gradients are appended to the graph's outputs.

    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.input("x", (2, 3))
    >>> y = b.op("Relu", [x])
    >>> g, grads = gradients(b.build(outputs=[y]), wrt=["x"], of=["relu"])
    >>> [n.op for n in g.nodes], grads
    (['Relu', 'ReluGrad'], {'x': 'grad/relu/relugrad'})
    """
    graph = _prepare(graph)
    wrt = [t.name for t in graph.by_role("param")] if wrt is None else list(wrt)
    for t in wrt:
        if not is_float(graph.tensor(t).dtype):
            raise AutodiffError(f"cannot differentiate with respect to {t!r}: it is "
                                f"{graph.tensor(t).dtype}, not a float tensor")
    b = _copy_forward(graph)
    if of is None:
        loss = find_loss(graph)
        seeds = {loss: _seed(b, graph.tensor(loss))}
    else:
        seeds = {y: b.input(f"grad/{y}", graph.tensor(y).shape, graph.tensor(y).dtype)
                 for y in of}
    grads = _differentiate(b, graph, wrt, seeds)
    _copy_write_backs(b, graph)
    outputs = list(dict.fromkeys([*graph.outputs, *(g for g in grads.values() if g)]))
    return rewritten(b.build(outputs=outputs, kind="training"), Differentiated(graph, {}),
                     GRADIENT_PASSES), grads


def find_loss(graph: Graph) -> str:
    """The name of the graph's loss: the output the graph marks as its loss (Graph.loss: a
    scalar of several terms, traced with the model), else the one scalar output produced by a
    loss op (LOSS_OPS)."""
    if graph.loss is not None:
        try:
            check_loss(graph, graph.loss)
        except GraphError as e:
            raise AutodiffError(str(e)) from None
        return graph.loss
    losses = [o for o in graph.outputs
              if o in graph.producer and graph.producer[o].op in LOSS_OPS
              and graph.tensor(o).shape == ()]
    if not losses:
        raise AutodiffError(f"graph {graph.name!r} has no loss: none of its outputs "
                            f"{list(graph.outputs)} is the scalar output of a loss op "
                            f"({', '.join(sorted(LOSS_OPS))}); attach one with --loss "
                            f"cross-entropy[:OUTPUT] or planner.frontend.loss.attach_loss")
    if len(losses) > 1:
        raise AutodiffError(f"graph {graph.name!r} has several losses {losses}; "
                            f"combine them into one before training")
    return losses[0]


# ---- differentiation --------------------------------------------------------------------------

@dataclass
class _Tape:
    """The GradBuilder (planner/ops/base.py) that gradient rules write into: a GraphBuilder whose
    new tensors have role "grad", and the set of tensors whose gradient is wanted."""

    builder: GraphBuilder
    wanted: frozenset[str]

    def emit(self, op: str, inputs: Sequence[str], attrs: dict | None = None) -> list[str]:
        return self.builder.op_n(op, inputs, attrs, role="grad")

    def needs(self, tensor: str) -> bool:
        return tensor in self.wanted

    def type(self, tensor: str) -> TensorType:
        return self.builder.type(tensor)


@dataclass
class _Sums:
    """Gradient contributions per tensor, summed (AddN) the first time the total is asked for."""

    builder: GraphBuilder
    parts: dict[str, list[str]] = field(default_factory=dict)

    def add(self, tensor: str, grad: str) -> None:
        self.parts.setdefault(tensor, []).append(grad)

    def total(self, tensor: str) -> str | None:
        parts = self.parts.get(tensor, [])
        if len(parts) > 1:
            with self.builder.scope("grad"):
                parts[:] = self.builder.op_n("AddN", parts, name=f"{tensor}/sum", role="grad")
        return parts[0] if parts else None


def _differentiate(b: GraphBuilder, graph: Graph, wrt: Sequence[str],
                   seeds: Mapping[str, str]) -> dict[str, str | None]:
    """Emit the backward pass into `b`; return the gradient tensor of each `wrt` tensor."""
    tape = _Tape(b, _wanted(graph, wrt, seeds))
    sums = _Sums(b)
    for tensor, grad in seeds.items():
        sums.add(tensor, grad)
    for node in reversed(graph.nodes):
        opdef = get_op(node.op)
        targets = [i for k, i in enumerate(node.inputs)
                   if k not in opdef.nondiff_inputs and tape.needs(i)]
        if not targets:
            continue
        grad_outputs = [sums.total(o) for o in node.outputs]
        if all(g is None for g in grad_outputs):
            continue
        if opdef.gradient is None:
            raise AutodiffError(f"node {node.name!r}: op {node.op} has no gradient rule, and the "
                                f"loss needs the gradient of its input(s) {targets}")
        with b.scope("grad"), b.scope(node.name):
            grad_inputs = opdef.gradient(tape, node, grad_outputs)
        if len(grad_inputs) != len(node.inputs):
            raise AutodiffError(f"node {node.name!r}: the {node.op} gradient rule gave "
                                f"{len(grad_inputs)} gradients for {len(node.inputs)} inputs")
        for k, (i, g) in enumerate(zip(node.inputs, grad_inputs, strict=True)):
            if g is not None and k not in opdef.nondiff_inputs and tape.needs(i):
                sums.add(i, g)
    return {t: sums.total(t) for t in wrt}


def _wanted(graph: Graph, wrt: Sequence[str], seeds: Mapping[str, str]) -> frozenset[str]:
    """Float tensors on some path from a `wrt` tensor to a seeded one, through inputs that
    carry gradients (an op's nondiff_inputs do not)."""

    def diff_inputs(n: Node) -> list[str]:
        skip = get_op(n.op).nondiff_inputs
        return [i for k, i in enumerate(n.inputs) if k not in skip]

    reached = set(wrt)
    for n in graph.nodes:
        if any(i in reached for i in diff_inputs(n)):
            reached.update(o for o in n.outputs if is_float(graph.tensor(o).dtype))
    reaches = set(seeds)
    for n in reversed(graph.nodes):
        if any(o in reaches for o in n.outputs):
            reaches.update(diff_inputs(n))
    return frozenset(reached & reaches)


def _seed(b: GraphBuilder, loss: Tensor) -> str:
    """d loss / d loss = 1, the start of the backward pass."""
    with b.scope("grad"):
        return b.op("Fill", [], {"shape": [], "value": 1.0, "dtype": loss.dtype},
                    name=f"{loss.name}/seed", role="grad")


# ---- copying, updates, in-place marks ---------------------------------------------------------

def _prepare(graph: Graph) -> Graph:
    """The forward graph, validated, with attrs spelled out; reserved names refused."""
    graph = _replace(check_graph(graph), nodes=normalize_attrs(graph).nodes)
    if graph.kind == "training" or any(t.role in ("grad", "optimizer-state")
                                       for t in graph.tensors):
        raise AutodiffError(f"graph {graph.name!r} is already a training graph")
    for name in [*(t.name for t in graph.tensors), *(n.name for n in graph.nodes)]:
        if name.startswith(RESERVED_SCOPES):
            raise AutodiffError(f"graph {graph.name!r}: name {name!r} is under a scope that "
                                f"training graphs reserve ({', '.join(RESERVED_SCOPES)})")
    return graph


def add_dropout_step(graph: Graph) -> Graph:
    """Dropout and random nodes (planner/ops/random.py) without a step input read
    DROPOUT_STEP (int64 scalar, role state, zeros), so each training step draws fresh numbers;
    the graph is unchanged when there are none. (make_training_graph's first pass; public so
    other runtimes can run the same forward.)"""
    nodes = [n.model_copy(update={"inputs": (*n.inputs, DROPOUT_STEP)})
             if draws_without_step(graph, n) else n for n in graph.nodes]
    if nodes == list(graph.nodes):
        return graph
    counter = Tensor(name=DROPOUT_STEP, shape=(), dtype="int64", role="state", init="zeros")
    return _replace(graph, nodes=tuple(nodes), tensors=(*graph.tensors, counter))


def draws_without_step(graph: Graph, node: Node) -> bool:
    if node.op == "Dropout":
        return len(node.inputs) == 1
    if node.op not in RANDOM_OPS:
        return False
    last = graph.tensor(node.inputs[-1]) if node.inputs else None
    return last is None or last.dtype != "int64"


def _copy_forward(graph: Graph) -> GraphBuilder:
    """A GraphBuilder holding the forward graph: external tensors first, in graph order, then
    every node under its own name (shapes re-inferred on the way), but the forward graph's
    write-backs (`_copy_write_backs`)."""
    b = GraphBuilder(graph.name)
    for t in graph.tensors:
        if t.updates is None and t.role not in ("activation", "grad"):
            b.add_tensor(t)
    for n in graph.nodes:
        if node_phase(graph, n) != "update":
            b.op_n(n.op, n.inputs, n.attrs, name=n.name, outputs=n.outputs)
    return b


def _copy_write_backs(b: GraphBuilder, graph: Graph) -> None:
    """The forward graph's nodes that write nothing but next values of persistent tensors (an
    imported buffer's value after the step, planner/importers/torch/convert.py), after the backward
    pass: a gradient rule may read a buffer's old value (`x * self.scale` reads `scale`)."""
    for n in graph.nodes:
        if node_phase(graph, n) == "update":
            for o in b.op_n(n.op, n.inputs, n.attrs, name=n.name, outputs=n.outputs):
                b.set_updates(o, graph.tensor(o).updates)  # kept: a buffer nothing reads


def _unscale(b: GraphBuilder, grads: dict[str, str | None]) -> str:
    """fp16-mixed: every param's gradient divided by the loss scale (one UnscaleGrads over
    all, as GradScaler.unscale_); `grads` now names the unscaled ones. Returns found_inf."""
    params = [p for p, g in grads.items() if g]
    outs = [f"grad/{p}/unscaled" for p in params]
    with b.scope("grad"):
        *_, found = b.op_n("UnscaleGrads", [*(grads[p] for p in params), LOSS_SCALE], {},
                           name="unscale", outputs=[*outs, FOUND_INF])
    grads.update(zip(params, outs, strict=True))
    return found


def _accumulate(b: GraphBuilder, graph: Graph, grads: dict[str, str | None],
                k: int) -> dict[str, str]:
    """Each param's gradient summed over the optimizer step's micro-batches
    (planner/ir/accumulation.py); `grads` now names the sums' new values. Returns
    {new value: sum}."""
    b.add_tensor(micro_step_tensor())
    marks: dict[str, str] = {}
    for p in graph.by_role("param"):
        if not grads.get(p.name):
            continue
        dtype = b.type(grads[p.name]).dtype  # mixed precision: the gradient's, not the param's
        total = b.add_tensor(grad_sum_tensor(p.model_copy(update={"dtype": dtype})))
        nxt = f"update/{total}"
        b.op_n("AccumulateGrad", [total, grads[p.name], MICRO_STEP], {"micro_batches": k},
               name=f"{nxt}/accumulate", outputs=[nxt])
        grads[p.name] = nxt
        marks[nxt] = total
    return marks


def _negate(b: GraphBuilder, grads: dict[str, str | None]) -> None:
    """torch.optim's maximize: each param's gradient negated where backward ends, before
    accumulation, unscaling, clipping and the update (each commutes with the sign exactly);
    `grads` now names the negated ones."""
    for p, g in grads.items():
        if g:
            with b.scope("grad"):
                grads[p] = b.op("Neg", [g], name=f"{p}/maximize", role="grad")


def _count(b: GraphBuilder, counter: str) -> dict[str, str]:
    """A step counter's Increment, last; returns {new value: counter}."""
    b.op_n("Increment", [counter], {"by": 1.0}, name=f"update/{counter}/increment",
           outputs=[f"update/{counter}"])
    return {f"update/{counter}": counter}


def _clip(b: GraphBuilder, grads: dict[str, str | None], max_norm: float) -> str:
    """clip_grad_norm_ over every param's gradient (after unscaling, as with GradScaler);
    `grads` now names the clipped ones. Returns the total norm."""
    params = [p for p, g in grads.items() if g]
    outs = [f"grad/{p}/clipped" for p in params]
    with b.scope("grad"):
        *_, total = b.op_n("ClipGradNorm", [grads[p] for p in params], {"max_norm": max_norm},
                           name="clip_grad_norm", outputs=[*outs, CLIP_TOTAL_NORM], role="grad")
    grads.update(zip(params, outs, strict=True))
    return total


def _update_loss_scale(b: GraphBuilder, scaling: LossScaling, found_inf: str) -> dict[str, str]:
    """The loss scale's next value and clean-step count (UpdateLossScale), last."""
    clean = b.add_tensor(Tensor(name=f"{LOSS_SCALE}/clean_steps", shape=(), dtype="float32",
                                role="optimizer-state", init="zeros"))
    nexts = [f"update/{LOSS_SCALE}", f"update/{clean}"]
    with b.scope("update"):
        b.op_n("UpdateLossScale", [LOSS_SCALE, clean, found_inf], scaling.update_attrs(),
               name=f"{LOSS_SCALE}/update", outputs=nexts)
    return dict(zip(nexts, [LOSS_SCALE, clean], strict=True))


def _emit_updates(b: GraphBuilder, graph: Graph, grads: Mapping[str, str | None],
                  optimizer: Optimizer, found_inf: str | None = None) -> dict[str, str]:
    """One update node per param with a gradient; returns {next value: persistent tensor}.
    With `found_inf` (fp16-mixed's overflow flag) each update writes `<next>/unchecked` and a
    SkipOnOverflow keeps the old value on an overflowing step."""
    marks: dict[str, str] = {}
    extra: list[str] = []

    def checked(nexts: list[str], olds: list[str]) -> list[str]:
        if found_inf is None:
            return nexts
        for nxt, old in zip(nexts, olds, strict=True):
            b.op_n("SkipOnOverflow", [found_inf, f"{nxt}/unchecked", old], {},
                   name=f"{nxt.removeprefix('update/')}/skip_on_overflow", outputs=[nxt])
        return [f"{n}/unchecked" for n in nexts]

    if optimizer.counts_steps:
        step = b.add_tensor(Tensor(name="optim/step", shape=(), dtype="float32",
                                   role="optimizer-state", init="zeros"))
        with b.scope("update"):
            outs = ["update/step/unchecked"] if found_inf else ["update/step"]
            extra = b.op_n("Increment", [step], {"by": 1.0}, name="step/increment",
                           outputs=outs)
            checked(["update/step"], [step])
        marks["update/step"] = step
    hyper = _hyperparameters(b, optimizer)
    for p in (t for t in graph.by_role("param") if grads.get(t.name)):
        slots = [b.add_tensor(Tensor(name=f"optim/{p.name}/{s}", shape=p.shape, dtype=p.dtype,
                                     role="optimizer-state", init="zeros"))
                 for s in optimizer.slots]
        nexts = [f"update/{p.name}", *(f"update/{p.name}/{s}" for s in optimizer.slots)]
        with b.scope("update"):
            b.op_n(optimizer.update_op,
                   [p.name, grads[p.name], *slots, *extra, *hyper[optimizer.group_of(p.name)]],
                   optimizer.update_attrs(), name=f"{p.name}/{optimizer.update_op.lower()}",
                   outputs=[f"{n}/unchecked" for n in nexts] if found_inf else nexts)
            checked(nexts, [p.name, *slots])
        marks.update(zip(nexts, [p.name, *slots], strict=True))
    return marks


def _hyperparameters(b: GraphBuilder, optimizer: Optimizer) -> list[list[str]]:
    """Per parameter group, its hyperparameter tensors (float32 scalars, role state, init
    constant: the optimizer's values are their first), in the update ops' input order; with
    a recorded schedule, the learning rate its ScheduledLR computes from the first."""
    groups = [[b.add_tensor(Tensor(name=hyperparameter_tensor(k, name), shape=(), role="state",
                                   init="constant", value=value))
               for name, value in optimizer.hyperparameters(k).items()]
              for k in range(len(optimizer.groups) + 1)]
    if optimizer.schedule is None:
        return groups
    b.add_tensor(Tensor(name=SCHEDULE_STEP, shape=(), dtype="int64", role="optimizer-state",
                        init="zeros"))
    at = list(optimizer.hyperparameters(0)).index("lr")
    for hyper in groups:
        lr = hyper[at]
        hyper[at], = b.op_n("ScheduledLR", [lr, SCHEDULE_STEP], optimizer.schedule.attrs(),
                           name=f"{lr}/schedule", outputs=[f"{lr}/scheduled"])
    return groups


def _running_stat_updates(graph: Graph) -> dict[str, str]:
    """{new running statistic: running_mean / running_var} for training-mode BatchNorms, but
    of statistics the forward graph already writes back (a BatchNorm called k times: the last
    call's statistics, chained through the k calls, are written back,
    planner/importers/torch/convert.py)."""
    written = {t.updates for t in graph.tensors if t.updates is not None}
    marks: dict[str, str] = {}
    for n in graph.nodes:
        pairs = get_op(n.op).running_statistics  # BatchNorm's
        if not pairs or not n.attrs.get("training") or any(k >= len(n.outputs) for k, _ in pairs):
            continue
        for out, old in ((n.outputs[k], n.inputs[j]) for k, j in pairs):
            if graph.tensor(old).role == "state" and graph.tensor(out).updates is None \
                    and old not in written:
                marks[out] = old
    return marks


def _replace(graph: Graph, **fields: object) -> Graph:
    """A new Graph with some fields replaced. Not `model_copy`: that would carry over the cached
    lookups (tensor_map, producer, ...) of the old graph."""
    return Graph(**{**{f: getattr(graph, f) for f in Graph.model_fields}, **fields})
