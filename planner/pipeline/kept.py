"""Plans kept per host: a graph planned again (the next process of a torch.compile'd script, a
notebook's restart) reads the plan it got before instead of planning it again (a small CNN's
forward and backward: 0.3-0.4 s of a restarted script's first step, on the 2-core VM).

`plan` is a pure function of its graph, target, cost table and options (driver.py), so its
result is kept under a key of the four's canonical JSON and the digest of the planner's own
sources: every module planning may import, which is all of planner/ but the command layer
(planner/cli, planner/torch: tests/test_layers.py keeps the driver from importing them).
Another graph, another measured cost table, other options, an edited planner: another key.
The plan's text is kept as <cache>/records/KEY/plan.json, beside traced programs' records
(planner/importers/torch/record_cache.py), listed, marked used and pruned with them
(planner/io/disk_cache.py). A kept plan that cannot be read, is not a valid Plan, or whose
provenance does not name this target, this cost table and its own embedded graph is planned
again and written again; where there is no cache folder, or it cannot be written, the graph is
planned as if nothing were kept.

    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> key(g, preset("xeon-8180"), None, PlanOptions()) == key(g, preset("xeon-8180"), None,
    ...                                                          PlanOptions())
    True
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from planner.costs import CostTable
from planner.ir.graph import Graph
from planner.pipeline.driver import plan
from planner.pipeline.options import PlanOptions
from planner.plan import Plan
from planner.target.records import Target

# Bumped when what is kept changes its form (older plans are then another key, never misread).
FORMAT = 1
FILE = "plan.json"
# planner/'s folders that planning never imports (the command layer): their edits keep keys.
COMMANDS = ("cli", "torch")


def kept_plan(graph: Graph, target: Target, costs: CostTable | None,
              options: PlanOptions) -> Plan:
    """plan(graph, target, costs, options): the one kept on this host for the same four and
    the same planner, else planned now and kept."""
    folder = _folder(graph, target, costs, options)
    found = _load(folder, target, costs) if folder is not None else None
    if found is not None:
        return found
    planned = plan(graph, target, costs, options)
    if folder is not None:
        _store(folder, planned)
    return planned


def key(graph: Graph, target: Target, costs: CostTable | None, options: PlanOptions) -> str:
    """The key of everything `plan` reads (module docstring)."""
    h = hashlib.sha256(f"plan\0{FORMAT}\0{_sources_digest()}\0".encode())
    for part in (graph.to_json(), target.model_dump_json(),
                 costs.model_dump_json() if costs is not None else "none",
                 options.model_dump_json()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def _folder(graph: Graph, target: Target, costs: CostTable | None, options: PlanOptions
            ) -> Path | None:
    from planner.errors import UserError
    from planner.io.disk_cache import records_root

    try:
        return records_root() / key(graph, target, costs, options)
    except UserError:  # no cache folder (no home, $PLANNER_CACHE not a folder)
        return None


def _load(folder: Path, target: Target, costs: CostTable | None) -> Plan | None:
    """The plan kept in `folder`, where it reads as a Plan whose provenance names `target`,
    `costs` and its own embedded graph (as planner.plan.load_plan checks a plan file's)."""
    from pydantic import ValidationError

    from planner.errors import PlanError, UserError
    from planner.io.disk_cache import mark_used
    from planner.plan import digest

    try:
        found = Plan.from_json((folder / FILE).read_text())
    except (OSError, ValueError, ValidationError, PlanError, UserError):
        return None
    made = found.provenance
    if (made.target_sha256 != target.digest()
            or made.costs_sha256 != (digest(costs.to_json()) if costs is not None else "")
            or made.graph_sha256 != digest(found.graph.to_json())):
        return None
    mark_used(folder)
    return found


def _store(folder: Path, planned: Plan) -> None:
    from planner.errors import NotWritten
    from planner.io.write import atomic_write

    try:
        atomic_write(folder / FILE, planned.to_json())
    except NotWritten:
        pass  # a read-only cache: the next process plans again


_SOURCES: list[str] = []


def _sources_digest() -> str:
    """The digest of the planner's sources that planning may run (module docstring), read
    once a process."""
    if not _SOURCES:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent.parent
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(root)
            if relative.parts[0] in COMMANDS:
                continue
            h.update(str(relative).encode() + b"\0" + path.read_bytes())
        _SOURCES.append(h.hexdigest())
    return _SOURCES[0]
