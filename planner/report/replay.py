"""Run a memory-planned plan on real bytes: every value lives at its planned offset in one
device arena (and one host pool), ops run in execution order through their numpy references.

The oracle for memory planning: if two buffers that are live together share bytes, or an op
reads a buffer other than the one holding its value, the step's results differ from the
reference interpreter's. To make such mistakes visible, a workspace is filled with noise when
its op runs, and a buffer's bytes are overwritten with noise after its last read.

    device arena  [ params | grads ... | activations, reused ... ]  one uint8 array
    host pool     [ offloaded copies ... ]

Example:
    >>> from planner.costs import CostModel
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.graph.interpret import init_params, random_feeds, train_step
    >>> from planner.pipeline import plan
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                         Optimizer(kind="sgd"))
    >>> feeds, state = random_feeds(g), init_params(g)
    >>> out, new = replay(plan(g, preset("k40c-12gb")), feeds, state)
    >>> bool(out["loss"] == train_step(g, feeds, state)[0]["loss"])
    True
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.graph.interpret import as_float32
from planner.ir.graph import Graph
from planner.ops import get_op
from planner.plan import Plan, TensorPlan


class ReplayError(RuntimeError):
    pass


def replay(plan: Plan, feeds: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray],
           seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One step of `plan` on real bytes; returns (graph outputs, new persistent state) as
    planner.graph.interpret.train_step does."""
    graph = plan.graph
    memory = plan.summary.memory
    if memory is None:
        raise ReplayError("the plan has no memory plan")
    rng = np.random.default_rng(seed)
    pools = {"device": np.zeros(memory.arena_bytes, dtype=np.uint8),
             "host": np.zeros(memory.host_bytes, dtype=np.uint8)}
    buffers = {t.name: t for t in plan.tensors}
    # (op, tensor) -> buffer read; (op, tensor) -> buffer written.
    reads = {(r, t.tensor): t for t in plan.tensors for r in t.readers}
    writes = {(t.writer, t.tensor): t for t in plan.tensors if t.writer}
    order = {o.name: o.order for o in plan.ops}
    last_read: dict[str, list[TensorPlan]] = {}
    for t in plan.tensors:
        if t.readers and t.last < len(plan.ops) and not t.alias_of:
            last_op = max(t.readers, key=order.__getitem__)
            last_read.setdefault(last_op, []).append(t)
    for t in plan.tensors:
        if t.writer or t.alias_of:
            continue
        source = feeds if t.tensor in feeds else state
        if t.tensor in source:
            _store(pools, t, graph, t.tensor, np.asarray(source[t.tensor]))
    extra = {m.name: m for m in (plan.memory.ops if plan.memory else ())}
    for op in sorted(plan.ops, key=lambda o: o.order):
        ws = buffers.get(f"{op.name}@workspace")
        if ws is not None:
            _view(pools, ws)[:] = rng.integers(0, 256, ws.bytes, dtype=np.uint8)
        if op.name in extra:
            _run_memory_op(pools, buffers, extra[op.name], graph)
        else:
            node = graph.node_map[op.name]
            # References compute in float32, low-precision values widened (as the interpreter)
            ins = [as_float32(_load(pools, _pick(reads, op.name, i), graph, i))
                   for i in node.inputs]
            outs = get_op(node.op).reference(ins, node.attrs)
            for name, value in zip(node.outputs, outs, strict=True):
                _store(pools, _pick(writes, op.name, name), graph, name, np.asarray(value))
        for t in last_read.get(op.name, []):
            _view(pools, t)[:] = rng.integers(0, 256, t.bytes, dtype=np.uint8)
    outputs = {}
    for o in graph.outputs:
        holder = next(t for t in plan.tensors if t.tensor == o and t.last == len(plan.ops))
        outputs[o] = _load(pools, holder, graph, o)
    new_state = {k: np.array(v) for k, v in state.items()}
    for t in graph.tensors:
        if t.updates is not None:
            new_state[t.updates] = _load(pools, buffers[t.name], graph, t.name)
    return outputs, new_state


def _pick(table: dict[tuple[str, str], TensorPlan], op: str, tensor: str) -> TensorPlan:
    try:
        return table[(op, tensor)]
    except KeyError:
        raise ReplayError(f"op {op!r}: no buffer holds tensor {tensor!r} for it") from None


def _run_memory_op(pools, buffers: dict[str, TensorPlan], m, graph: Graph) -> None:
    if m.kind in ("offload", "prefetch"):
        src, dst = buffers[m.inputs[0]], buffers[m.outputs[0]]
        _view(pools, dst)[:] = _view(pools, src)
        return
    node = graph.node_map[m.node]
    ins = [as_float32(_load(pools, buffers[b], graph, i))
           for b, i in zip(m.inputs, _inputs(node), strict=True)]
    outs = get_op(node.op).reference(ins, node.attrs)
    for b, name, value in zip(m.outputs, node.outputs, outs, strict=True):
        _store(pools, buffers[b], graph, name, np.asarray(value))


def _inputs(node) -> tuple[str, ...]:
    # What the recompute reads (OpDef.recompute_reads: BatchNorm's saved statistics in place
    # of the running ones), as memory planning planned its reads.
    return get_op(node.op).recompute_operands(node.inputs, node.outputs)


def _view(pools, t: TensorPlan) -> np.ndarray:
    pool = pools[t.placement]
    if t.offset + t.bytes > len(pool):
        raise ReplayError(f"buffer {t.name!r} ends past its pool")
    return pool[t.offset:t.offset + t.bytes]


def _load(pools, t: TensorPlan, graph: Graph, tensor: str) -> np.ndarray:
    spec = graph.tensor(tensor)
    return _view(pools, t).view(spec.dtype).reshape(spec.shape).copy()


def _store(pools, t: TensorPlan, graph: Graph, tensor: str, value: np.ndarray) -> None:
    spec = graph.tensor(tensor)
    data = np.asarray(value.astype(spec.dtype, copy=False).reshape(spec.shape), order="C")
    _view(pools, t)[:] = data.reshape(-1).view(np.uint8)
