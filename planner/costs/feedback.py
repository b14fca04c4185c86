"""Feedback: an executor's measured op times folded into the cost table, so that re-planning
prices ops by what they took in the real step (co-running neighbours included), not by what
they took alone or by the analytical model.

`fold_stats(table, plan, stats)`: per op of the plan that ran (stats["ops"][k] with calls > 0),
its signature and placement (threads, and the affinity its CPUs form) get the measured mean
seconds, less the co-running slowdown the plan's simulator charged it (`_alone_share`: the
table holds times alone); ops of one signature and placement are averaged, weighted by their
calls. Each sample also keeps the scratch bytes its kernel asked for (stats' scratch_bytes,
the largest over those ops), by which plans then size the op's scratch area. A table with a
team scale (CostTable.team_scale) keeps each multi-thread time over its team factor, so that
it prices as the step ran. Samples the
table already has for that signature and placement are replaced (the latest run wins, as in
planner.costs.records.merge).

Example:
    >>> from planner.pipeline import plan
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> p = plan(build("mlp", batch=2, hidden=[4], in_features=3, classes=2), preset("xeon-8180"))
    >>> stats = {"ops": [{"name": o.name, "calls": 3, "seconds": 1e-5} for o in p.ops]}
    >>> t = fold_stats(CostTable(target="xeon-8180"), p, stats)
    >>> len(t.entries) > 0, t.entries[0].cpu[0].seconds
    (True, 1e-05)
"""

from __future__ import annotations

import datetime
from typing import Any

from planner import __version__
from planner.costs.records import CostEntry, CostTable, CpuSample, Provenance, merge
from planner.costs.signature import graph_signatures
from planner.errors import UserError
from planner.target.backends import BACKEND_TRAITS


def fold_stats(table: CostTable, plan, stats: dict[str, Any], date: str | None = None
               ) -> CostTable:
    """`table` with the measured times of `stats` (an executor's stats() of `plan`)."""
    if table.target != plan.target.name:
        raise UserError(f"cost table is for {table.target!r}, the plan for "
                        f"{plan.target.name!r}")
    if not BACKEND_TRAITS[plan.backend].timed_on_host:
        raise UserError("only CPU plans' measured times fold into a cost table so far")
    ops = {o.name: o for o in plan.ops}
    sigs = graph_signatures(plan.graph)
    cores = len(set(plan.target.core_of))
    acc: dict[tuple[str, int, str], list[float]] = {}
    scratch: dict[tuple[str, int, str], int] = {}
    for row in stats.get("ops", []):
        if not isinstance(row, dict) or row.get("name") not in ops:
            raise UserError(f"stats row {row!r} names no op of the plan (stats of another "
                            f"plan?)")
        calls, seconds = int(row.get("calls", 0)), float(row.get("seconds", 0.0))
        if calls <= 0 or not seconds > 0:
            continue
        op = ops[row["name"]]
        affinity = _affinity(plan, op.cpus)
        key = (sigs[op.name].key, op.threads, affinity)
        need = row.get("scratch_bytes")
        if isinstance(need, int) and not isinstance(need, bool) and need >= 0:
            scratch[key] = max(scratch.get(key, 0), need)
        total = acc.setdefault(key, [0.0, 0.0])
        # In the table's terms: a table with a team scale prices its multi-thread samples x
        # team_factor, so the sample that prices as the step ran is the time over it.
        factor = table.team_factor(op.threads, cores)
        total[0] += seconds * _alone_share(table, sigs[op.name], op, affinity, factor) \
            / factor * calls
        total[1] += calls
    by_sig = {s.key: s for s in sigs.values()}
    entries: dict[str, list[CpuSample]] = {}
    for (sig, threads, affinity), (seconds, calls) in sorted(acc.items()):
        entries.setdefault(sig, []).append(CpuSample(
            threads=threads, affinity=affinity, seconds=seconds / calls, repeats=int(calls),
            scratch_bytes=scratch.get((sig, threads, affinity))))
    stamp = date or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    update = CostTable(
        target=table.target,
        provenance=(Provenance(target=table.target, tool=f"planner {__version__}", date=stamp,
                               source="executor stats() of a run of the plan"),),
        entries=tuple(CostEntry(signature=by_sig[k], cpu=tuple(v)) for k, v in entries.items()))
    return merge(table, update)


def _alone_share(table: CostTable, signature, op, affinity: str, factor: float = 1.0
                 ) -> float:
    """The share of `op`'s measured time that it would have taken alone, as the plan's
    simulator saw it: its time alone in `table` over its planned span (longer where the
    simulator charged co-running ops for the memory and cores they share, or an SMT sibling).
    The table holds times alone and the simulator adds the sharing, so a co-running op's
    measured time, which carries its slowdown already, is scaled back by what the simulator
    charged; else re-planning would charge it twice (DCGAN's re-planned step predicted 1.27x
    what it measured). 1 where the plan charged nothing or the table has no such sample.
    `factor`: what the table priced the sample at over its seconds (CostTable.team_factor)."""
    span = op.end - op.start
    entry = table.entry(signature)
    if op.group or span <= 0 or entry is None:
        return 1.0
    for sample in entry.cpu:
        if sample.threads == op.threads and sample.affinity == affinity:
            return min(1.0, sample.seconds * factor / span)
    return 1.0


def _affinity(plan, cpus: tuple[int, ...]) -> str:
    # Compact: the CPUs' physical cores are as few cache groups as can hold them; a spread
    # placement uses more. Without the cache-group map in the plan, cores decide: CPUs on
    # consecutive physical cores are compact.
    cores = sorted({plan.target.core_of[c] for c in cpus if c < len(plan.target.core_of)})
    return "compact" if not cores or cores[-1] - cores[0] == len(cores) - 1 else "spread"
