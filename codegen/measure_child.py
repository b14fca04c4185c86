"""The background measurement's child (codegen/measure_later.py): measures, at the lowest
priority, what this host's store lacks for each group of graphs a parent left in FOLDER, and
keeps it there (planner.costs.host_costs.host_table, as a plan measuring first would).

    python -m codegen.measure_child FOLDER PARENT_PID

FOLDER holds target.json and, per group k, groupK.graphI.json (its priced graphs, the step's
first) and groupK.feeds.npz (example feeds for the contention fit). The folder is removed at
the end; on failure it is left, with log.txt, for the parent to read, unless the parent is
gone.
"""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from pathlib import Path


def measure(folder: Path) -> None:
    import numpy as np

    from codegen.build import runtime_key
    from codegen.profiling import measure_signatures, step_contention
    from planner.costs.host_costs import host_table
    from planner.ir.graph import Graph
    from planner.target.records import Target

    target = Target.from_json((folder / "target.json").read_text(encoding="utf-8"))
    k = 0
    while (folder / f"group{k}.graph0.json").is_file():
        graphs = []
        while (path := folder / f"group{k}.graph{len(graphs)}.json").is_file():
            graphs.append(Graph.from_json(path.read_text(encoding="utf-8")))
        with np.load(folder / f"group{k}.feeds.npz") as data:
            feeds = {name: data[name] for name in data.files}

        def corun(step, target, table, progress, feeds=feeds):
            return step_contention(step, target, table, progress, feeds=feeds)

        host_table(graphs, target, measure_signatures, progress=sys.stdout, corun=corun,
                   kernels=runtime_key())
        k += 1


def main(argv: list[str]) -> int:
    folder, parent = Path(argv[0]), int(argv[1])
    # The lowest priority, set here rather than between the parent's fork and exec
    # (preexec_fn), which is unsafe in a process running threads (its OpenMP teams).
    os.nice(19)
    try:
        measure(folder)
    except BaseException:  # noqa: BLE001 - told to the parent through the log
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
        if os.getppid() == parent:
            return 1
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
