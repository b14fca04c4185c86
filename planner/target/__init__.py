"""Targets: the machine a plan is made for (records, presets, host detection).

`preset(name)` gives a described machine, `detect()` reads this host, `affinity_cpus` places an
op's threads on cores compactly or spread over cache groups.
"""

from planner.target.presets import PRESETS, preset  # noqa: F401
from planner.target.records import (  # noqa: F401
    AFFINITIES,
    CPU,
    GPU,
    Affinity,
    CpuId,
    LogicalCPU,
    Target,
    TargetProvenance,
    affinity_cpus,
)
