"""What a backend's executor runs: the ops it has kernels for and the dtypes it moves.

`check` reports every node or tensor outside them at once, before anything is rendered or
compiled (codegen.backends reads the ops from the kernel registrations).

Example:
    >>> from codegen.backends import RUNTIMES
    >>> from planner.zoo import build
    >>> check(build("mlp", batch=2, hidden=[4], in_features=3, classes=2), RUNTIMES["cpu"])
"""

from __future__ import annotations

from codegen.backends import Runtime
from codegen.errors import UnsupportedError
from planner.graph.ir import Graph


def check(graph: Graph, backend: Runtime) -> None:
    """Raise UnsupportedError naming every op type and dtype the backend cannot run (with the
    first node or tensor of each)."""
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
    for n in graph.nodes:
        low = [t for t in (*n.inputs, *n.outputs) if graph.tensor(t).dtype in backend.low_dtypes]
        if low and n.op not in backend.low_precision_ops:
            d = graph.tensor(low[0]).dtype
            ops.setdefault(f"{n.op} in {d}", n.name)
    problems = [f"no kernel for op {op} (node {node!r})" for op, node in sorted(ops.items())]
    problems += [f"dtype {d} not supported (tensor {t!r})" for d, t in sorted(dtypes.items())]
    if problems:
        raise UnsupportedError(f"the {backend.name} executor cannot run graph {graph.name!r}: "
                               + "; ".join(problems))
