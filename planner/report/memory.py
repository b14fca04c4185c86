"""Reports of a memory-planned plan: the numbers (`memory_report`, `format_memory`) and seed
001's Fig. 10 as SVG (`memory_svg`): device bytes over the steps of forward and backward.

    GiB
     |-------------------------------------------  naive (every tensor its own bytes)
     |          ___
     |     ____/   \\____                          liveness
     |   _/  .......    \\_                        + offload
     |  / ..'       '..   \\                       + recompute
     | /.'   _______   '.  \\                      this plan (its budget's decisions)
     +-------- forward ----|---- backward -------> steps

Curves: `plan` is read from the plan's own buffers (live bytes while each op runs), `naive`
from its summary. A report reads the plan and plans nothing: the other three (liveness alone,
then every offload that lowers the peak, then every recompute too, on the plan's order) are
counterfactuals that memory planning computes (planner.memory.gpu.technique_curves) and the
caller passes in (`planner show --memory` does, for a GPU plan of a preset target).

Example:
    >>> from planner.costs import CostModel
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.memory.gpu import technique_curves
    >>> from planner.pipeline import plan
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("lenet", batch=8), Optimizer(kind="sgd"))
    >>> p = plan(g, preset("k40c-12gb"))
    >>> sorted(memory_curves(p))
    ['naive', 'plan']
    >>> replayed = technique_curves(g, graph_order(p), CostModel(preset("k40c-12gb")))
    >>> sorted(memory_curves(p, replayed))
    ['+ offload', '+ recompute', 'liveness', 'naive', 'plan']
    >>> memory_svg(p, replayed).startswith("<svg")
    True
"""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from planner.dtypes import DTYPE_BYTES
from planner.plan import Plan

MiB = 1 << 20


def plan_curve(plan: Plan) -> np.ndarray:
    """Device bytes live while each op (by execution order) runs, from the plan's buffers."""
    n = len(plan.ops)
    delta = np.zeros(n + 2, dtype=np.int64)
    for t in plan.tensors:
        if t.placement != "device" or t.alias_of:
            continue
        lo, hi = max(t.first, 0), min(t.last, n - 1)
        if hi < lo:
            hi = lo
        delta[lo] += t.bytes
        delta[hi + 1] -= t.bytes
    return np.cumsum(delta)[:n]


def device_memory(plan: Plan) -> str:
    """What a plan's arena is, for a chart's title: a GPU's device memory, or the host memory
    a CPU plan's arena takes."""
    from planner.target.backends import BACKEND_TRAITS

    return "host memory (arena)" if BACKEND_TRAITS[plan.backend].host_cores else "device memory"


def memory_curves(plan: Plan, replayed: dict[str, np.ndarray] | None = None
                  ) -> dict[str, np.ndarray]:
    """Per curve name, bytes per graph step (the plan's graph nodes in stream order): the plan's
    own and naive, read from the plan, and `replayed`, the counterfactual curves a caller
    computed (planner.memory.gpu.technique_curves: reports never plan)."""
    graph = plan.graph
    ordered = sorted(plan.ops, key=lambda o: o.order)
    node_at = [k for k, o in enumerate(ordered) if o.name in graph.node_map]
    curves = {"plan": plan_curve(plan)[node_at]}
    m = plan.summary.memory
    if m is not None:
        curves["naive"] = np.full(len(node_at), m.naive_bytes)
    return curves | (replayed or {})


def graph_order(plan: Plan) -> list[str]:
    """The plan's graph nodes in execution order (what technique_curves replays)."""
    return [o.name for o in sorted(plan.ops, key=lambda o: o.order)
            if o.name in plan.graph.node_map]


def memory_report(plan: dict[str, Any]) -> dict[str, Any]:
    """The memory block of `planner show --json`: the summary's numbers, added ops by kind,
    and per-convolution algorithm counts."""
    m = (plan.get("summary") or {}).get("memory")
    if not m:
        return {}
    extra = (plan.get("memory") or {}).get("ops", [])
    convs = (plan.get("memory") or {}).get("convs", [])
    kinds: dict[str, int] = {}
    for op in extra:
        kinds[op["kind"]] = kinds.get(op["kind"], 0) + 1
    algos: dict[str, int] = {}
    for c in convs:
        algos[c["algorithm"]] = algos.get(c["algorithm"], 0) + 1
    return {**m, "added_ops": kinds, "conv_algorithms": algos,
            "workspace_bytes": sum(c["workspace_bytes"] for c in convs),
            **optimizer_state(plan.get("graph") or {})}


def optimizer_state(graph: dict[str, Any]) -> dict[str, Any]:
    """The optimizer state one rank holds (bytes), and with --shard-optimizer what it would
    hold unsharded (each sharded update's state slots over its parameters) and the ranks.

    >>> g = {"tensors": [{"name": "p", "shape": [10], "role": "param"},
    ...                  {"name": "shard/0/grad", "shape": [16], "role": "grad"},
    ...                  {"name": "shard/0/m", "shape": [16], "role": "optimizer-state"}],
    ...      "nodes": [{"op": "ShardedUpdate", "inputs": ["p", "shard/0/grad", "shard/0/m"],
    ...                 "outputs": ["p2", "m2"], "attrs": {"ranks": 2}}]}
    >>> optimizer_state(g)
    {'optimizer_state_bytes': 64, 'unsharded_optimizer_state_bytes': 40, 'sharded_over': 2}
    """
    tensors = {t["name"]: t for t in graph.get("tensors", [])}

    def nbytes(name: str) -> int:
        t = tensors[name]
        return int(np.prod(t["shape"], dtype=np.int64)) * DTYPE_BYTES[t.get("dtype", "float32")]

    held = sum(nbytes(n) for n, t in tensors.items()
               if t.get("role") == "optimizer-state" and not t.get("updates"))
    out: dict[str, Any] = {"optimizer_state_bytes": held}
    sharded = [n for n in graph.get("nodes", []) if n.get("op") == "ShardedUpdate"]
    if sharded:
        unsharded = held
        for n in sharded:
            slots = len(n["outputs"]) - sum(tensors[t].get("role") == "param"
                                            for t in n["inputs"])
            k = len(n["outputs"]) - slots
            unsharded += slots * sum(nbytes(t) for t in n["inputs"][:k])
            unsharded -= sum(nbytes(t) for t in n["inputs"][k + 1:k + 1 + slots])
        out |= {"unsharded_optimizer_state_bytes": unsharded,
                "sharded_over": max(int(n["attrs"]["ranks"]) for n in sharded)}
    return out


def format_memory(plan: dict[str, Any]) -> str:
    """Text lines for the plan summary ("" when memory was not planned)."""
    r = memory_report(plan)
    if not r:
        return ""

    def mib(key: str) -> str:
        return f"{r[key] / MiB:,.1f} MiB"

    budget = f"{r['budget_bytes'] / MiB:,.1f} MiB" if r.get("budget_bytes") else "none"
    lines = [f"  memory      naive {mib('naive_bytes')}; liveness LOAD "
             f"{mib('liveness_load_bytes')}; LOAD {mib('load_bytes')}",
             f"              arena {mib('arena_bytes')} (fragmentation "
             f"{r['fragmentation']:.2%}, {r['allocator']}); budget {budget}",
             f"              per-op bound {mib('per_op_bound_bytes')} (resident "
             f"{mib('resident_bytes')}); peak / bound "
             f"{r['peak_bytes'] / max(r['per_op_bound_bytes'], 1):.3f}"]
    if r.get("sharded_over"):
        lines.append(f"              optimizer state {mib('optimizer_state_bytes')} per rank, "
                     f"sharded over {r['sharded_over']} ranks "
                     f"({mib('unsharded_optimizer_state_bytes')} unsharded)")
    if r.get("offloaded_tensors") or r.get("recompute_ops"):
        lines.append(f"              {r['offloaded_tensors']} offloaded ({mib('host_bytes')} "
                     f"pinned host), {r['recompute_ops']} recompute ops "
                     f"({r['recompute_seconds'] * 1e3:.3f} ms), stalls "
                     f"{r['stall_seconds'] * 1e3:.3f} ms")
    if r["conv_algorithms"]:
        algos = ", ".join(f"{k} x{v}" for k, v in sorted(r["conv_algorithms"].items()))
        lines.append(f"              convolutions: {algos}; workspaces "
                     f"{r['workspace_bytes'] / MiB:,.1f} MiB in all")
    return "\n".join(lines)


COLORS = {"naive": "#888888", "liveness": "#1f77b4", "+ offload": "#ff7f0e",
          "+ recompute": "#2ca02c", "plan": "#d62728"}


def memory_svg(plan: Plan, replayed: dict[str, np.ndarray] | None = None, width: int = 900,
               height: int = 420) -> str:
    """Seed 001 Fig. 10: device memory over the steps of forward and backward, per curve (the
    plan's, naive, and `replayed`: see memory_curves)."""
    curves = memory_curves(plan, replayed)
    graph = plan.graph
    from planner.ir.phases import node_phase

    names = graph_order(plan)
    forward = sum(1 for n in names if node_phase(graph, graph.node_map[n]) == "forward")
    steps = len(names)
    top = max((float(c.max()) for c in curves.values() if len(c)), default=1.0) * 1.08 or 1.0
    left, right, up, down = 70, 170, 30, 45
    w, h = width - left - right, height - up - down

    def x(i: float) -> float:
        return left + w * i / max(steps - 1, 1)

    def y(v: float) -> float:
        return up + h * (1 - v / top)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="18">{escape(graph.name)} on {escape(plan.target.name)}: '
           f'{device_memory(plan)} per step</text>',
           f'<line x1="{left}" y1="{up + h}" x2="{left + w}" y2="{up + h}" stroke="black"/>',
           f'<line x1="{left}" y1="{up}" x2="{left}" y2="{up + h}" stroke="black"/>']
    for k in range(5):
        v = top * k / 4
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
                   f'{v / (1 << 30):.2f}</text>')
    out.append(f'<text x="14" y="{up + h / 2}" transform="rotate(-90 14 {up + h / 2})">'
               f'GiB</text>')
    if 0 < forward < steps:
        out.append(f'<line x1="{x(forward - 0.5):.1f}" y1="{up}" x2="{x(forward - 0.5):.1f}" '
                   f'y2="{up + h}" stroke="#bbb" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{left + w / 4}" y="{height - 12}">forward</text>')
    out.append(f'<text x="{left + 3 * w / 4}" y="{height - 12}">backward</text>')
    for k, (name, curve) in enumerate(sorted(curves.items(), key=lambda c: _rank(c[0]))):
        points = " ".join(f"{x(i):.1f},{y(float(v)):.1f}" for i, v in enumerate(curve))
        color = COLORS.get(name, "black")
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" '
                   f'points="{points}"/>')
        ly = up + 16 * k + 8
        out.append(f'<line x1="{left + w + 14}" y1="{ly}" x2="{left + w + 34}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"/>')
        peak = float(curve.max()) / (1 << 30) if len(curve) else 0.0
        out.append(f'<text x="{left + w + 40}" y="{ly + 4}">{escape(name)} '
                   f'({peak:.2f})</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _rank(name: str) -> int:
    order = ["naive", "liveness", "+ offload", "+ recompute", "plan"]
    return order.index(name) if name in order else len(order)
