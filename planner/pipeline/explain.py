"""`planner explain PLAN [NAME]`: why a plan decided what it did, re-derived from the plan's
own inputs rather than taken from its claims.

    inputs    the embedded graph, the target (its preset, or a file), the cost table: each
              must match the hash the plan recorded, and planning them again with the options
              the plan recorded must give this plan, byte for byte; else a one-line refusal
    op        its thread count, CPUs and lane; its predicted time at every thread count (the
              alternatives); its slack: on the critical path or how much later it could end
    tensor    kept, recomputed or offloaded; for a decision of the budget search, the bytes
              it saves and the seconds it costs, as the difference between the plan and the
              same search's decisions without this one, timed by the same simulator; and
              the budget at or above which the search stops before taking it
    conv      (GPU) its algorithm among the candidates: time and workspace of each
    gather    (ZeRO-3) an all-gather's prefetch: the ops it overlaps, the seconds its reader
              would wait, its memory bound (planner.report.explain_gather)

Why re-plan rather than record the reasons in the plan: the reasons are the planner's
intermediate state (the search's order of moves, the cost curves), larger than the plan and
derivable from its inputs; a plan file stays the reviewable decision, and explain checks that
it still follows from its inputs before it explains anything.

Example:
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.pipeline import plan
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=8, hidden=[16], in_features=8,
    ...                               classes=4), Optimizer(kind="sgd"))
    >>> p = plan(g, preset("xeon-8180"))
    >>> e = explain_op(rederive(p, preset("xeon-8180")), "fc1")
    >>> cores = preset("xeon-8180").cores
    >>> e["threads"] == p.ops[0].threads, len(e["seconds_by_threads"]) == cores
    (True, True)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.costs import CostModel, CostTable
from planner.errors import UserError
from planner.memory.budget.search import Move
from planner.memory.options import format_bytes
from planner.pipeline import BACKENDS, DECISIONS, PlanOptions, planning, run
from planner.plan import Plan, digest
from planner.report.explain_gather import explain_gather, format_gather
from planner.schedule.record import Schedule
from planner.target.backends import BACKEND_TRAITS
from planner.target.records import Target


@dataclass(frozen=True)
class Derived:
    """A plan with the planner's state that made it: cost model, schedule, options."""

    plan: Plan
    model: CostModel
    schedule: Schedule
    options: PlanOptions


def rederive(plan: Plan, target: Target, table: CostTable | None = None) -> Derived:
    """Plan the plan's embedded graph again on `target` with `table` and the recorded options;
    UserError (one line) when an input's hash or the result differs from the plan."""
    prov = plan.provenance
    if digest(plan.graph.to_json()) != prov.graph_sha256:
        raise UserError("the plan's embedded graph does not match its provenance.graph_sha256")
    if target.digest() != prov.target_sha256:
        host = (" (this host, measured again since by `planner target detect`, or another "
                "machine: save the target the plan was made with by `planner target detect "
                "-o FILE` where and when you plan)" if target.name == "host" else "")
        raise UserError(f"target {target.name!r} is not the one the plan was made for "
                        f"(target_sha256 {target.digest()[:12]} != {prov.target_sha256[:12]})"
                        f"{host}; give it with --target FILE")
    costs = digest(table.to_json()) if table is not None else ""
    if costs != prov.costs_sha256:
        raise UserError("the cost table is not the one the plan was made with (costs_sha256 "
                        f"{costs[:12] or 'none'} != {prov.costs_sha256[:12] or 'none'}); give "
                        "it with --costs FILE")
    try:
        options = PlanOptions.model_validate(prov.options)
    except ValueError:
        raise UserError("the plan's provenance.options are not planner options") from None
    if options.data_parallel.ranks_per_host > 1:
        raise UserError("explain handles plans of one rank per host; this one shares a host "
                        "among ranks (--ranks-per-host)")
    # The embedded graph is the step graph: the stages after it, but the evaluation's (a
    # training plan's evaluation schedule, planner/evaluation.py, is planned apart).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = run(planning(plan.graph, target, table, options, evaluation=False, check=False),
                    (*DECISIONS, "assemble"))
    assert again.plan is not None and again.model is not None and again.schedule is not None
    if again.plan.json_data != {k: v for k, v in plan.json_data.items() if k != "evaluation"}:
        raise UserError("planning the plan's inputs again does not give this plan (another "
                        "planner version, or an edited file): nothing to explain from")
    return Derived(plan, again.model, again.schedule, options)


# ---- ops ------------------------------------------------------------------------------------
def slack(plan: Plan) -> dict[str, float]:
    """Per op, how much later it could end without delaying the step, over the ordering the
    executor enforces (happens-before edges and each lane's order) at predicted durations;
    0 on the critical path."""
    ops = plan.ops
    index = {o.name: i for i, o in enumerate(ops)}
    preds: list[list[int]] = [[] for _ in ops]
    for e in plan.happens_before:
        preds[index[e.after]].append(index[e.before])
    last: dict[int, int] = {}
    for i, o in enumerate(ops):  # execution order: a lane's previous op comes first
        if o.lane in last:
            preds[i].append(last[o.lane])
        last[o.lane] = i
    dur = [o.end - o.start for o in ops]
    top = [0.0] * len(ops)
    for i in range(len(ops)):
        top[i] = max((top[u] + dur[u] for u in preds[i]), default=0.0)
    bottom = [0.0] * len(ops)
    succs: list[list[int]] = [[] for _ in ops]
    for i, ps in enumerate(preds):
        for u in ps:
            succs[u].append(i)
    for i in reversed(range(len(ops))):
        bottom[i] = dur[i] + max((bottom[w] for w in succs[i]), default=0.0)
    step = max((top[i] + bottom[i] for i in range(len(ops))), default=0.0)
    return {o.name: max(0.0, step - top[i] - bottom[i]) for i, o in enumerate(ops)}


def explain_op(d: Derived, name: str) -> dict[str, Any]:
    """Where and on how many threads op `name` runs, its time at each thread count, its slack."""
    from planner.schedule.costs import op_costs

    op = next((o for o in d.plan.ops if o.name == name), None)
    if op is None:
        raise UserError(f"no op {name!r} in the plan")
    out: dict[str, Any] = {"op": name, "type": op.op, "threads": op.threads, "lane": op.lane,
                           "cpus": list(op.cpus), "stream": op.stream, "smt": op.smt,
                           "seconds": op.end - op.start}
    graph = d.plan.graph
    node = next((i for i, n in enumerate(graph.nodes) if n.name == name), None)
    # (op.cpus: not a collective)
    if BACKEND_TRAITS[d.plan.backend].host_cores and node is not None and op.cpus:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            curve = op_costs(graph, d.model).times[node]
        out["seconds_by_threads"] = [float(t) for t in curve]
        out["fastest_threads"] = int(np.argmin(curve)) + 1
    s = slack(d.plan)[name]
    # Relative to the step: predicted times are sums of floats.
    out["slack_seconds"] = s
    out["critical"] = s <= 1e-9 * d.plan.summary.step_seconds
    return out


def format_op(e: dict[str, Any]) -> str:
    where = f"stream {e['stream']}" if e["stream"] else \
        f"{e['threads']} thread(s) on CPUs {_ranges(e['cpus'])}, lane {e['lane']}" + \
        (", SMT sibling" if e["smt"] else "")
    lines = [f"op {e['op']} ({e['type']}): {where}, predicted {e['seconds'] * 1e6:.1f} us"]
    curve = e.get("seconds_by_threads")
    if curve:
        k = e["threads"]
        lines.append("  the cost model's time by thread count (us): " + ", ".join(
            f"{n}:{t * 1e6:.1f}" for n, t in enumerate(curve, 1)
            if n in (1, 2, 4, 8, 16, 32, 64, len(curve), k, e["fastest_threads"])))
        if k != e["fastest_threads"]:
            lines.append(f"  alone it is fastest on {e['fastest_threads']} thread(s) "
                         f"({curve[e['fastest_threads'] - 1] * 1e6:.1f} us); it runs on {k} "
                         f"({curve[k - 1] * 1e6:.1f} us) so that other ops run beside it")
    lines.append("  on the critical path" if e["critical"] else
                 f"  not on the critical path: it could end {e['slack_seconds'] * 1e6:.1f} us "
                 f"later without delaying the step")
    return "\n".join(lines)


def _ranges(ids: list[int]) -> str:
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


# ---- tensors --------------------------------------------------------------------------------
def placement(plan: Plan, tensor: str) -> str:
    """kept, recomputed or offloaded: what memory planning did to a graph tensor."""
    from planner.report.placement import placements

    return placements(plan.json_data).get(tensor, "kept")


def _moves_of(state, tensor: str) -> list[int]:
    """Indices in the search's log of the moves that decided `tensor`."""
    out = []
    for k, m in enumerate(state.log):
        if m.kind == "offload" and m.tensor == tensor:
            out.append(k)
        elif m.kind == "recompute" and tensor in state.stash.segments[m.segment].members:
            out.append(k)
    return out


@dataclass(frozen=True)
class Counterfactual:
    """A budget decision's effect: the plan's decisions with and without it, by the same
    search's layout and simulator (planner.memory.cpu_budget.cpu_budget_solve)."""

    moves: tuple[Move, ...]
    with_seconds: float
    without_seconds: float
    with_load: int
    without_load: int
    with_arena: int
    without_arena: int
    # The arena of the decisions taken before it: from about this budget up, the search
    # stops before it.
    needed_below: int
    # The other tensors the same decision drops (one recompute segment).
    together: tuple[str, ...] = ()
    # The pins or region budgets that forced it ("": the search chose it).
    reasons: tuple[str, ...] = ()


def counterfactual(d: Derived, tensor: str) -> Counterfactual | None:
    """Replay the CPU budget search's decisions with and without those about `tensor` (None:
    no budget decision names it)."""
    from planner.memory.liveness import live_profile

    memory = d.options.memory
    solve = BACKENDS[d.plan.backend].budget_solve
    if solve is None or not d.plan.memory.ops \
            or (memory.budget_bytes is None and not memory.forces):
        return None
    graph = d.plan.graph
    solved, _ = solve(graph, d.schedule, d.model, memory)
    log = list(solved.state.log)
    mine = _moves_of(solved.state, tensor)
    if not mine:
        return None
    kept = [m for k, m in enumerate(log) if k not in mine]
    with_, _ = solve(graph, d.schedule, d.model, memory, moves=log, order=solved.order)
    without, _ = solve(graph, d.schedule, d.model, memory, moves=kept, order=solved.order)
    # The decisions before it, laid out and timed as a plan would be.
    before, _ = solve(graph, d.schedule, d.model, memory, moves=log[:mine[0]],
                      order=solved.order)

    def load(s) -> int:
        return int(live_profile(s.buffers)[1].max())

    st = solved.state.stash
    together = sorted({t for k in mine if log[k].kind == "recompute"
                       for t in st.segments[log[k].segment].stashed} - {tensor})
    return Counterfactual(tuple(log[k] for k in mine), with_.step_seconds,
                          without.step_seconds, load(with_), load(without), with_.arena,
                          without.arena, before.arena, tuple(together),
                          tuple(sorted({log[k].reason for k in mine if log[k].reason})))


def explain_tensor(d: Derived, tensor: str) -> dict[str, Any]:
    """A graph tensor's bytes, placement and, for a budget decision, its price."""
    plan = d.plan
    if tensor not in plan.graph.tensor_map:
        raise UserError(f"no op or tensor {tensor!r} in the plan")
    t = plan.graph.tensor(tensor)
    out: dict[str, Any] = {"tensor": tensor, "bytes": t.nbytes, "role": t.role,
                           "placement": placement(plan, tensor)}
    from planner.memory.pins import pin_of

    pin = pin_of([tensor], d.options.memory.pins).get(tensor)
    if pin is not None and pin.decision == "keep":
        out["pinned"] = f"--keep-tensor {pin.name}"
    c = counterfactual(d, tensor) if out["placement"] != "kept" else None
    if c is not None:
        out.update(seconds_paid=c.with_seconds - c.without_seconds,
                   bytes_saved=c.without_load - c.with_load,
                   arena_saved=c.without_arena - c.with_arena,
                   moves=[m.kind for m in c.moves], together=list(c.together))
        if c.reasons:
            out["pinned"] = ", ".join(c.reasons)
        else:  # the search's own: taken below some budget (a pinned one is taken at any)
            out["needed_below_bytes"] = c.needed_below
    return out


def format_tensor(e: dict[str, Any]) -> str:
    head = f"tensor {e['tensor']} ({e['role']}, {format_bytes(e['bytes'])}): {e['placement']}"
    if "pinned" in e:
        head += f", pinned by {e['pinned']}"
    if "seconds_paid" not in e:
        return head + ("" if e["placement"] == "kept" else
                       " (no decision of the CPU budget search to price)")
    lines = [
        head,
        f"  saves {e['bytes_saved']} bytes ({format_bytes(e['bytes_saved'])}) of the peak of "
        f"live bytes (arena: {format_bytes(e['arena_saved'])}), pays "
        f"{e['seconds_paid'] * 1e6:.1f} us of step time: the plan against the same decisions "
        f"without this one"]
    if e["together"]:
        lines.append(f"  one decision with {', '.join(e['together'])} (recomputed together)")
    if "needed_below_bytes" in e:
        lines.append(f"  taken for budgets below about {e['needed_below_bytes']} bytes "
                     f"({format_bytes(e['needed_below_bytes'])}), the arena of the decisions "
                     f"before it")
    return "\n".join(lines)


# ---- convolutions ---------------------------------------------------------------------------
def explain_conv(d: Derived, name: str) -> dict[str, Any] | None:
    """A GPU convolution's algorithm among its candidates (None: not a planned conv)."""
    from planner.costs.convalgo import conv_algorithms
    from planner.costs.signature import graph_signatures

    choice = next((c for c in d.plan.memory.convs if c.node == name), None)
    if choice is None:
        return None
    gpu = d.model.target.gpus[0]
    sig = graph_signatures(d.plan.graph, gpu)[name]
    algos = conv_algorithms(sig, gpu, d.model.table)
    return {"conv": name, "algorithm": choice.algorithm,
            "workspace_bytes": choice.workspace_bytes, "seconds": choice.seconds,
            "candidates": [{"algorithm": a.algorithm, "seconds": a.seconds,
                            "workspace_bytes": a.workspace_bytes} for a in algos]}


def format_conv(e: dict[str, Any]) -> str:
    lines = [f"conv {e['conv']}: {e['algorithm']}, {e['seconds'] * 1e6:.1f} us, workspace "
             f"{format_bytes(e['workspace_bytes'])}; the candidates:"]
    for a in e["candidates"]:
        why = "chosen" if a["algorithm"] == e["algorithm"] else \
            "slower" if a["seconds"] >= e["seconds"] else \
            "faster, but its workspace did not fit the free bytes at its step"
        lines.append(f"  {a['algorithm']:<24} {a['seconds'] * 1e6:>10.1f} us "
                     f"{format_bytes(a['workspace_bytes']):>11}  {why}")
    return "\n".join(lines)


# ---- the whole plan -------------------------------------------------------------------------
def explain(d: Derived, name: str | None = None) -> dict[str, Any]:
    """One op, tensor or conv by name; without a name, every budget decision and conv."""
    if name is not None:
        out: dict[str, Any] = {}
        if any(o.name == name for o in d.plan.ops):
            out["op"] = explain_op(d, name)
            if name in d.plan.graph.node_map and d.plan.graph.node_map[name].op == "AllGather":
                out["all_gather"] = explain_gather(d.plan, name)
            conv = explain_conv(d, name)
            if conv is not None:
                out["conv"] = conv
        # An op's output is often named as the op: both, then.
        if name in d.plan.graph.tensor_map or not out:
            out["tensor"] = explain_tensor(d, name)
        return out
    from planner.report.placement import placements

    decided = sorted(placements(d.plan.json_data))
    s = d.plan.summary
    return {"step_seconds": s.step_seconds, "strategy": s.strategy,
            "strategy_switch": s.strategy_switch,
            "budget_bytes": d.options.memory.budget_bytes,
            "critical_ops": sorted(k for k, v in slack(d.plan).items()
                                   if v <= 1e-9 * s.step_seconds),
            "tensors": [explain_tensor(d, t) for t in decided],
            "convs": [explain_conv(d, c.node) for c in d.plan.memory.convs]}


def format_explain(e: dict[str, Any]) -> str:
    if "op" in e or "tensor" in e:
        return "\n".join(([format_op(e["op"])] if "op" in e else [])
                         + ([format_gather(e["all_gather"])] if "all_gather" in e else [])
                         + ([format_conv(e["conv"])] if "conv" in e else [])
                         + ([format_tensor(e["tensor"])] if "tensor" in e else []))
    budget = e["budget_bytes"]
    lines = [f"plan ({e['strategy']}): step {e['step_seconds'] * 1e3:.3f} ms, "
             + (f"budget {format_bytes(budget)}" if budget else "no memory budget"),
             f"  {len(e['critical_ops'])} op(s) on the critical path"]
    if e.get("strategy_switch"):
        lines.insert(1, f"  strategy {e['strategy_switch']}")
    if not e["tensors"]:
        lines.append("  every tensor kept: no recompute, no offload")
    lines += [format_tensor(t) for t in e["tensors"]]
    lines += [format_conv(c) for c in e["convs"]]
    return "\n".join(lines)
