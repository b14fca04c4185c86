"""The numpy reference interpreter: the oracle every executor is checked against.

It runs nodes in graph order, each through its op's numpy reference, and checks every produced
value against the declared shape and dtype. Simple and obviously right, not fast.

Example:
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> values = run(g, random_feeds(g, seed=0), init_params(g, seed=0))
    >>> values["loss"].shape
    ()
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.dtypes import LOW_FLOATS
from planner.ir.accumulation import MICRO_STEP, micro_batches, optimizer_step_nodes
from planner.ir.graph import Graph, Tensor
from planner.ops import get_op
from planner.ops.base import OpError
from planner.ops.refusals import said


class InterpretError(RuntimeError):
    pass


def run(graph: Graph, feeds: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray],
        keep: str = "all") -> dict[str, np.ndarray]:
    """Run one step. Returns every tensor's value (keep="all") or only the graph outputs.

    feeds: inputs and labels; params: params, state and optimizer-state tensors. With gradient
    accumulation a step is one micro-batch: the optimizer step's nodes run on the last one
    only (planner.ir.accumulation), and the persistent tensors they would update keep
    their values.
    """
    env: dict[str, np.ndarray] = {}
    for t in graph.tensors:
        if t.role in ("input", "label"):
            env[t.name] = _fetch(feeds, t, "feed")
        elif t.role in ("param", "state", "optimizer-state") and t.updates is None:
            env[t.name] = _fetch(params, t, "parameter")
    skipped = _skipped(graph, params)
    for n in graph.nodes:
        if n.name in skipped:
            continue
        opdef = get_op(n.op)
        try:
            outs = opdef.reference([as_float32(env[i]) for i in n.inputs], n.attrs)
        except OpError as e:
            torch_words = said(n.name, str(e))  # a look-up standing for torch's refusal
            if torch_words is None:
                raise
            raise OpError(torch_words) from None
        for name, value in zip(n.outputs, outs, strict=True):
            t = graph.tensor(name)
            value = np.asarray(value)
            if value.shape != t.shape:
                raise InterpretError(f"node {n.name!r}: reference gave shape {list(value.shape)} "
                                     f"for {name!r}, declared {list(t.shape)}")
            env[name] = value.astype(t.dtype, copy=False)
    if keep == "all":
        return env
    return {o: env[o] for o in graph.outputs}


def _skipped(graph: Graph, params: Mapping[str, np.ndarray]) -> frozenset[str]:
    """The optimizer step's nodes on a micro-batch that is not its step's last."""
    k = micro_batches(graph)
    if k == 1 or int(params[MICRO_STEP]) % k == k - 1:
        return frozenset()
    return optimizer_step_nodes(graph)


def as_float32(v: np.ndarray) -> np.ndarray:
    """A low-precision float value as float32 (exact): references compute in float32."""
    return v.astype(np.float32) if v.dtype.name in LOW_FLOATS else v


def train_step(graph: Graph, feeds: Mapping[str, np.ndarray],
               state: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray],
                                                       dict[str, np.ndarray]]:
    """Run one step of a training graph; return (graph outputs, new persistent state).

    `state` holds every param, state and optimizer-state tensor (as `init_params` gives them);
    the new state has the same keys, each tensor that some output `updates` replaced by that
    output's value (updated params, optimizer slots, the step count, BatchNorm running
    statistics). `state` itself is left untouched. An inference graph returns `state` unchanged
    (as a copy).

    Example:
        >>> from planner.frontend.autodiff import make_training_graph
        >>> from planner.graph.optimizer import Optimizer
        >>> from planner.zoo import build
        >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
        ...                         Optimizer(kind="sgd", lr=0.1))
        >>> state = init_params(g)
        >>> outputs, new = train_step(g, random_feeds(g), state)
        >>> bool((new["fc1/weight"] != state["fc1/weight"]).any())
        True
    """
    values = run(graph, feeds, state)
    new_state = dict(state)
    for t in graph.tensors:
        if t.updates is not None and t.name in values:
            new_state[t.updates] = values[t.name]
    return {o: values[o] for o in graph.outputs}, new_state


def widened(graph: Graph) -> Graph:
    """`graph` with every float32 tensor declared float64: `run` on it computes the reference
    in double precision (feeds and params are cast on the way in). Float32 results are held to
    it, with the float32 reference's own distance from it as the measure of rounding."""
    return graph.model_copy(update={"tensors": tuple(
        t.model_copy(update={"dtype": "float64"}) if t.dtype == "float32" else t
        for t in graph.tensors)})


def _fetch(values: Mapping[str, np.ndarray], t: Tensor, what: str) -> np.ndarray:
    if t.name not in values:
        raise InterpretError(f"missing {what} {t.name!r} (shape {list(t.shape)}, {t.dtype})")
    v = np.asarray(values[t.name])
    if v.shape != t.shape:
        raise InterpretError(f"{what} {t.name!r} has shape {list(v.shape)}, "
                             f"expected {list(t.shape)}")
    return v.astype(t.dtype, copy=False)


# The first loss scale of fp16-mixed training (torch.amp.GradScaler's init_scale).
INIT_LOSS_SCALE = 2.0**16


def init_value(t: Tensor, rng: np.random.Generator) -> np.ndarray:
    """Initial value of a persistent tensor from its `init` hint (zeros when none).

    fan_in is the product of all dims but the first for rank >= 2 (OIHW, or [in, out] for
    MatMul weights, where the first dim is the fan-in: see `fans`).
    """
    fan_in, fan_out = fans(t.shape)
    kind = t.init or "zeros"
    if kind == "zeros":
        v = np.zeros(t.shape)
    elif kind == "ones":
        v = np.ones(t.shape)
    elif kind == "he":
        v = rng.standard_normal(t.shape) * np.sqrt(2.0 / fan_in)
    elif kind == "glorot":
        lim = np.sqrt(6.0 / (fan_in + fan_out))
        v = rng.uniform(-lim, lim, t.shape)
    elif kind == "normal":
        v = rng.standard_normal(t.shape) * 0.02
    elif kind == "embedding":
        v = rng.standard_normal(t.shape) / np.sqrt(t.shape[-1])
    elif kind == "loss-scale":   # torch.amp.GradScaler's init_scale
        v = np.full(t.shape, INIT_LOSS_SCALE)
    elif kind == "constant":
        v = np.full(t.shape, t.value)
    else:
        raise ValueError(f"tensor {t.name!r}: unknown init {kind!r}")
    return v.astype(t.dtype)


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out): [in, out] matrices; OIHW / IOHW kernels use receptive field size."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    rf = int(np.prod(shape[2:]))
    return shape[1] * rf, shape[0] * rf


def init_params(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Initial values of every param, state and optimizer-state tensor, in graph order."""
    rng = np.random.default_rng(seed)
    return {t.name: init_value(t, rng)
            for t in graph.by_role("param", "state", "optimizer-state") if t.updates is None}


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs (standard normal) and labels (valid class ids / ids into their table)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for t in graph.by_role("input", "label"):
        if t.dtype.startswith("int"):
            feeds[t.name] = rng.integers(0, _id_bound(graph, t.name), t.shape).astype(t.dtype)
            if _divisor(graph, t.name):  # a zero integer divisor stops the step
                feeds[t.name] += 1
            if _offsets(graph, t.name) and t.shape[0]:
                # bags' offsets: rising from 0
                feeds[t.name] = np.sort(feeds[t.name] % (_offsets(graph, t.name) + 1))
                feeds[t.name][0] = 0
        elif t.dtype == "bool":
            feeds[t.name] = rng.integers(0, 2, t.shape).astype(bool)
        elif t.role == "label":
            feeds[t.name] = rng.uniform(0, 1, t.shape).astype(t.dtype)
        else:
            feeds[t.name] = rng.standard_normal(t.shape).astype(t.dtype)
    return feeds


def _divisor(graph: Graph, name: str) -> bool:
    """Whether `name` divides in an integer division or remainder (planner/ops/integer.py)."""
    return any(n.op in ("IntDivFloor", "IntDivTrunc", "IntRemainder") and n.inputs[1] == name
               for n in graph.consumers.get(name, ()))


def _offsets(graph: Graph, name: str) -> int:
    """The ids' count when `name` is the offsets of an EmbeddingBag's bags, else 0."""
    for n in graph.consumers.get(name, ()):
        if n.op in ("EmbeddingBag", "EmbeddingBagGrad", "EmbeddingBagWeightGrad"):
            k = 0 if n.op == "EmbeddingBagGrad" else 1
            if n.inputs[k + 1] == name:
                return graph.tensor(n.inputs[k]).shape[0]
    return 0


def _id_bound(graph: Graph, name: str) -> int:
    """Exclusive bound of valid integer ids for `name`: its consumer's class or table size."""
    for n in graph.consumers.get(name, ()):
        if n.op in ("Embedding", "EmbeddingBag") and n.inputs[1] == name:
            return graph.tensor(n.inputs[0]).shape[0]
        if n.op in ("IndexGather", "IndexScatter") and n.inputs[1] == name:
            x = graph.tensor(n.inputs[0])
            return max(1, x.shape[n.attrs["axis"] % len(x.shape)])
        if n.op == "SoftmaxCrossEntropy":
            return graph.tensor(n.inputs[0]).shape[n.attrs["axis"]]
    return 2
