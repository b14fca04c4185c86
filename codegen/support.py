"""What a backend's executor runs: the ops it has kernels for and the dtypes each takes.

A node runs when its op has a kernel and the set of its tensors' dtypes is one that kernel
declares where it registers (codegen.backends.Runtime.admits; the executor refuses the same
node at load). `check` reports every node or tensor outside them at once, before anything is
rendered or compiled (codegen.backends reads the ops and their dtypes from the kernel
registrations).

Example:
    >>> from codegen.backends import RUNTIMES
    >>> from planner.zoo import build
    >>> check(build("mlp", batch=2, hidden=[4], in_features=3, classes=2), RUNTIMES["cpu"])
"""

from __future__ import annotations

import re

from codegen.backends import Runtime
from codegen.errors import UnsupportedError
from planner.ir.graph import Graph


def check(graph: Graph, backend: Runtime, capability: str = "") -> None:
    """Raise UnsupportedError naming every op type and dtype the backend cannot run (with the
    first node or tensor of each); `capability`, a GPU target's compute capability ("7.5"):
    also the dtypes its libraries do not run there (bfloat16 before 8.0)."""
    if not graph.nodes:
        raise UnsupportedError(f"graph {graph.name!r} has no ops to run")
    ops: dict[str, str] = {}
    for n in graph.nodes:
        if n.op not in backend.ops:
            ops.setdefault(n.op, n.name)
    dtypes: dict[str, str] = {}
    for t in graph.tensors:
        if t.dtype not in backend.dtypes | backend.low_dtypes:
            dtypes.setdefault(t.dtype, t.name)
    old: dict[str, str] = {}
    if capability and (m := re.fullmatch(r"(\d{1,2})\.(\d)", capability)):
        have = (int(m[1]), int(m[2]))
        for t in graph.tensors:
            if have < backend.min_capability.get(t.dtype, have):
                old.setdefault(t.dtype, t.name)
    for n in graph.nodes:
        ins = [graph.tensor(t).dtype for t in n.inputs]
        outs = [graph.tensor(t).dtype for t in n.outputs]
        if n.op in backend.ops and not backend.admits(n.op, ins, outs):
            ops.setdefault(f"{n.op} in {','.join(sorted({*ins, *outs}))}", n.name)
        low = [t for t in (*n.inputs, *n.outputs) if graph.tensor(t).dtype in backend.low_dtypes]
        if low and n.op not in backend.low_precision_ops:
            d = graph.tensor(low[0]).dtype
            ops.setdefault(f"{n.op} in {d}", n.name)
    problems = [f"no kernel for op {op} (node {node!r})" for op, node in sorted(ops.items())]
    problems += [f"dtype {d} not supported (tensor {t!r})" for d, t in sorted(dtypes.items())]
    problems += [f"dtype {d} needs a GPU of compute capability "
                 f"{'.'.join(map(str, backend.min_capability[d]))} or newer, the target's is "
                 f"{capability} (tensor {t!r}; fp16-mixed runs there)"
                 for d, t in sorted(old.items())]
    if problems:
        raise UnsupportedError(f"the {backend.name} executor cannot run graph {graph.name!r}: "
                               + "; ".join(problems))
