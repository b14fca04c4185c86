"""The import graph of planner/ and codegen/ points down the pipeline, and has no cycle.

Layers, lowest first (a module may import its own layer or a lower one):

    base      records, errors, files; graph/, ops/, target/, zoo/, importers/, frontend/; within
              it, ir < ops < passes < importers < frontend (BASE_ORDER)
    costs     planner/costs/
    schedule  planner/schedule/
    memory    planner/memory/
    plan      the Plan record and what reads finished plans: plan.py, planner/verify/ (the
              independent checker), planner/report/ (diff, memory reports, replay, plots,
              placement words, a ZeRO-3 plan's gathers), evaluation.py (a training plan's
              evaluation record)
    driver    the pipeline and what runs it: pipeline.py, fit.py and curve.py (searches over
              whole plans), report/explain.py (re-plans a plan to say why)
    codegen   codegen/ (its profiling plans the placements it times through the driver)
    command   planner/cli/ (every command) and the entry points where planner and codegen
              meet: planner/cli/main.py (wires codegen's commands and measurers in) and
              planner/torch/ (its trainer plans, builds and loads a module's executor from
              Python, reading `planner plan`'s settings: training.py, settings.py; the
              package re-exports it); the other command modules may not import
              codegen

Every import counts, at module level or inside a function: an import deferred into a
function is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("base", "costs", "schedule", "memory", "plan", "driver", "codegen", "command")
FOLDERS = {"planner.costs": "costs", "planner.schedule": "schedule", "planner.memory": "memory"}
PLAN = {"planner.plan", "planner.evaluation"}
# planner/report/ is of the plan layer, but for explain (DRIVER).
REPORT = "planner.report"
ENTRY_POINTS = {"planner.cli.main", "planner.torch", "planner.torch.training",
                "planner.torch.settings"}
DRIVER = {"planner.pipeline", "planner.fit", "planner.curve", "planner.report.explain"}


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of planner/ and codegen/."""
    out = {}
    for package in ("planner", "codegen"):
        for f in sorted((ROOT / package).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def layer(module: str) -> str:
    """The layer of a module (module docstring)."""
    if module.startswith("codegen"):
        return "codegen"
    if module in ENTRY_POINTS or module == "planner.cli" or module.startswith("planner.cli."):
        return "command"
    if module in DRIVER:
        return "driver"
    if module in PLAN or module.startswith(("planner.verify", REPORT)):
        return "plan"
    for folder, name in FOLDERS.items():
        if module == folder or module.startswith(folder + "."):
            return name
    return "base"


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `module` imports, anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            named.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            named.add(base)
            named.update(f"{base}.{a.name}" for a in node.names)
    out = set()
    for name in named:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def import_graph() -> nx.DiGraph:
    known = modules()
    g = nx.DiGraph()
    g.add_nodes_from(known)
    for module, path in known.items():
        g.add_edges_from((module, m) for m in imports(module, path, known))
    return g


def upward(g: nx.DiGraph) -> list[str]:
    """Imports of a higher layer, and command modules other than the entry points importing
    codegen."""
    rank = {name: k for k, name in enumerate(LAYERS)}
    bad = []
    for a, b in sorted(g.edges):
        if rank[layer(b)] > rank[layer(a)]:
            bad.append(f"{a} ({layer(a)}) imports {b} ({layer(b)})")
        elif a.startswith("planner") and b.startswith("codegen") and a not in ENTRY_POINTS:
            bad.append(f"{a} imports {b}: only the entry points wire codegen in")
    return bad


def test_no_module_imports_a_later_layer():
    assert upward(import_graph()) == []


def test_no_import_cycles_between_modules():
    g = import_graph()
    # A package's __init__ re-exports its modules: the package importing its own module is
    # not a cycle of the layering.
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if b.startswith(a + ".")])
    assert list(nx.simple_cycles(g)) == []


def test_the_checks_see_function_level_and_upward_imports(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from codegen.render import render\n"
                                   "    from planner.pipeline import plan\n")
    known = modules()
    found = imports("planner.schedule.a", tmp_path / "a.py", known)
    assert found == {"codegen.render", "planner.pipeline"}
    g = nx.DiGraph([("planner.schedule.a", m) for m in sorted(found)])
    assert upward(g) == ["planner.schedule.a (schedule) imports codegen.render (codegen)",
                         "planner.schedule.a (schedule) imports planner.pipeline (driver)"]
    assert upward(nx.DiGraph([("planner.cli.fit", "codegen.build")])) == [
        "planner.cli.fit imports codegen.build: only the entry points wire codegen in"]
    assert layer("planner.memory.gpu") == "memory" and layer("planner.report.memory") == "plan"


# What the independent checker may read of the graph layer: the IR and its validity rules, not
# the builders of what it checks (the evaluation graph, autodiff, the data-parallel rewrite).
VERIFY_READS_OF_GRAPH = {"planner.graph.ir", "planner.graph.validate"}


def stage_imports(g: nx.DiGraph) -> list[str]:
    """planner verify importing memory planning or a graph builder, and codegen importing
    memory planning: each takes what it needs from the plan (docs/architecture.md)."""
    bad = []
    for a, b in sorted(g.edges):
        if a.startswith("planner.verify") and (
                b.startswith("planner.memory") or (b.startswith("planner.graph")
                                                   and b not in VERIFY_READS_OF_GRAPH)):
            bad.append(f"{a} imports {b}, a stage it checks")
        elif a.startswith("codegen") and b.startswith("planner.memory"):
            bad.append(f"{a} imports {b}: codegen reads memory decisions from the plan")
    return bad


def test_the_checker_and_codegen_import_no_stage_they_read():
    assert stage_imports(import_graph()) == []
    assert stage_imports(nx.DiGraph([("planner.verify.pins", "planner.memory.pins"),
                                     ("codegen.layout", "planner.memory.liveness")])) == [
        "codegen.layout imports planner.memory.liveness: codegen reads memory decisions from "
        "the plan",
        "planner.verify.pins imports planner.memory.pins, a stage it checks"]


# The base layer in order, lowest first: the IR and its vocabulary, the ops (with the builder and
# the validity rules, which read the ops' shape rules), the graph passes, the importers (ONNX,
# torch.export, the zoo's builders), the front end (prepare, its options, loading a model, the
# user's JSON). A module of the base layer not named here is not ordered within it.
BASE_ORDER = ("ir", "ops", "passes", "importers", "frontend")
BASE_IR = {"planner.graph.ir", "planner.graph.accumulation", "planner.records", "planner.errors",
           "planner.dtypes"}
BASE_OPS = {"planner.graph.builder", "planner.graph.validate"}


def base_level(module: str) -> str | None:
    """Where a base-layer module stands in BASE_ORDER (None: not ordered)."""
    if module == "planner.frontend" or module.startswith("planner.frontend."):
        return "frontend"
    if module.startswith(("planner.importers", "planner.torch", "planner.zoo")):
        return "importers"
    if module in BASE_IR:
        return "ir"
    if module in BASE_OPS or module == "planner.ops" or module.startswith("planner.ops."):
        return "ops"
    if module == "planner.graph" or module.startswith("planner.graph."):
        return "passes"
    return None


def base_upward(g: nx.DiGraph) -> list[str]:
    rank = {name: k for k, name in enumerate(BASE_ORDER)}
    bad = []
    for a, b in sorted(g.edges):
        if layer(a) != "base" or layer(b) != "base":
            continue
        la, lb = base_level(a), base_level(b)
        if la is not None and lb is not None and rank[lb] > rank[la]:
            bad.append(f"{a} ({la}) imports {b} ({lb})")
    return bad


def test_the_base_layer_points_down_too():
    assert base_upward(import_graph()) == []
    assert base_upward(nx.DiGraph([("planner.ops.conv", "planner.graph.autodiff"),
                                   ("planner.graph.autodiff", "planner.frontend.prepare"),
                                   ("planner.frontend.prepare", "planner.importers.onnx")])) == [
        "planner.graph.autodiff (passes) imports planner.frontend.prepare (frontend)",
        "planner.ops.conv (ops) imports planner.graph.autodiff (passes)"]
