"""Collectives of data-parallel training: the all-reduce of a bucket of gradients.

`AllReduce` reads one rank's gradients g_1..g_k (a bucket, planner.schedule.parallel) and
writes their average over the `ranks` processes of the group, r_j = (1/ranks) * sum over ranks
of g_j: the executor runs a sum all-reduce on the bucket through the process group
(torch.distributed) and scales by 1/ranks while copying out. With `in_place` the gradients
lie side by side in the arena (planner.memory.layout) and are summed there, on a view of the
arena (they are read by nothing else); else they are copied into the op's scratch area
first. The reference interpreter runs one process: it models every rank holding the same
gradients, so its output is its input.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("AllReduce").reference([np.ones(2, np.float32)], {"ranks": 2})[0].tolist()
    [1.0, 1.0]
"""

from __future__ import annotations

import numpy as np

from planner.ops.base import Attr, Attrs, OpDef, OpError, TensorType, register


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if a["ranks"] < 1:
        raise OpError(f"AllReduce: ranks must be >= 1, got {a['ranks']}")
    if a["in_place"] not in (0, 1):
        raise OpError(f"AllReduce: in_place is 0 or 1, got {a['in_place']}")
    if not 1 <= a["ranks_per_host"] <= a["ranks"] or a["ranks"] % a["ranks_per_host"]:
        raise OpError(f"AllReduce: ranks_per_host must divide ranks ({a['ranks']}), got "
                      f"{a['ranks_per_host']}")
    for t in ins:
        if t.dtype != "float32":
            raise OpError(f"AllReduce: gradients must be float32, got {t.dtype}")
    return list(ins)


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    return [x.copy() for x in xs]


def _bytes(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    # Copy in (not in place), the reduction's reads and writes, copy out: passes over it.
    return (3 if a["in_place"] else 4) * sum(t.nbytes for t in ins)


def _scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs, threads: int) -> int:
    # The bucket: the gradients side by side, the buffer the process group reduces in place
    # (none when they lie side by side in the arena already).
    return 0 if a["in_place"] else sum(t.nbytes for t in ins)


register(OpDef(
    name="AllReduce",
    cost_class="data-movement",
    arity=None,
    # ranks_per_host: of the ranks, how many share one host, each on its own cores
    # (planner.target.shares); the executor's placement at load, not the arithmetic.
    # in_place: the gradients lie side by side in the arena (planner.memory.layout) and
    # nothing else reads them: the all-reduce sums them where they are, no copy in.
    attrs={"ranks": Attr("int", required=True), "ranks_per_host": Attr("int", default=1),
           "in_place": Attr("int", default=0)},
    infer=_infer,
    flops=lambda ins, outs, a: sum(t.size for t in ins),
    bytes_moved=_bytes,
    reference=_reference,
    recompute="never",
    scratch=_scratch,
    # The CUDA kernel's bucket packs the gradients without padding: the same bytes.
    gpu_scratch=lambda ins, outs, a: _scratch(ins, outs, a, 1),
    doc="r_j = mean over the process group's ranks of g_j (a sum all-reduce, then 1/ranks).",
))
