"""One ordering: what the executor enforces, and every pair of ops that must be ordered.

The executor orders two ops of a plan by exactly what the plan states (planner.plan), nothing
else:

    lanes           the ops of one lane run in execution order, each after the previous one
                    ends; on a CPU, consecutive ops of one lane in one parallel-loop group may
                    run at the same time (one loop), so only the runs around them are ordered
    happens_before  an op starts after every op with an edge into it ends

`u` happens-before `w` when a path of these leads from u to w. An op's `deps` order nothing.

The pairs that must be ordered are derived here, never read from the plan's `deps` or edges:

    data        the node writing a tensor before every node reading it (the embedded graph)
    in-place    every other reader of a param's or state's old value before the node
                overwriting it (the graph's `updates`)
    inserted    the op writing a buffer before every op reading it, where the writer of a buffer
                an inserted op (recompute, offload, prefetch) writes is that op, as the plan's
                memory section declares it, and of a graph tensor's buffer the graph's node;
                an inserted op's inputs are read by it

Sharing bytes (arena reuse, per-op scratch) is a choice of direction rather than one pair:
planner.verify.memory checks it on the same StatedOrder. So are collectives
(collective_problems): every two of them ordered, either way, so every rank issues them in one
order.

    lane 0:  a ──► b ──► c            a happens-before c (lane order); d before c (edge d -> c)
                  ╱
    lane 1:  d ─╯   e                 e is ordered against nothing

Example:
    >>> ops = [{"name": n, "order": k, "lane": l, "group": ""}
    ...        for k, (n, l) in enumerate([("a", 0), ("d", 1), ("b", 0), ("e", 1), ("c", 0)])]
    >>> hb = StatedOrder({"ops": ops, "happens_before": [{"before": "d", "after": "c"}]})
    >>> hb.before("a", "c"), hb.before("d", "c"), hb.before("d", "b"), hb.before("e", "c")
    (True, True, False, False)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from planner.ir.graph import Graph
from planner.ops.collective import COLLECTIVE_OPS

# (before, after, why): `after` {why} `before`, e.g. "reads tensor 'x' written by".
Pair = tuple[str, str, str]


class StatedOrder:
    """Happens-before over a plan's ops (as JSON data) from its lanes and happens-before edges
    alone: per op, the bit set of the ops it reaches (bit i: the op at position i of the
    execution order), built once in reverse execution order. An edge against the execution
    order is not followed; `problems` names it."""

    def __init__(self, plan: dict[str, Any]) -> None:
        ops = sorted(plan.get("ops", []), key=lambda o: o["order"])
        self.position = {o["name"]: i for i, o in enumerate(ops)}
        self.problems: list[str] = []
        succ: list[list[int]] = [[] for _ in ops]
        for e in plan.get("happens_before", []):
            u, w = self.position.get(e["before"]), self.position.get(e["after"])
            if u is None or w is None:
                continue  # planner.verify names edges to ops the plan lacks
            if u >= w:
                self.problems.append(f"happens-before edge {e['before']!r} -> {e['after']!r} "
                                     f"goes against execution order")
                continue
            succ[u].append(w)
        following = _next_runs(ops, concurrent_groups=plan.get("backend") != "cuda")
        reach = [0] * len(ops)
        run_reach: dict[int, int] = {}
        for u in range(len(ops) - 1, -1, -1):
            bits = 0
            for w in succ[u]:
                bits |= reach[w] | 1 << w
            run = following[u]
            if run:  # every op of the lane's next run: all of them come later, so are done
                if id(run) not in run_reach:
                    r = 0
                    for w in run:
                        r |= reach[w] | 1 << w
                    run_reach[id(run)] = r
                bits |= run_reach[id(run)]
            reach[u] = bits
        self._reach = reach

    def before(self, u: str, w: str) -> bool:
        """Whether op u happens-before op w (False for ops the plan lacks, and for u == w)."""
        a, b = self.position.get(u), self.position.get(w)
        return a is not None and b is not None and bool(self._reach[a] >> b & 1)


def _next_runs(ops: list[dict[str, Any]], concurrent_groups: bool) -> list[list[int] | None]:
    """Per op (by position), the positions of the run after its own on its lane, or None. A run
    is one op, or on a CPU the consecutive ops of a lane in one parallel-loop group."""
    lanes: dict[Any, list[int]] = defaultdict(list)
    for i, o in enumerate(ops):
        lanes[o.get("lane")].append(i)
    following: list[list[int] | None] = [None] * len(ops)
    for members in lanes.values():
        runs: list[list[int]] = []
        for i in members:
            group = ops[i].get("group") if concurrent_groups else ""
            if runs and group and ops[runs[-1][-1]].get("group") == group:
                runs[-1].append(i)
            else:
                runs.append([i])
        for run, nxt in zip(runs, runs[1:], strict=False):
            for i in run:
                following[i] = nxt
    return following


def graph_pairs(graph: Graph) -> list[Pair]:
    """The data and in-place pairs of the graph (module docstring)."""
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    out = []
    for n in graph.nodes:
        for t in dict.fromkeys(n.inputs):
            if t in producer:
                out.append((producer[t], n.name, f"reads tensor {t!r} written by"))
        for o in n.outputs:
            old = graph.tensor_map[o].updates
            for r in graph.consumers.get(old, ()) if old else ():
                if r.name != n.name:
                    out.append((r.name, n.name, f"overwrites {old!r} in place, which is read by"))
    return out


def buffer_pairs(graph: Graph, plan: dict[str, Any]) -> tuple[list[Pair], list[str]]:
    """The pairs buffers need (module docstring, `inserted`): their writer, as the graph and
    the memory section say, before each op reading them; and the problems that keep a pair
    from being derived (an inserted op's buffer the plan lacks, a buffer two ops write)."""
    inserted = (plan.get("memory") or {}).get("ops") or []
    buffers = {b["name"]: b for b in plan.get("tensors") or []}
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    writer: dict[str, str] = {}
    readers: dict[str, list[str]] = defaultdict(list)
    problems = []
    for m in inserted:
        for b in m.get("inputs", ()):
            readers[b].append(m["name"])
        for b in m.get("outputs", ()):
            if b in writer:
                problems.append(f"buffer {b!r} is written by inserted ops {writer[b]!r} and "
                                f"{m['name']!r}")
            writer[b] = m["name"]
        for b in (*m.get("inputs", ()), *m.get("outputs", ())):
            if b not in buffers:
                problems.append(f"inserted op {m['name']!r} names buffer {b!r}, which is not "
                                f"a buffer of the plan")
    for name, b in buffers.items():
        if name not in writer and producer.get(b.get("tensor") or ""):
            writer[name] = producer[b["tensor"]]
        readers[name] += b.get("readers", ())
    pairs = [(writer[b], r, f"reads buffer {b!r} written by")
             for b in sorted(readers) if b in writer for r in dict.fromkeys(readers[b])
             if r != writer[b]]
    return pairs, problems


def ordering_problems(graph: Graph, plan: dict[str, Any],
                      hb: StatedOrder | None = None) -> list[str]:
    """Every required pair (graph_pairs, buffer_pairs) that the plan's stated ordering does not
    imply, naming both ops and why they must be ordered; [] when it implies them all.

    `hb`: the plan's StatedOrder, when the caller has it."""
    hb = hb or StatedOrder(plan)
    pairs, problems = buffer_pairs(graph, plan)
    seen = set()
    for before, after, why in (*graph_pairs(graph), *pairs):
        if (before, after) in seen or before not in hb.position or after not in hb.position:
            continue  # planner.verify names ops the plan does not schedule
        seen.add((before, after))
        if hb.position[before] >= hb.position[after]:
            problems.append(f"op {after!r} {why} op {before!r}, but comes before it in "
                            f"execution order")
        elif not hb.before(before, after):
            problems.append(f"op {after!r} {why} op {before!r}, but nothing the executor "
                            f"enforces orders them: no lane or chain of happens-before edges "
                            f"leads from {before!r} to {after!r}")
    return problems


def collective_problems(graph: Graph, hb: StatedOrder) -> list[str]:
    """Every two collectives (the graph's nodes of a collective op: AllReduce, ReduceScatter,
    ShardedUpdate) that the plan's stated ordering leaves unordered, naming both; [] when a
    lane or a chain of happens-before edges orders each pair.

    Why every pair: a process group matches the collectives of its ranks by the order they are
    issued, not by name. Every rank runs the same plan (planner.runtime.distributed checks that each
    loaded the same plan text), so a pair the stated ordering fixes is issued in that one
    order on every rank; a pair it leaves open may be issued in either order on each rank:
    gloo aborts when the two buckets' sizes differ, and sums one rank's bucket with another's
    silently when they are equal.

    >>> from planner.ir.graph import Graph
    >>> g = Graph.model_validate({"name": "g", "tensors": [], "nodes": [
    ...     {"name": n, "op": "AllReduce", "inputs": [], "outputs": []} for n in "ab"]})
    >>> ops = [{"name": "a", "order": 0, "lane": 0}, {"name": "b", "order": 1, "lane": 1}]
    >>> collective_problems(g, StatedOrder({"ops": ops}))[0][:61]
    "collectives 'a' and 'b' are not ordered by anything the execu"
    """
    ops = sorted((n.name for n in graph.nodes if n.op in COLLECTIVE_OPS and n.name in hb.position),
                 key=hb.position.__getitem__)
    return [f"collectives {a!r} and {b!r} are not ordered by anything the executor enforces "
            f"(no lane or chain of happens-before edges leads from {a!r} to {b!r}): ranks "
            f"could issue them in different orders and pair one rank's bucket with another's"
            for i, a in enumerate(ops) for b in ops[i + 1:] if not hb.before(a, b)]
