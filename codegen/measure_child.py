"""The background measurement's child (codegen/measure_later.py): measures, at the lowest
priority, what this host's store lacks for each group of graphs a parent left in FOLDER, and
keeps it there (planner.costs.host_costs.host_table, as a plan measuring first would).

    python -m codegen.measure_child FOLDER PARENT_PID [AFTER_PID]

FOLDER holds target.json and, per group k, groupK.graphI.json (its priced graphs, the step's
first) and groupK.feeds.npz (example feeds for the contention fit), and per replan k
replanK.json (measure_later.Replan: a plan to make and build from the measurements, found by
the next process by its name). The folder is removed at the end; on failure it is left, with
log.txt, for the parent to read, unless the parent is gone. AFTER_PID: a child started as its
parent ended (0: none to wait for), which waits for that process (the child before it) to end
first. Each child builds its replans before it ends: a parent still running plans the same
graphs again itself when it sees the job end, from the same store, and finds their packages by
name, so no build of a measured plan lands on its steps.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
import warnings
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
    # Before the job ends: a parent still running plans these graphs again when it sees the
    # end, and then loads what is built here (its compile off the steps' critical path).
    build_ahead(folder, target)


def build_ahead(folder: Path, target) -> None:
    """Each replan of `folder` planned from the store as its door would plan it now, and its
    package built into the shared cache, where the next process finds it by name. A replan
    whose graphs the store still lacks (a measurement that failed) is left to that process."""
    from codegen.build import runtime_key
    from codegen.cached import load_built, package_name
    from codegen.measure_later import Replan
    from planner.costs.host_costs import kept_pricing
    from planner.pipeline import plan, priced_graphs

    k = 0
    while (path := folder / f"replan{k}.json").is_file():
        k += 1
        replan = Replan.model_validate_json(path.read_text(encoding="utf-8"))
        pricing = kept_pricing(priced_graphs(replan.graph, target, replan.options,
                                             replan.evaluation), target, kernels=runtime_key())
        if pricing.unmeasured or pricing.fit:
            print(f"not built ahead: {replan.graph.name!r} still lacks measurements")
            continue
        with warnings.catch_warnings():  # as the doors plan: unpriced ops by the model
            warnings.simplefilter("ignore")
            planned = plan(replan.graph, target, pricing.table, replan.options,
                           evaluation=replan.evaluation)
        name = package_name(planned, replan.prefix)
        load_built(planned, None, name)
        print(f"built ahead: {replan.graph.name!r} as {name}", flush=True)


def main(argv: list[str]) -> int:
    folder, parent = Path(argv[0]), int(argv[1])
    # The lowest priority, set here rather than between the parent's fork and exec
    # (preexec_fn), which is unsafe in a process running threads (its OpenMP teams).
    os.nice(19)
    at_exit = len(argv) > 2  # started as its parent ended
    if at_exit and int(argv[2]):  # after the child before it, not beside
        _wait_for(int(argv[2]))
    try:
        measure(folder)
    except BaseException:  # noqa: BLE001 - told to the parent through the log
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
        if os.getppid() == parent:
            return 1
    shutil.rmtree(folder, ignore_errors=True)
    return 0


def _wait_for(pid: int) -> None:
    """Until process `pid` has ended."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:  # alive, another user's: not ours to wait on
            return
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
