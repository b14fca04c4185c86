"""fp16-mixed's overflow flag under data parallel, re-derived from the embedded graph (no code
shared with planner.step.collectives.sharded_scaling): every rank must skip the same steps, so
every op that reads the flag must read one that every rank holds alike.

    reduced   where the graph reduces gradients, every flag read (SkipOnOverflow's first
              input, UpdateLossScale's third, the last input of a ShardedUpdate that
              `skip_on_overflow`) is written by a ShardedUnscaleGrads (its flag summed over the
              ranks) that unscales the shard of every reduce-scatter, where the graph
              reduce-scatters; else by an UnscaleGrads over all-reduced gradients only
    guarded   where a flag is read, every next value of a parameter (or parameter shard) is
              written by a SkipOnOverflow reading the flag, or by a ShardedUpdate that reads it

Example:
    >>> from planner.ir.graph import Graph
    >>> t = [{"name": n, "shape": [2] if n in "gru" else [], "role": "grad"} for n in "grufsc"]
    >>> g = Graph.model_validate({"tensors": t, "nodes": [
    ...     {"name": "rs", "op": "ReduceScatter", "inputs": ["g"], "outputs": ["r"]},
    ...     {"name": "un", "op": "UnscaleGrads", "inputs": ["r", "s"], "outputs": ["u", "f"]},
    ...     {"name": "up", "op": "SkipOnOverflow", "inputs": ["f", "s", "c"], "outputs": []}]})
    >>> for p in overflow_flag_problems(g): print(p)  # doctest: +NORMALIZE_WHITESPACE
    op 'up' reads overflow flag 'f' of UnscaleGrads 'un', which sees this rank's gradient
    shards only: the ranks would skip different steps
"""

from __future__ import annotations

from typing import Any

from planner.ir.graph import Graph, Node


def _flag(n: Node) -> str | None:
    """The overflow flag `n` reads, None where it reads none."""
    if n.op == "SkipOnOverflow":
        return n.inputs[0]
    if n.op == "UpdateLossScale":
        return n.inputs[2]
    if n.op == "ShardedUpdate" and n.attrs.get("skip_on_overflow"):
        return n.inputs[-1]
    return None


def overflow_flag_problems(graph: Graph, plan: dict[str, Any] | None = None) -> list[str]:
    """Every rule of the module docstring the graph breaks; [] when it holds (or it reduces
    no gradient, or reads no flag)."""
    scatters = [n for n in graph.nodes if n.op == "ReduceScatter"]
    reduced = {o for n in graph.nodes if n.op in ("AllReduce", "ReduceScatter")
               for o in n.outputs}
    flags = {n.name: _flag(n) for n in graph.nodes if _flag(n) is not None}
    if not reduced or not flags:
        return []
    writer = {o: n for n in graph.nodes for o in n.outputs}
    shards = sorted(o for n in scatters for o in n.outputs)
    problems: list[str] = []
    for name, flag in flags.items():
        w = writer.get(flag)
        what = f"op {name!r} reads overflow flag {flag!r}"
        if w is None or w.op not in ("UnscaleGrads", "ShardedUnscaleGrads") or \
                flag != w.outputs[-1]:
            problems.append(f"{what}, which no unscale of the gradients writes")
        elif scatters and w.op != "ShardedUnscaleGrads":
            problems.append(f"{what} of {w.op} {w.name!r}, which sees this rank's gradient "
                            f"shards only: the ranks would skip different steps")
        elif scatters and sorted(w.inputs[:-1]) != shards:
            problems.append(f"{what} of {w.name!r}, which unscales {sorted(w.inputs[:-1])}, "
                            f"not the shard of every reduce-scatter {shards}")
        elif not scatters and any(t not in reduced for t in w.inputs[:-1]):
            problems.append(f"{what} of {w.name!r}, which reads gradients no all-reduce "
                            f"averaged: the ranks would skip different steps")
    tm = graph.tensor_map
    for n in graph.nodes:
        for o in n.outputs:
            old = tm[o].updates
            if old is None or tm[old].role != "param" or n.name in flags:
                continue
            problems.append(f"op {n.name!r} writes {o!r}, the next value of parameter "
                            f"{old!r}, unguarded by the overflow flag: an overflowing step "
                            f"would change it")
    return problems
