"""CostTable.team_scale fitted from two measured steps: how much slower a step ran its ops on
all the cores than a cost table's times say, over how much slower it ran them on one thread.
codegen.profiling.step_contention measures the two steps; this prices them.

Why the ratio and not each: what the store's times miss of every step alike (the step's
weights and saved activations cold, the load) moves no choice; what differs by thread count
does. On the 2-core development VM the store's two-thread times of wide_deep's mid-size GEMMs
and weight updates sat 14% under the step's, its one-thread times right (the harness's operands
stay in both cores' caches from one repetition to the next): the default plan ran its backward
GEMMs on two threads one after the other where the step's own profile runs them side by side,
3-10% slower; LSTM's sat 6.5% the other way. Priced with the scale, the default plans of the
strategies table ran 0.96-1.03x the in-step plans', from a kept store or an empty one
(wide_deep 1.05 before), mobilenet_v2's 1.004 against 1.110 without it (bench/RESULTS.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import NamedTuple

from planner.costs.model import CostModel, MissingCostWarning
from planner.costs.records import CostTable
from planner.costs.signature import OpSignature
from planner.target.records import Target


class Ran(NamedTuple):
    """An op of a measured step: its signature, where it ran, and the seconds it took there
    (0: not measured)."""

    signature: OpSignature
    threads: int
    affinity: str
    seconds: float


def team_scale(target: Target, costs: CostTable, lone: Sequence[Ran],
               wide: Sequence[Ran]) -> float:
    """CostTable.team_scale of the step whose ops ran `wide` (on all the cores) and `lone`
    (on one thread): each a ratio of sums over the ops `costs` measured (not the analytical
    model's), at the step's thread count (module docstring).

    >>> from planner.costs.records import CostEntry, CpuSample
    >>> from planner.target.presets import preset
    >>> sig = OpSignature(op="Relu", shapes=((1 << 16,),), dtypes=("float32",))
    >>> target = preset("xeon-8180")
    >>> costs = CostTable(target=target.name, entries=(CostEntry(signature=sig, cpu=(
    ...     CpuSample(threads=1, affinity="compact", seconds=4e-6),
    ...     CpuSample(threads=target.cores, affinity="compact", seconds=1e-6))),))
    >>> lone = [Ran(sig, 1, "compact", 5e-6)] * 2
    >>> wide = [Ran(sig, target.cores, "compact", 1.5e-6)] * 2
    >>> team_scale(target, costs, lone, wide)   # 1.25x at one thread, 1.5x on all
    1.2
    """
    model = CostModel(target, costs.model_copy(update={"team_scale": None}))

    def over(ops: Sequence[Ran], threads: int) -> float:
        ran = priced = 0.0
        for o in ops:
            if o.threads == threads and o.seconds > 0:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MissingCostWarning)
                    p = model.time(o.signature, threads, o.affinity)
                if p.source != "analytical":
                    ran, priced = ran + o.seconds, priced + p.seconds
        return ran / priced if priced > 0 else 1.0

    return round(over(wide, target.cores) / over(lone, 1), 6)
