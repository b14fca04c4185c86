"""The import graph of planner/ and codegen/ points down the pipeline, and has no cycle.

Layers, lowest first; a module may import its own layer or a lower one. A layer is made of
folders (a folder's modules are its layer's), and of the few files directly under planner/:

    ir         planner/ir/ (the Graph records, Record and canonical JSON, gradient
               accumulation), errors.py, dtypes.py, and planner/__init__.py (its version; the
               names it re-exports from its own folders do not count)
    ops        planner/ops/ (one definition per op: shape rules, costs' vocabulary)
    graph      planner/graph/ (the builder, the validity rules, the passes, autodiff, the
               numpy reference interpreter)
    io         planner/io/ (reading the user's files into checked records, writing them safely)
    target     planner/target/ (presets, detection, the host cache)
    importers  planner/importers/ (the importer kit, ONNX, ATen, the .pt2 reader) and
               planner/zoo/ (the built-in models' builders)
    frontend   planner/frontend/ (a GRAPH argument loaded, the passes under GraphOptions)
    step       planner/step/ (the step graph's passes, under what planning chose for a target)
    costs      planner/costs/
    schedule   planner/schedule/
    memory     planner/memory/
    plan       the Plan record and what reads finished plans: plan.py, evaluation.py,
               planner/verify/ (the independent checker), planner/report/ (diff, memory
               reports, replay, plots, traces, placement words, a ZeRO-3 plan's gathers) and
               planner/runtime/ (what a generated package and its executor call at run time)
    driver     the pipeline and what runs it: planner/pipeline/ (with limits.py, beside.py,
               collection.py; explain.py re-plans a plan to say why), fit.py and curve.py
               (searches over whole plans)
    codegen    codegen/ (its profiling plans the placements it times through the driver)
    command    planner/cli/ (every command) and planner/torch/ (the trainer: plans, builds and
               loads a module's executor from Python); of these only planner/torch/ and
               cli/main.py (wiring codegen's commands and measurers in) may import codegen

No two folders import each other (both ways), whatever their layers, and inside every folder,
at every depth, its modules and subfolders import each other without a cycle, none importing
back up into a package __init__ that imports it. Every import counts, at module level or inside
a function: an import deferred into a function is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
# Layer -> the folders (packages) and files it is made of, lowest layer first. A module is of
# the layer of the longest name here that it is, or is under.
LAYERS: dict[str, tuple[str, ...]] = {
    "ir": ("planner", "planner.ir", "planner.errors", "planner.dtypes"),
    "ops": ("planner.ops",),
    "graph": ("planner.graph",),
    "io": ("planner.io",),
    "target": ("planner.target",),
    "importers": ("planner.importers", "planner.zoo"),
    "frontend": ("planner.frontend",),
    "step": ("planner.step",),
    "costs": ("planner.costs",),
    "schedule": ("planner.schedule",),
    "memory": ("planner.memory",),
    "plan": ("planner.plan", "planner.evaluation", "planner.verify", "planner.report",
             "planner.runtime"),
    "driver": ("planner.pipeline", "planner.limits", "planner.beside", "planner.collection",
               "planner.fit", "planner.curve"),
    "codegen": ("codegen",),
    "command": ("planner.cli", "planner.torch"),
}
# The command modules where planner and codegen meet.
WIRES_CODEGEN = ("planner.torch", "planner.cli.main")


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of planner/ and codegen/."""
    out = {}
    for package in ("planner", "codegen"):
        for f in sorted((ROOT / package).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def unit(module: str) -> str:
    """The folder or file of LAYERS that `module` is, or is under (the longest)."""
    names = [n for names in LAYERS.values() for n in names
             if module == n or module.startswith(n + ".")]
    if not names:
        raise AssertionError(f"{module}: in no layer of tests/test_layers.py; add its folder")
    return max(names, key=len)


def layer(module: str) -> str:
    """The layer of a module (module docstring)."""
    return next(name for name, units in LAYERS.items() if unit(module) in units)


def folder(module: str) -> str:
    """The top folder of planner/ that holds `module` (planner.importers for
    planner.importers.torch.rules; codegen for codegen/), or the module itself for a file
    directly under planner/."""
    return "codegen" if module.startswith("codegen") else ".".join(module.split(".")[:2])


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
            names = {f"{base}.{a.name}" for a in node.names}
            named.update(names)
            if not names <= known.keys():  # `from package import module` reads no __init__
                named.add(base)
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
    """Imports of a higher layer, and planner modules other than the two that wire codegen in
    importing codegen."""
    rank = {name: k for k, name in enumerate(LAYERS)}
    bad = []
    for a, b in sorted(g.edges):
        if b.startswith(a + "."):
            continue  # a package re-exporting its own modules (planner's lazy `prepare`)
        if rank[layer(b)] > rank[layer(a)]:
            bad.append(f"{a} ({layer(a)}) imports {b} ({layer(b)})")
        elif (a.startswith("planner") and b.startswith("codegen")
              and not any(a == w or a.startswith(w + ".") for w in WIRES_CODEGEN)):
            bad.append(f"{a} imports {b}: only {' and '.join(WIRES_CODEGEN)} wire codegen in")
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
        "planner.cli.fit imports codegen.build: only planner.torch and planner.cli.main wire "
        "codegen in"]
    assert layer("planner.memory.gpu") == "memory" and layer("planner.report.memory") == "plan"


# What the independent checker may read of planner/graph/: its validity rules (the IR is
# planner/ir/), not the builders of what it checks (the evaluation graph; autodiff and the
# data-parallel rewrite are the front end's and the step's, VERIFY_CHECKS).
VERIFY_READS_OF_GRAPH = {"planner.graph.validate"}
# The stages the checker checks: it imports none of them.
VERIFY_CHECKS = ("planner.memory", "planner.schedule", "planner.costs", "planner.pipeline",
                 "planner.frontend", "planner.step")


def stage_imports(g: nx.DiGraph) -> list[str]:
    """planner verify importing a stage (memory planning, the scheduler, the cost model, the
    driver, the front end and its passes, the step graph's passes) or a graph builder, and
    codegen importing
    memory planning: each takes what it needs from the plan (docs/architecture.md)."""
    bad = []
    for a, b in sorted(g.edges):
        if a.startswith("planner.verify") and (
                b.startswith(VERIFY_CHECKS) or (b.startswith("planner.graph")
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


def both_ways(g: nx.DiGraph) -> list[str]:
    """Pairs of folders (or files directly under planner/) each importing the other."""
    edges = {(folder(a), folder(b)) for a, b in g.edges} - {(f, f) for f in map(folder, g)}
    return [f"{a} and {b} import each other" for a, b in sorted(edges) if a < b and (b, a) in edges]


def test_no_two_folders_import_each_other():
    assert both_ways(import_graph()) == []
    assert both_ways(nx.DiGraph([("planner.ops.conv", "planner.graph.builder"),
                                 ("planner.graph.builder", "planner.ops.base"),
                                 ("planner.importers.torch.rules", "planner.importers.kit")])) == [
        "planner.graph and planner.ops import each other"]


def unit_in(package: str, module: str) -> str | None:
    """The module or subfolder directly in `package` that is or holds `module` (None: outside
    it, or the package itself)."""
    rest = module[len(package) + 1:] if module.startswith(package + ".") else None
    return f"{package}.{rest.split('.')[0]}" if rest else None


def units_in_cycles(g: nx.DiGraph) -> list[str]:
    """Inside every folder, at every depth (planner/, planner/memory/, planner/step/collectives/,
    codegen/, ...): its units (each module directly in it, each subfolder taken whole) in an
    import cycle, and a module importing a folder above it whose __init__ imports the module's
    own unit back (an import that runs upward into the package that holds it)."""
    packages = {m for m, p in modules().items() if p.name == "__init__.py"} | {
        a for a in g if a in ("planner", "codegen")}
    bad = []
    for package in sorted(packages):
        units = nx.DiGraph()
        for a, b in g.edges:
            ua, ub = unit_in(package, a), unit_in(package, b)
            if ua and ub and ua != ub:
                units.add_edge(ua, ub)
            elif ua and b == package and any(unit_in(package, c) == ua
                                             for c in g.successors(package)):
                bad.append(f"{a} imports {package}, whose __init__ imports {ua}")
        bad += [f"{package}: {' -> '.join(sorted(c))} import each other in a cycle"
                for c in sorted(nx.simple_cycles(units), key=sorted)]
    return bad


def test_no_folder_has_an_import_cycle_among_its_modules_and_subfolders():
    assert units_in_cycles(import_graph()) == []
    # A subfolder importing back up into a sibling that imports it, and a module importing
    # the package __init__ that imports it: each fails the check.
    assert units_in_cycles(nx.DiGraph([
        ("planner.memory.budget.solver", "planner.memory.floor"),
        ("planner.memory.floor", "planner.memory.budget.search"),
        ("planner.step", "planner.step.collectives"),
        ("planner.step.collectives.data_parallel", "planner.step")])) == [
        "planner.memory: planner.memory.budget -> planner.memory.floor import each other in a "
        "cycle",
        "planner.step.collectives.data_parallel imports planner.step, whose __init__ imports "
        "planner.step.collectives"]


def test_no_two_importers_import_each_other():
    """Inside planner/importers/ too: the .pt2 reader builds on the ATen importer (its rules,
    records, decomposition) and the ATen importer on the ONNX one's context, never back."""
    def sub(module: str) -> str:
        return ".".join(module.split(".")[:3])

    edges = {(sub(a), sub(b)) for a, b in import_graph().edges
             if a.startswith("planner.importers.") and b.startswith("planner.importers.")
             and sub(a) != sub(b)}
    assert sorted((a, b) for a, b in edges if (b, a) in edges) == []


def test_every_module_is_in_a_layer_by_its_folder():
    assert [m for m in modules() if not any(
        m == n or m.startswith(n + ".") for names in LAYERS.values() for n in names)] == []
    assert [layer(m) for m in ("planner.ir.graph", "planner.graph.builder", "planner.io.read",
                               "planner.importers.torch.rules", "planner.report.trace",
                               "planner.pipeline.explain", "planner.torch.training")] == [
        "ir", "graph", "io", "importers", "plan", "driver", "command"]
