"""Gradient accumulation: one optimizer step over K micro-batches (GraphOptions.accumulate),
with the activation memory of one micro-batch.

A training graph with accumulation is planned and run once per micro-batch. It holds every
node once; which of them run on every micro-batch and which on the last one only is derived
from the graph itself (`optimizer_step_nodes`), never recorded beside it:

    every micro-batch (k = optim/micro_step % K)
        forward, backward       on this micro-batch, as without accumulation
        AccumulateGrad          optim/<param>/grad_sum = grad / K (k == 0), else
                                grad_sum + grad / K: the mean of the K micro-batches' gradients
        Increment               optim/micro_step += 1; rng/step += 1 (Dropout: a fresh mask
                                per micro-batch, as PyTorch's generator advances per forward)
        BatchNorm               running statistics per micro-batch (as PyTorch accumulates)
    the last micro-batch only (k == K - 1): the optimizer step on the sums
        UnscaleGrads, ClipGradNorm, the update ops, Adam's step count, the loss scale

The sums and the micro-step count (int64) are role "state", init zeros, saved and restored
with the run (a run stopped mid-step resumes mid-step). With a loss that is a mean over the
micro-batch (every loss op's), K micro-batches of B rows give the gradients of one batch of
K * B rows; only BatchNorm's batch statistics differ (per micro-batch, as in PyTorch).

The CPU executor reads optim/micro_step before each step and skips the optimizer-step ops
unless it is the last micro-batch (Schedule::micro_batches, OpSpec::optimizer_step_only);
the reference interpreter (planner.graph.interpret.train_step) does the same.

Example:
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                         Optimizer(kind="adam"), accumulate=4)
    >>> micro_batches(g), sorted(optimizer_step_nodes(g))[:3]
    (4, ['update/fc1/bias/applyadam', 'update/fc1/weight/applyadam', 'update/fc2/bias/applyadam'])
    >>> [n.name for n in g.nodes if n.op == "AccumulateGrad"][0]
    'update/optim/fc1/weight/grad_sum/accumulate'
"""

from __future__ import annotations

from planner.ir.graph import Graph, Tensor

# The micro-batches taken so far (int64 scalar, role state): AccumulateGrad starts a sum when
# it is a multiple of K, and the executor runs the optimizer step when it is one short of one.
MICRO_STEP = "optim/micro_step"

# Roles whose next values only the optimizer step writes (a param, Adam's slots and step).
OPTIMIZER_ROLES = frozenset({"param", "optimizer-state"})


def grad_sum_tensor(param: Tensor) -> Tensor:
    """The running sum of `param`'s gradient over an optimizer step's micro-batches."""
    return Tensor(name=f"optim/{param.name}/grad_sum", shape=param.shape, dtype=param.dtype,
                  role="state", init="zeros")


def micro_step_tensor() -> Tensor:
    return Tensor(name=MICRO_STEP, shape=(), dtype="int64", role="state", init="zeros")


def micro_batches(graph: Graph) -> int:
    """K, the micro-batches per optimizer step (1: the graph does not accumulate)."""
    return next((int(n.attrs["micro_batches"]) for n in graph.nodes
                 if n.op == "AccumulateGrad"), 1)


def optimizer_step_nodes(graph: Graph) -> frozenset[str]:
    """The nodes that run on the last micro-batch of an optimizer step only (module
    docstring): every reader, direct or not, of a gradient sum's new value, and every node
    writing the next value of a param or optimizer state. Empty without accumulation."""
    if micro_batches(graph) == 1:
        return frozenset()
    summed = {o for n in graph.nodes if n.op == "AccumulateGrad" for o in n.outputs}
    nodes: set[str] = set()
    for n in graph.nodes:
        if n.op == "AccumulateGrad":
            continue
        writes_optimizer_state = any(
            graph.tensor(o).updates is not None and
            graph.tensor(graph.tensor(o).updates).role in OPTIMIZER_ROLES for o in n.outputs)
        if writes_optimizer_state or summed.intersection(n.inputs):
            nodes.add(n.name)
            summed.update(n.outputs)
    return frozenset(nodes)


def accumulation_problem(graph: Graph) -> str | None:
    """What breaks accumulation's rule, or None (planner.graph.validate raises it): the
    optimizer step reads summed gradients only, since a node that runs on the last
    micro-batch alone and read a micro-batch's own gradient would see 1/K of the batch. Also:
    one K, and every sum counted by optim/micro_step (the count the executor reads).
    Training graphs only."""
    accumulating = [n for n in graph.nodes if n.op == "AccumulateGrad"]
    if not accumulating or graph.kind != "training":  # a kernel test's lone node
        return None
    ks = sorted({int(n.attrs["micro_batches"]) for n in accumulating})
    if len(ks) > 1:
        return f"graph {graph.name!r}: AccumulateGrad nodes disagree on the micro-batches per " \
               f"step ({ks})"
    for n in accumulating:
        if n.inputs[2] != MICRO_STEP:
            return f"node {n.name!r}: AccumulateGrad counts micro-batches with " \
                   f"{n.inputs[2]!r}, not {MICRO_STEP!r}"
    step = optimizer_step_nodes(graph)
    summed = {o for n in graph.nodes if n.name in step or n.op == "AccumulateGrad"
              for o in n.outputs}
    for n in graph.nodes:
        if n.name not in step:
            continue
        for i in n.inputs:
            if graph.tensor(i).role == "grad" and i not in summed:
                return f"node {n.name!r} runs once per optimizer step but reads {i!r}, one " \
                       f"micro-batch's gradient, not its sum over the {ks[0]} micro-batches"
    return None
