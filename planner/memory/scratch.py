"""The bytes of an op's CPU scratch area: what the cost table measured its kernel asking for
at that thread count (`planner profile --in-step` folds each op's stats() scratch_bytes into
its sample: the exact figure for this machine and library), else the op's analytical rule
(OpDef.scratch, an upper bound; planner/ops/conv_scratch.py for the convolutions).

Example (a measured sample replaces the rule at its thread count only):
    >>> from planner.costs.records import CostEntry, CostTable, CpuSample
    >>> from planner.costs.signature import node_signature
    >>> from planner.ir.graph import Node
    >>> x, w = TensorType((2, 8, 6, 6)), TensorType((8, 8, 3, 3))
    >>> node = Node(name="c", op="Conv2D", inputs=["x", "w"], outputs=["y"],
    ...             attrs={"strides": [1, 1], "pads": [1, 1, 1, 1]})
    >>> y = get_op("Conv2D").infer([x, w], get_op("Conv2D").normalize_attrs(node.attrs))
    >>> sig = node_signature(node, [x, w])
    >>> table = CostTable(target="t", entries=(CostEntry(signature=sig, cpu=(
    ...     CpuSample(threads=2, affinity="compact", seconds=1e-4, scratch_bytes=5000),)),))
    >>> kernel_scratch(node, [x, w], y, 2, table), kernel_scratch(node, [x, w], y, 2, None) > 5000
    (5000, True)
    >>> kernel_scratch(node, [x, w], y, 1, table) > 5000
    True
"""

from __future__ import annotations

from collections.abc import Callable

from planner.costs.records import CostTable
from planner.costs.signature import OpSignature, node_signature
from planner.ir.graph import Node
from planner.ops import get_op
from planner.ops.base import TensorType


def kernel_scratch(node: Node, ins: list[TensorType], outs: list[TensorType], threads: int,
                   table: CostTable | None, signature: OpSignature | None = None) -> int:
    """Bytes of `node`'s scratch area when its kernel runs with `threads` threads."""
    return scratch_by_threads(node, ins, outs, table, signature)(threads)


def scratch_by_threads(node: Node, ins: list[TensorType], outs: list[TensorType],
                       table: CostTable | None, signature: OpSignature | None = None
                       ) -> Callable[[int], int]:
    """kernel_scratch of `node` as a function of its thread count: the op's rule and the
    table's samples of its signature looked up once, for callers that ask at many thread
    counts (a plan's schedule variants: planner.memory.variants). `signature`: the node's as
    its graph has it (graph_signatures: its operands' layouts in a blocked step), else the
    plain one of `ins`."""
    rule = get_op(node.op).scratch
    if rule is None:
        return lambda threads: 0
    measured = _measured(signature or node_signature(node, ins), table)
    # A rule may work out what no thread count changes once (its `by_threads`: the
    # convolutions', planner.ops.conv_scratch.ConvScratch; oneDNN's, ops.base.ReorderScratch).
    by_threads = getattr(rule, "by_threads", None)
    of = by_threads(ins, outs, node.attrs) if by_threads is not None else \
        (lambda threads: rule(ins, outs, node.attrs, threads))
    if not measured:
        return of

    def at(threads: int) -> int:
        if threads in measured:
            return measured[threads]
        return of(threads)

    return at


def _measured(signature: OpSignature, table: CostTable | None) -> dict[int, int]:
    """Per thread count, the largest scratch measured for the signature (either affinity:
    the kernel is created the same way); thread counts without one are absent."""
    if table is None or not table.entries:
        return {}
    entry = table.entry(signature)
    out: dict[int, int] = {}
    for s in entry.cpu if entry is not None else ():
        if s.scratch_bytes is not None:
            out[s.threads] = max(out.get(s.threads, s.scratch_bytes), s.scratch_bytes)
    return out
